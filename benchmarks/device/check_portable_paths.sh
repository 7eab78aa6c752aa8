#!/usr/bin/env bash
# The portable code paths on an NVIDIA GPU: what sm_80 and AMD compile (no inline PTX, the
# integer fp8 encoding, no PDL), forced with JITKERN_PORTABLE_PATHS=1 and checked against
# the references and golden vectors by the GPU test mode. From the repo root, on the H200:
#
#   bash benchmarks/device/check_portable_paths.sh [pytest args...]     (default: tests)
#
# Expects, like run_checks.sh, .whl/ (pydantic and its dependencies as cp312 wheels)
# carried beside the tree. Steps:
#   1. warm a fresh cache with the portable binaries of every shipped manifest and of the
#      layout manifests the GPU tests load (tests/manifests), for this GPU (they are other
#      binaries than the NVIDIA paths', so another cache), with their IR (step 2 reads the PTX);
#   2. the whole GPU test mode with the switch on: every reference, golden-vector, graph and
#      no-compile test on the portable paths; test_the_code_paths_this_process_runs fails if
#      the switch did not take (PTX markers of the NVIDIA paths);
#   3. without the switch, the tests that run both paths of Step5 on the same inputs and the
#      PDL check, so both modes are seen in one call.
# Each step runs even if one before it failed; the summary lines come last.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$(mktemp -d /tmp/portable-cache.XXXXXX)}"
summary=()
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*"
  local start=$SECONDS
  timeout "$limit" "$@"
  summary+=("$name: exit $? in $((SECONDS - start)) s")
}
python3 -c "import sys, torch, triton; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, Triton {triton.__version__}, {torch.cuda.get_device_name()}')"
step warm-portable 240 env JITKERN_PORTABLE_PATHS=1 python3 -m jitkern.warmup warmup_manifests/*.json \
  tests/manifests/*.json --keep-ir --no-progress
step tests-portable 420 env JITKERN_PORTABLE_PATHS=1 JITKERN_TEST_MODE=gpu \
  python3 -m pytest -q -p jitkern_pytest -p no:cacheprovider -rs "${@:-tests}"
step both-paths 180 env -u JITKERN_PORTABLE_PATHS JITKERN_TEST_MODE=gpu \
  python3 -m pytest -q -s -p jitkern_pytest -p no:cacheprovider \
  tests/step5/test_gpu.py tests/step5/test_summary_update.py tests/deepseek_v4/test_dsv4_gpu.py \
  -k "code_paths or portable_paths or fp8_encoding or pdl_is_launched"
printf '%s\n' "${summary[@]}"
