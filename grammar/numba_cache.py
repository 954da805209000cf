"""numba's on-disk cache, invalidated with the compiled code a function takes from other modules.

numba stamps a cached function with its own source file only. A compiled function that calls the
compiled functions of another module carries their machine code inlined: ``dfa_rows.rows`` holds
``expr_core``'s derivatives, ``compiled_cfg._walk`` earley's ``pure_slot``. After an edit or an
update of ``expr_core`` alone, the row builder loaded its old cached code and built rows with the
old derivatives (found when a change to ``expr_core.make_rep`` reached ``ExprPool.rep`` but not
the states ``dfa_rows`` made).

``install()`` puts locators in front of numba's own that answer for this package's files only: the
same cache places, with a stamp that also holds the contents of the package's modules the
function's module reaches through its globals (modules and compiled functions, transitively). Any
other function falls through to numba's locators. With a numba whose caching internals differ, it
does nothing (numba's own behaviour).

The first of them places a file's cache in one user-wide directory, ``$GUIDED_CACHE/numba`` (default
``~/.cache/guided/numba``), under a name made of the file's contents rather than its path: every copy
of the same sources (an installed wheel, a fresh clone, another virtual environment) loads the
machine code any of them compiled, where numba's ``__pycache__`` beside each copy compiled it all
again (the JIT of the mask code takes a cold process ~60 s on 2 cores). numba's stamps are content hashes, and
the index records numba's version and the CPU, so a shared entry is only ever loaded where it was
valid. An unwritable directory, or ``NUMBA_CACHE_DIR`` set, leaves numba's own places.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import types

try:
    from numba.core import caching
except ImportError:  # pragma: no cover - numba is a dependency; without its caching module, numba's behaviour
    caching = None

__all__ = ["install", "dependencies"]

_ROOT = os.path.dirname(os.path.abspath(__file__))  # the grammar package: every compiled function lives here


def _ours(path: str | None) -> bool:
    return bool(path) and os.path.abspath(path).startswith(_ROOT + os.sep)


@functools.cache
def dependencies(module_name: str) -> tuple[str, ...]:
    """The source files of this package's modules that ``module_name`` reaches through its globals
    (imported modules, and the modules of compiled functions it imported by name), transitively,
    its own file left out; sorted. Once per module (its imports come before its compiled functions):
    a module of many compiled functions walked them all again at start-up."""
    start = sys.modules.get(module_name)
    if start is None:
        return ()
    own = os.path.abspath(getattr(start, "__file__", "") or "")
    seen: dict[str, types.ModuleType] = {}
    stack = [start]
    while stack:
        module = stack.pop()
        for value in list(vars(module).values()):
            if isinstance(value, types.ModuleType):
                target = value
            elif hasattr(value, "py_func"):  # a numba dispatcher
                target = sys.modules.get(getattr(value.py_func, "__module__", ""))
            else:
                continue
            path = getattr(target, "__file__", None)
            if target is None or not _ours(path):
                continue
            path = os.path.abspath(path)
            if path not in seen and path != own:
                seen[path] = target
                stack.append(target)
    return tuple(sorted(seen))


def _stamped(base):
    """A locator class like ``base`` for this package's files whose stamp adds the dependencies'."""

    class Locator(base):
        @classmethod
        def from_function(cls, py_func, py_file):
            if not _ours(py_file):
                return None
            self = super().from_function(py_func, py_file)
            if self is not None:
                self._deps = dependencies(py_func.__module__)
            return self

        def get_source_stamp(self):
            stamps = []
            for path in self._deps:
                st = os.stat(path)
                stamps.append(caching._hash_source_file(path, st.st_mtime, st.st_size))
            return (super().get_source_stamp(), *stamps)

    Locator.__name__ = Locator.__qualname__ = f"Guided{base.__name__}"
    return Locator


def shared_root() -> str:
    """The user-wide directory of this package's numba caches."""
    root = os.environ.get("GUIDED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "guided")
    return os.path.join(root, "numba")


def cache_dir() -> str:
    """Where this package's compiled code is cached: ``NUMBA_CACHE_DIR`` where it is set (numba's own
    places then, as ``SharedCacheLocator.from_function`` defers to it), else ``shared_root``."""
    return (caching.config.CACHE_DIR if caching is not None else None) or shared_root()


def _shared_base():
    """numba's locator for a source file, placed by the file's contents under ``shared_root``."""

    class SharedCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            with open(py_file, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:24]
            name = os.path.splitext(os.path.basename(py_file))[0]
            self._cache_path = os.path.join(shared_root(), f"{name}-{digest}")

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if caching.config.CACHE_DIR:  # the user's own choice of place comes first
                return None
            return super().from_function(py_func, py_file)

    return SharedCacheLocator


def install() -> bool:
    """Put the locators in front of numba's (once); False where numba's caching differs."""
    try:
        classes = caching.CacheImpl._locator_classes
        bases = (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator)
        shared = _shared_base()
        caching._hash_source_file  # noqa: B018 - the stamp helper the locators use
    except AttributeError:
        return False
    if any(getattr(c, "__name__", "").startswith("Guided") for c in classes):
        return True
    for base in bases:
        if base in classes:
            classes.insert(classes.index(base), _stamped(base))
    if caching.InTreeCacheLocator in classes:  # before the stamped in-tree one
        classes.insert(classes.index(caching.InTreeCacheLocator) - 1, _stamped(shared))
    return True


install()  # on import: the grammar package imports this module before any module that compiles
