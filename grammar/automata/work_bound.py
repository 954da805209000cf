"""WorkBound: a per-thread deadline on lazy automaton work (masks, transitions, emptiness searches).

Lazy work runs on first visit, inside a request's mask or accept: a pathological state must fail that
request (``LimitError``) rather than stall the batch. ``with bound.limit(seconds, what):`` sets the
deadline for the calling thread (nested limits keep the earliest one); the work loops call ``check()``
now and then, which costs one clock read. Without a limit, ``check()`` does nothing.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from guided.errors import LimitError

__all__ = ["WorkBound"]


class WorkBound:
    def __init__(self):
        self._local = threading.local()

    @contextmanager
    def limit(self, seconds: float | None, what: str):
        """Bound the calling thread's work within the block to ``seconds`` (None: no bound)."""
        outer = getattr(self._local, "deadline", None)
        if seconds is None or (outer is not None and outer[0] <= time.monotonic() + seconds):
            yield
            return
        self._local.deadline = (time.monotonic() + seconds, seconds, what)
        try:
            yield
        finally:
            self._local.deadline = outer

    def remaining(self, within: float | None = None) -> float | None:
        """Seconds left before the calling thread's deadline, or before ``within`` seconds from now
        where that comes first: what ``limit(within, ...)`` would leave (None: no bound)."""
        d = getattr(self._local, "deadline", None)
        left = None if d is None else d[0] - time.monotonic()
        return within if left is None else left if within is None else min(left, within)

    def check(self) -> None:
        d = getattr(self._local, "deadline", None)
        if d is not None and time.monotonic() > d[0]:
            raise LimitError(f"{d[2]} took longer than its bound (mask_timeout_s={d[1]:g} s)")
