"""Compiles hold off Python's cyclic garbage collector, then collect their own garbage at once.

A compile allocates hundreds of thousands of objects that mostly live on (the grammar) or die by
reference counting. With the collector running, those allocations trigger its passes over and over,
and each full pass walks every object of the process (the vocabulary, every cached grammar): on the
hard MaskBench splits a third of compile time went to such passes, and passes started by a compile's
leftovers landed in later masks, 0.1-0.4 s each.

``quiet_collector()`` disables the collector while any compile runs (compiles on several threads
share one count; it is enabled again when the last one ends, and only if it was enabled before the
first began), drops what compiles remember only while compiles run (``at_rest``: the equal pairs of
``regex_ast``, the lowering's multipleOf automata) when the last one ends, and then runs one pass
over the two young generations only: no pass ran during
the compile, so they hold what was allocated since (the compile's cyclic garbage: closures of the
lowering, AST nodes) and little else, and the pass costs what the compile made, not what the process
holds. The grammar's objects that survive it go straight to the oldest generation, instead of being
walked again by the passes of the middle one that masks trigger.

Compiled grammars are kept free of reference cycles (see ``ExprPool``'s columns and
``GrammarCompiler``'s cache), so one evicted from a cache is freed at once, without a pass; the
freeing is then paid by the compile whose grammar evicts it (a few ms after a large grammar) rather
than by whichever mask a full pass lands in.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

__all__ = ["quiet_collector", "at_rest"]

_AT_REST: list = []  # called when the last compile running ends (``at_rest``)

_lock = threading.Lock()
_depth = 0  # compiles under way, on any thread
_reenable = False  # whether the collector was enabled when the first of them began


@contextmanager
def quiet_collector():
    """The block runs with the cyclic collector off; when the last such block ends, the collector is
    enabled again (if it was) and the two young generations are collected."""
    global _depth, _reenable
    with _lock:
        if _depth == 0:
            _reenable = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            last = _depth == 0
            if last:
                for forget in _AT_REST:
                    forget()
            if last and _reenable:
                gc.enable()
        if last and gc.get_count()[0] > gc.get_threshold()[0]:
            gc.collect(1)


def at_rest(forget):
    """Register ``forget()`` to run whenever the last compile running ends: for what compiles remember
    to share among themselves (caches of AST nodes), which would otherwise stay alive between compiles
    as objects every full pass of the collector walks. Returns ``forget``."""
    _AT_REST.append(forget)
    return forget
