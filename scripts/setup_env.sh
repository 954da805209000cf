#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment and installs guided into it, editable,
# with its dev tools. Idempotent: a second run only checks what is there.
#
# torch: a bare `torch` requirement pulls the newest CUDA build (gigabytes). Where the base Python
# already has a CUDA torch, the environment sees it (--system-site-packages) and nothing replaces
# it; elsewhere the CPU build torch==2.13.0 and triton 3.7.1 are installed before guided itself.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

has_cuda_torch() { "$1" -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; }

if [ ! -x "$VENV/bin/python" ]; then
  if has_cuda_torch "$PYTHON"; then
    echo "setup: $PYTHON has a CUDA build of torch; the environment reuses it"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --disable-pip-version-check -q)

if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "setup: installing torch==2.13.0 (CPU build)"
  "${PIP[@]}" torch==2.13.0
fi
if [ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] && ! "$PY" -c 'import triton' >/dev/null 2>&1; then
  echo "setup: installing triton==3.7.1"
  "${PIP[@]}" triton==3.7.1
fi
echo "setup: installing guided (editable) with its dev tools"
"${PIP[@]}" -e ".[dev]"
