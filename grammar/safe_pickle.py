"""Unpickling restricted to the classes a compiled grammar is made of.

The on-disk grammar cache (``guided.grammar.disk_cache``) reads files another process wrote: whatever
a file holds, loading it never calls anything but the constructors of guided's and numpy's classes,
builtin containers and Lark's token strings.
"""

from __future__ import annotations

import io
import pickle

__all__ = ["safe_loads"]

_BUILTINS = frozenset({"set", "frozenset", "dict", "list", "tuple", "bytearray", "complex", "slice", "range", "int",
                       "float", "bool", "str", "bytes"})  # fmt: skip
_OTHERS = frozenset({("collections", "OrderedDict"), ("copyreg", "_reconstructor"), ("_codecs", "encode"),
                     ("lark.lexer", "Token"), ("array", "_array_reconstructor"), ("array", "array")})  # fmt: skip


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (
            module.startswith(("guided.", "numpy"))
            or (module == "builtins" and name in _BUILTINS)
            or (module, name) in _OTHERS
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a grammar cache entry names {module}.{name}, which it may not")


def safe_loads(data: bytes):
    """``pickle.loads`` that refuses any class outside the grammar's own (UnpicklingError)."""
    return _Unpickler(io.BytesIO(data)).load()
