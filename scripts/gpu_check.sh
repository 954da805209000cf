#!/usr/bin/env bash
# The GPU side of guided in one command:   scripts/gpu_check.sh [--dry-run] OUTDIR
#
# On a GPU machine (python3 with a CUDA torch and triton, no network; first run scripts/gpu_wheels.sh
# where there is a network and carry its folder, .whl by default or $GUIDED_WHEELS): installs those
# wheels and the project (editable, nothing fetched), then runs each step under its own time limit,
# writing a log and JSON results into OUTDIR:
#   warm     guided warm-up: numba's JIT of the mask code into its on-disk cache, once (~60 s cold on 2 cores), so
#            that the test workers and the engine load it instead of each compiling it again
#   tests    the kernel tests on the GPU, the gpu-marked tests (real shapes, engine vs HF)  gpu-tests.xml
#   kernels  benchmarks/kernels.py: bitmask apply vs xgrammar and torch, fused mask+sampling vs one
#            read of the logits, paged attention vs the copy bandwidth                    kernels-<gpu>.json
#   engine   benchmarks/gpu_engine.py: an 8B-shaped bf16 model drawn on the GPU; decode vs the roofline,
#            throughput and TTFT/TPOT at 1/64/256 with CUDA graphs on and off, guided overhead,
#            fast-forward on/off, HF generate        throughput-<gpu>.json, guided-overhead-<gpu>.json
#   speculative (opt-in: GUIDED_STEPS=speculative) benchmarks/speculative.py --device cuda: prompt-lookup
#            drafts (and the target as its own draft model) vs plain decoding       speculative-cuda.json
#   families (opt-in: GUIDED_STEPS=families) benchmarks/throughput.py --families-only: one row per model
#            family at the published configs' shapes (random bf16 weights)  throughput-families-gpu.json
# The whole run stays under 10 minutes on one H100/H200 (each step's limit below; families adds ~4).
#
# --dry-run: the same steps at toy sizes on CPU (tiny model, Triton interpreter, collection only for
# the tests), nothing installed; CI runs it so the GPU run cannot fail on a typo.
# Exit status 0 when every step passed; gpu_check.log says what each step printed.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
OUTDIR=${1:?usage: scripts/gpu_check.sh [--dry-run] OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG="$OUTDIR/gpu_check.log"
: >"$LOG"
export PYTHONUNBUFFERED=1
WHEELS=${GUIDED_WHEELS:-.whl}
if [ $DRY = 1 ] && [ -x .venv/bin/python ]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python3}; fi
# step limits in seconds (GPU run); a dry run's steps take seconds
T_WARM=${GUIDED_T_WARM:-240}
T_TESTS=${GUIDED_T_TESTS:-150}
T_KERNELS=${GUIDED_T_KERNELS:-100}
T_ENGINE=${GUIDED_T_ENGINE:-270}
T_FAMILIES=${GUIDED_T_FAMILIES:-300}
SUMMARY=()
FAILED=0

say() { echo "$@" | tee -a "$LOG"; }

step() {  # step NAME LIMIT COMMAND...: run with a time limit, output to the log, record the outcome
  local name=$1 limit=$2
  shift 2
  say "== $name (limit ${limit}s): $*"
  local start=$SECONDS
  timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  [ $rc = 124 ] && say "== $name: stopped at its ${limit}s limit"
  say "== $name: exit $rc after ${took}s"
  SUMMARY+=("$(printf '%-8s exit %3d  %4ds' "$name" "$rc" "$took")")
  [ $rc = 0 ] || FAILED=1
}

say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) dry_run=$DRY python=$PY commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
if [ $DRY = 0 ]; then
  nvidia-smi >>"$LOG" 2>&1 || say "nvidia-smi failed"
  if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    SITE=${GUIDED_SITE:-/tmp/guided-site}
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHEELS"/*.whl >>"$LOG" 2>&1 || say "installing the wheels from $WHEELS failed (see the log)"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  else
    say "no wheels in $WHEELS (scripts/gpu_wheels.sh makes them): using what the machine has"
  fi
  [ -d "$WHEELS/shared" ] && export GUIDED_SHARED="$(cd "$WHEELS/shared" && pwd)"
  if ! "$PY" -c 'import guided.engine, guided.schema' >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 \
      || say "the editable install of guided failed (see the log)"
  fi
fi
"$PY" - >>"$LOG" 2>&1 <<'PY'
import importlib, platform
import torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
for name in ("triton", "transformers", "tokenizers", "pydantic", "fastapi", "lark", "interegular", "jsonschema",
             "llguidance", "xgrammar", "guided"):
    try:
        module = importlib.import_module(name)
        print(f"  {name} {getattr(module, '__version__', '?')}")
    except Exception as e:  # reported, the steps below say what it breaks
        print(f"  {name}: NOT IMPORTABLE ({type(e).__name__}: {e})")
PY

# a rerun of part of the check: GUIDED_TESTS (test paths), GUIDED_STEPS (of warm,tests,kernels,engine,families,speculative),
# GUIDED_SECTIONS (of benchmarks/gpu_engine.py's sections)
read -r -a TEST_FILES <<<"${GUIDED_TESTS:-tests/kernels tests/engine/test_engine_parity.py tests/engine/test_engine_decode_graphs.py tests/engine/test_tensor_parallel.py}"
STEPS=${GUIDED_STEPS:-warm,tests,kernels,engine}
SECTIONS=()
[ -n "${GUIDED_SECTIONS:-}" ] && SECTIONS=(--sections "$GUIDED_SECTIONS")
wants() { [[ ",$STEPS," == *",$1,"* ]]; }
if [ $DRY = 1 ]; then
  wants warm && step warm 600 "$PY" -m guided warm-up
  # collection only: every test module imports, every gpu-marked test is found
  wants tests && step tests 120 "$PY" -m pytest -q -p no:cacheprovider --collect-only -m gpu "${TEST_FILES[@]}"
  wants kernels && step kernels 120 env TRITON_INTERPRET=1 "$PY" benchmarks/kernels.py --dry-run --out "$OUTDIR"
  wants engine && step engine 300 "$PY" benchmarks/gpu_engine.py --dry-run --out "$OUTDIR" "${SECTIONS[@]}"
  wants speculative && step speculative 120 "$PY" benchmarks/speculative.py --requests 2 --max-tokens 48 \
    --draft-model self --out "$OUTDIR"
  wants families && step families 120 "$PY" benchmarks/throughput.py --families-only --skip-gpu \
    --families llama,gemma3 --out "$OUTDIR"
else
  # first: a fresh machine has no numba cache, and each of the test workers below would JIT it all again
  wants warm && step warm "$T_WARM" "$PY" -m guided warm-up
  XDIST=()
  "$PY" -c 'import xdist' >/dev/null 2>&1 && XDIST=(-n "${GUIDED_TEST_WORKERS:-8}")  # Triton compiles in parallel
  # a test past its own limit fails alone, and -rfE names every failure in the log, where the step's limit
  # stopping pytest would leave only a row of F (2026-11-29: which tests failed was never known)
  PER_TEST=()
  "$PY" -c 'import pytest_timeout' >/dev/null 2>&1 && PER_TEST=(--timeout "${GUIDED_TEST_TIMEOUT:-90}")
  wants tests && step tests "$T_TESTS" "$PY" -m pytest -q -rfE -p no:cacheprovider "${XDIST[@]}" "${PER_TEST[@]}" \
    --junitxml="$OUTDIR/gpu-tests.xml" \
    --deselect tests/kernels/test_kernel_interpreter_session.py::test_kernels_under_triton_interpreter \
    "${TEST_FILES[@]}"
  wants kernels && step kernels "$T_KERNELS" "$PY" benchmarks/kernels.py --out "$OUTDIR"
  EVERY=25
  [ -n "${GUIDED_SHARED:-}" ] && [ -d "$WHEELS/shared" ] && EVERY=1  # gpu_wheels.sh copied the sample itself
  wants engine && step engine "$T_ENGINE" "$PY" benchmarks/gpu_engine.py --out "$OUTDIR" --every "$EVERY" \
    --maskbench "${GUIDED_SHARED:-../shared}/data/maskbench" "${SECTIONS[@]}"
  wants families && step families "$T_FAMILIES" "$PY" benchmarks/throughput.py --families-only --out "$OUTDIR"
  wants speculative && step speculative 240 "$PY" benchmarks/speculative.py --device cuda --requests 64 --draft-model self \
    --out "$OUTDIR"
fi

"$PY" scripts/gpu_summary.py "$OUTDIR" 2>&1 | tee -a "$LOG"
say "steps:"
for line in "${SUMMARY[@]}"; do say "  $line"; done
exit $FAILED
