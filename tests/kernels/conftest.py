"""Kernel tests: each Triton kernel against its torch reference.

Kernels run on CPU only under Triton's interpreter, in a process started with
``TRITON_INTERPRET=1``. ``test_kernel_interpreter_session.py`` starts such a child pytest over this
folder; in the parent (without a GPU) the kernel-on-device tests skip and say so, and the child runs
them. On a CUDA machine the parent runs the same tests on the GPU, plus the ``gpu``-marked tests
at real shapes. ``TRITON_INTERPRET=1 pytest tests/kernels`` also works directly.
"""

from __future__ import annotations

import pytest
from kernel_env import kernel_device_or_skip


@pytest.fixture
def kernel_device() -> str:
    """Device for kernel-vs-reference tests at small shapes: cpu (interpreter) or cuda."""
    return kernel_device_or_skip()
