#!/usr/bin/env bash
# Every H200 check of a release, in one device call (device time is short), from the repo root:
#
#   bash benchmarks/device/run_checks.sh [steps...]
#   steps: check tests launch start serving warps warmup step5 dsv4 store fused tuning (default: all)
#
# Expects two ignored folders carried beside the tree: .whl/ (pydantic, hypothesis and
# their dependencies as cp312 wheels: the device image lacks them) and .cache-h200/ (the
# shipped manifests compiled for cuda:90 on a CPU machine:
# python -m jitkern.warmup warmup_manifests/*.json --target cuda:90 --cache-dir .cache-h200 --keep-ir;
# some GPU tests read the PTX of the binaries they load).
# The golden vectors travel with the tree, in tests/golden/.
# Each step runs even if one before it failed; the summary lines come last.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD" TRITON_CACHE_DIR="$PWD/.cache-h200"
steps="${*:-check tests launch start serving warps warmup step5 dsv4 store fused tuning}"
summary=()
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  case " $steps " in *" $name "*) ;; *) return ;; esac
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@"
  summary+=("$name: exit $? in $((SECONDS - start)) s")
}
python3 -c "import sys, torch, triton; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, Triton {triton.__version__}, {torch.cuda.get_device_name()}')"
step check 120 python3 -m jitkern.warmup warmup_manifests/*.json --check --no-progress
step check 120 python3 benchmarks/device/h200_cache_check.py warmup_manifests/*.json
step tests 560 env JITKERN_TEST_MODE=gpu python3 -m pytest -q -p jitkern_pytest -p no:cacheprovider tests
step launch 420 python3 benchmarks/bench_launch.py
step start 180 python3 benchmarks/bench_start.py --runs 5 --cache-dir "$TRITON_CACHE_DIR"
step serving 300 python3 benchmarks/bench_serving_start.py --runs 3 --cache-dir "$TRITON_CACHE_DIR"
step warps 180 python3 benchmarks/device/check_warps.py
step warmup 300 python3 benchmarks/bench_warmup.py
step step5 180 python3 benchmarks/bench_step5.py
step dsv4 240 python3 benchmarks/bench_deepseek_v4.py
step store 240 python3 benchmarks/device/sweep_store.py
step fused 240 python3 benchmarks/device/sweep_decode_step.py
step tuning 560 python3 benchmarks/bench_tuning.py --cache-dir "$TRITON_CACHE_DIR"
printf '%s\n' "${summary[@]}"
