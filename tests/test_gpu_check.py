"""scripts/gpu_check.sh --dry-run: every step of the GPU check at toy sizes on CPU, so that the run on a
GPU machine cannot fail on a typo (the GPU run itself is not part of CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import SHARED

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (SHARED / "data" / "maskbench").is_dir(), reason="needs ../shared (MaskBench schemas)")
def test_gpu_check_dry_run(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", str(tmp_path)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    log = (tmp_path / "gpu_check.log").read_text() if (tmp_path / "gpu_check.log").exists() else run.stdout
    assert run.returncode == 0, log[-4000:]
    kernels = json.loads((tmp_path / "kernels-cpu-dry-run.json").read_text())
    assert {"bitmask", "sampling", "paged_decode_attention", "kv_store", "grouped_gemm"} <= set(kernels)
    throughput = json.loads((tmp_path / "throughput-cpu-dry-run.json").read_text())
    assert {"decode", "throughput", "latency", "hf"} <= set(throughput)
    assert all("error" not in throughput[k] for k in ("decode", "hf"))
    guided = json.loads((tmp_path / "guided-overhead-cpu-dry-run.json").read_text())
    steered = guided["steered"]
    # the realistic workload: every steered request followed its target to the end
    assert all(r["steering"]["lost"] == 0 and set(r["finish"]) == {"stop"} for r in steered["rows"]), steered
    assert guided["fast_forward"]["ff_on"]["forced_fraction"] > 0.25
    assert "steps:" in log and "exit   0" in log
    assert "== warm: exit 0" in log and "guided warm-up: 36 outputs" in log  # the numba cache, before the workers


@pytest.mark.skipif(not (SHARED / "data" / "maskbench").is_dir(), reason="needs ../shared (MaskBench schemas)")
def test_gpu_check_opt_in_steps_dry_run(tmp_path):
    """The opt-in steps (GUIDED_STEPS=families,speculative) at toy sizes on CPU."""
    env = {**os.environ, "PYTHON": sys.executable, "GUIDED_STEPS": "families,speculative"}
    run = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", str(tmp_path)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    log = (tmp_path / "gpu_check.log").read_text() if (tmp_path / "gpu_check.log").exists() else run.stdout
    assert run.returncode == 0, log[-4000:]
    rows = json.loads((tmp_path / "throughput-families-cpu.json").read_text())["families"]
    assert [r["family"] for r in rows] == ["llama", "gemma3"]
    assert all(r["engine"]["output_tok_s"] > 0 and r["decode_b1_ms"] > 0 for r in rows)
    spec = json.loads((tmp_path / "speculative-cpu.json").read_text())
    assert spec["outputs_identical"] and spec["requests"] == 2
    assert spec["draft_model"]["outputs_identical"] and spec["draft_model"]["speculative"]["spec_draft_tokens"] > 0
