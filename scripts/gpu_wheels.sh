#!/usr/bin/env bash
# Run here (with network) before scripts/gpu_check.sh runs on a GPU machine without one:
#   scripts/gpu_wheels.sh [DIR]          (DIR defaults to .whl, which git ignores)
# DIR gets every wheel the check needs that such a machine lacks (it has torch, triton, numba,
# transformers, tokenizers, safetensors, numpy, jinja2, prometheus-client): pinned versions, pure Python
# or manylinux x86-64 for CPython 3.12, no dependencies resolved (each one is named). DIR/shared gets the
# files of ../shared the check reads: the Llama 3 tokenizer and every 25th MaskBench schema.
# Carry DIR with the checkout; gpu_check.sh installs from it with no network. About 10 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.whl}
SHARED=${GUIDED_SHARED:-../shared}
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"

WHEELS=(
  fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 uvicorn==0.54.0
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing_extensions==4.16.0
  lark==1.3.1 interegular==0.3.3
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  opentelemetry-api==1.45.2
  llguidance==1.9.1 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2
  # an editable install of guided there needs a setuptools with PEP 660 (the image's may be older)
  setuptools==80.9.0
)
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for n in $(seq 17 39); do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d "$DIR" "${WHEELS[@]}"

if [ -d "$SHARED" ]; then
  mkdir -p "$DIR/shared/tokenizers" "$DIR/shared/data/maskbench"
  cp -r "$SHARED/tokenizers/llama3" "$DIR/shared/tokenizers/"
  "$PYTHON" - "$SHARED/data/maskbench" "$DIR/shared/data/maskbench" <<'PY'
import shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for f in sorted(src.glob("*.json"))[::25]:  # what benchmarks/gpu_engine.py samples (--every 25)
    shutil.copy(f, dst / f.name)
PY
else
  echo "gpu_wheels.sh: no $SHARED; the check will use the builtin tokenizer and skip the MaskBench pool" >&2
fi
du -sh "$DIR"
