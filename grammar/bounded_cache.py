"""BoundedCache: a thread-safe map that keeps at most ``max_entries`` entries, least recently used out.

The one bounded cache of the project (compiled grammars, token masks, forced tokens, vocabulary
indexes, slices, ...): a plain ``OrderedDict`` in LRU order behind one lock. ``get`` counts as a use;
``get_or_create`` builds a missing value outside the lock (two threads may build the same value; the
first one stored wins, so callers must build equal values). ``on_evict(value)``, when given, is
called for every value the cache drops (evicted, replaced, popped or cleared), under its lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING = object()


class BoundedCache(Generic[K, V]):
    """LRU map of at most ``max_entries`` entries; every method is safe to call from any thread."""

    __slots__ = ("max_entries", "_data", "_lock", "hits", "misses", "on_evict")

    def __init__(self, max_entries: int, on_evict: Callable[[V], None] | None = None):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0  # statistics
        self.on_evict = on_evict

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: K) -> bool:
        return key in self._data

    def get(self, key: K, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                return default
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: K, value: V) -> V:
        """Store ``value`` under ``key`` (replacing any), evicting the least recently used past the bound."""
        with self._lock:
            old = self._data.get(key, _MISSING)
            self._data[key] = value
            self._data.move_to_end(key)
            if old is not _MISSING and old is not value:
                self._dropped(old)
            self._evict()
        return value

    def setdefault(self, key: K, value: V) -> V:
        """The value already stored under ``key``, else store and return ``value``."""
        with self._lock:
            old = self._data.get(key, _MISSING)
            if old is not _MISSING:
                self._data.move_to_end(key)
                return old
            self._data[key] = value
            self._evict()
            return value

    def get_or_create(self, key: K, create: Callable[[], V]) -> V:
        """The value of ``key``, built with ``create()`` (outside the lock) when it is missing."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = self.setdefault(key, create())
        return value

    def __getstate__(self):
        with self._lock:
            return {"max_entries": self.max_entries, "data": list(self._data.items()), "on_evict": self.on_evict}

    def __setstate__(self, state) -> None:
        self.__init__(state["max_entries"], state.get("on_evict"))
        self._data.update(state["data"])

    def items(self) -> list[tuple[K, V]]:
        """A snapshot of the entries, least recently used first (not counted as uses)."""
        with self._lock:
            return list(self._data.items())

    def pop(self, key: K, default=None):
        with self._lock:
            value = self._data.pop(key, _MISSING)
            if value is _MISSING:
                return default
            self._dropped(value)
            return value

    def clear(self) -> None:
        with self._lock:
            values = list(self._data.values())
            self._data.clear()
            for value in values:
                self._dropped(value)

    def _evict(self) -> None:
        while len(self._data) > self.max_entries:
            self._dropped(self._data.popitem(last=False)[1])

    def _dropped(self, value) -> None:
        if self.on_evict is not None:
            self.on_evict(value)
