#!/usr/bin/env bash
# A release's H200 checks in three device calls (device time is short), from the repo root:
#
#   bash benchmarks/device/release_checks.sh proofs       # cache checks, tune, the GPU test suite
#   bash benchmarks/device/release_checks.sh benchmarks   # launch, start, serving start
#   bash benchmarks/device/release_checks.sh tuning       # tuned against default against Triton's autotuner
#
# Expects, carried beside the tree: .whl/ (pydantic's cp312 wheels: the device image lacks
# them) and .device-carry/caches.tar.xz, two caches of warmup_manifests/*.json and
# tests/manifests/*.json compiled for cuda:90 on a CPU machine (cache-bin: as warmed,
# binary-only; cache-ir: with --keep-ir, for the GPU tests that read PTX). What the notes
# keep lands in $OUT; each step runs under its own limit, the summary lines come last.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/c "$OUT" && tar -xJf .device-carry/caches.tar.xz -C /tmp/c
BIN=/tmp/c/cache-bin IR=/tmp/c/cache-ir GEMM=warmup_manifests/grouped-gemm-h200.json
MANIFESTS=(warmup_manifests/*.json tests/manifests/*.json)
summary=()
step() {  # step NAME TIMEOUT LOG COMMAND...: LOG, a file in $OUT the output also goes to, or -
  local name=$1 limit=$2 log=$3; shift 3
  echo "=== $name: $*"
  local start=$SECONDS
  if [ "$log" = - ]; then timeout "$limit" "$@"; else timeout "$limit" "$@" 2>&1 | tee "$OUT/$log"; fi
  summary+=("$name: exit ${PIPESTATUS[0]} in $((SECONDS - start)) s")
}
python3 -c "import sys, torch, triton; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, Triton {triton.__version__}, {torch.cuda.get_device_name()}')"
if [ "${1:-proofs}" = proofs ]; then
  export TRITON_CACHE_DIR=$BIN
  step check 120 - python3 -m jitkern.warmup "${MANIFESTS[@]}" --check --no-progress
  step load 150 - python3 benchmarks/device/h200_cache_check.py "${MANIFESTS[@]}"
  step tune 180 tune.txt python3 -m jitkern.warmup tune "$GEMM" --cache-dir "$BIN"
  step tune-check 60 - python3 -m jitkern.warmup tune "$GEMM" --cache-dir "$BIN" --check
  (cd "$BIN" && tar czf "$OUT/tables.tgz" tuning@*)
  for shape in experts=64,n=1408 experts=8,n=14336; do
    step export 60 - python3 -m jitkern.warmup tune "$GEMM" --cache-dir "$BIN" --where "$shape,mul_routed_weight=false" \
      --export-vllm "$OUT/vllm-${shape//[=,]/-}.json"
  done
  step load-tuned 150 - python3 benchmarks/device/h200_cache_check.py "${MANIFESTS[@]}"
  export TRITON_CACHE_DIR=$IR
  step tests 300 gpu-suite.txt env JITKERN_TEST_MODE=gpu python3 -m pytest -q -p jitkern_pytest -p no:cacheprovider \
    --durations=10 tests
  # again, in new processes that adopt the load memos the run above wrote (a restarted server's path)
  step tests-over-memos 300 gpu-suite-memos.txt env JITKERN_TEST_MODE=gpu python3 -m pytest -q -p jitkern_pytest \
    -p no:cacheprovider -n 6 tests
elif [ "$1" = benchmarks ]; then
  export TRITON_CACHE_DIR=$BIN
  step launch 300 bench-launch.txt python3 benchmarks/bench_launch.py --repeats 15
  step start 120 bench-start.txt python3 benchmarks/bench_start.py --runs 5 --cache-dir "$BIN"
  step serving 180 serving-start.txt python3 benchmarks/bench_serving_start.py --runs 3 --cache-dir "$BIN"
else  # tuning
  export TRITON_CACHE_DIR=$BIN
  step tuning 400 bench-tuning.txt python3 benchmarks/bench_tuning.py --cache-dir "$BIN"
fi
printf '%s\n' "${summary[@]}"
