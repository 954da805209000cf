"""Run this folder's kernel tests in a child pytest under Triton's CPU interpreter.

TRITON_INTERPRET must be set before triton is imported, and setting it in this process would also
route other folders' CPU kernel calls through the (slow) interpreter, so the child gets its own
process and this test passes only if every test there passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_env import HAS_TRITON, INTERPRETING

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TIME_LIMIT_S = 600


@pytest.mark.skipif(INTERPRETING, reason="already inside the interpreter session")
@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_kernels_under_triton_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [
        sys.executable, "-m", "pytest", str(HERE), "-q", "-p", "no:cacheprovider",
        "-m", "not gpu", "-k", "not test_kernels_under_triton_interpreter",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    report = (proc.stdout + proc.stderr)[-8000:]
    assert proc.returncode == 0, f"interpreter session failed (exit {proc.returncode}):\n{report}"
    assert " passed" in proc.stdout, report
    assert "child session" not in proc.stdout, f"kernel tests skipped inside the child:\n{report}"


def test_interpreter_runs_the_triton_kernels():
    """Inside the child, the wrappers really launch the interpreted kernels, not the reference."""
    if not INTERPRETING:
        pytest.skip("checked inside the TRITON_INTERPRET=1 child session")
    import torch

    from guided.kernels._triton import use_triton
    from guided.kernels.bitmask import _apply_token_bitmask_kernel

    assert use_triton(torch.zeros(1), _apply_token_bitmask_kernel)
