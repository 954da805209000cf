"""Where this process can run the Triton kernels (shared by conftest and the test modules).

Triton fixes interpreter mode when it is imported, so kernels run on CPU only in a process started
with ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

INTERPRETING = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_CUDA = torch.cuda.is_available()


def kernel_device_or_skip() -> str:
    """Where the Triton kernels can run in this process: cpu (interpreter), cuda, or a skip."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    if INTERPRETING:
        return "cpu"
    if HAS_CUDA:
        return "cuda"
    pytest.skip("runs in the TRITON_INTERPRET=1 child session (test_kernel_interpreter_session.py)")
