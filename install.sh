#!/usr/bin/env bash
# Install jitkern, its redis extra and the test tools into ./.venv (safe to run again).
#
# Python 3.12 is preferred: Triton's cache key hashes its own libtriton, which differs
# per Python version, and the H200 machines run Python 3.12 with Triton 3.6.0. A cache
# compiled here is only used there when both sides run the same Triton wheel.
#
# torch 2.13.0 is the CPU build this workplace has on disk; it asks for Triton 3.7.1,
# which we replace by 3.6.0 (pip then prints a resolver warning: expected). Set
# TORCH_SPEC to install another torch (e.g. a CUDA build on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")"

pick_python() {
  for candidate in "${PYTHON:-}" python3.12 "$(pyenv root 2>/dev/null)/versions/3.12"*/bin/python python3.11 python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 12)))' 2>/dev/null; then
      echo "$candidate"; return
    fi
  done
  echo "install.sh: no Python 3.11 or 3.12 found (set PYTHON=/path/to/python3.12)" >&2
  exit 1
}

if [ ! -x .venv/bin/python ]; then
  "$(pick_python)" -m venv .venv
fi
pip() { .venv/bin/python -m pip "$@"; }

if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  echo "install.sh: installing ${TORCH_SPEC:-torch==2.13.0} (first run only)" >&2
  # --no-compile: byte-compiling all of torch takes half the install; the import below
  # compiles the modules a process imports, once.
  pip install -q --no-compile "${TORCH_SPEC:-torch==2.13.0}"
fi
# Triton decides cache keys: pin it to the GPU machines' version (see pyproject.toml).
pip install -q --no-deps "triton==3.6.0" 2>&1 | grep -v "dependency resolver\|requires triton" || true
pip install -q "numpy<2.4" "pydantic>=2.6,<3" "tqdm>=4.66" "pytest>=8" "pytest-xdist>=3.5" "hypothesis>=6.100" "redis>=5" "ruff>=0.6"
pip install -q --no-deps -e .
# Byte-compiles what a process imports (even where PYTHONDONTWRITEBYTECODE is set): every
# process the tests start imports torch, which from source takes twice as long.
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c 'import sys, torch, torch._dynamo, triton, jitkern.warmup, step5, deepseek_v4, pytest, hypothesis
print(f"install.sh: Python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}", file=sys.stderr)'
