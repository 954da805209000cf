"""Keyword shapes: a malformed keyword is a ``SchemaError`` naming it, never silently ignored.

``check_shapes(schema)`` walks the schema positions the vocabulary defines (subschemas under
``properties``, ``items``, ``allOf`` ...) once, iteratively, and checks each assertion keyword's
JSON type: ``{"multipleOf": null}``, ``{"pattern": 3}``, ``{"properties": []}`` or
``{"required": 3}`` would otherwise be skipped by the lowering or fail with a bare ``TypeError``.
Unknown keywords are annotations and stay ignored, as the specification says.
"""

from __future__ import annotations

from guided.errors import SchemaError

__all__ = ["check_shapes", "is_count"]

_NUMBER = ("minimum", "maximum", "multipleOf")
_BOUND = ("exclusiveMinimum", "exclusiveMaximum")  # a number; a boolean in draft-04
_COUNT = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_COUNT_2019 = ("minContains", "maxContains")
_STRING = ("pattern", "format", "$ref", "$anchor")
_ONE = ("not", "if", "then", "else", "additionalProperties", "additionalItems", "contains",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties")  # fmt: skip
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


def _pointer(path: str, key) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_count(v) -> bool:
    """A size bound's value: a number, whole and not negative (``minItems``, ``maxLength`` ...)."""
    return _is_number(v) and v >= 0 and float(v).is_integer()


def _is_schema(v) -> bool:
    return isinstance(v, (dict, bool))


def _bad(what: str, path: str) -> SchemaError:
    return SchemaError(f"malformed keyword: {what}", path)


def check_shapes(schema) -> None:
    """Raise ``SchemaError`` for the first assertion keyword whose value has the wrong shape."""
    stack = [(schema, "#")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            stack.extend(_children(node, path))


def _children(s: dict, path: str) -> list[tuple[object, str]]:
    _check_values(s, path)
    out = []
    for k in _ONE:
        if k in s:
            out.append(_schema_at(s[k], _pointer(path, k)))
    for k in _MAP:
        if k in s:
            where = _pointer(path, k)
            if not isinstance(s[k], dict):
                raise _bad(f"{k!r} must be an object of schemas", where)
            out.extend(_schema_at(v, _pointer(where, name)) for name, v in s[k].items())
    for k in _LIST:
        if k in s:
            where = _pointer(path, k)
            if not isinstance(s[k], list) or (k != "prefixItems" and not s[k]):
                raise _bad(f"{k!r} must be a non-empty array of schemas", where)
            out.extend(_schema_at(v, _pointer(where, i)) for i, v in enumerate(s[k]))
    if "items" in s:
        items, where = s["items"], _pointer(path, "items")
        if isinstance(items, list):  # draft-07 tuple form
            out.extend(_schema_at(v, _pointer(where, i)) for i, v in enumerate(items))
        else:
            out.append(_schema_at(items, where))
    if isinstance(s.get("dependencies"), dict):
        where = _pointer(path, "dependencies")
        for name, v in s["dependencies"].items():
            if isinstance(v, list):
                _strings(v, f"'dependencies' entry {name!r}", _pointer(where, name))
            else:
                out.append(_schema_at(v, _pointer(where, name)))
    return out


def _schema_at(v, where: str) -> tuple[object, str]:
    if not _is_schema(v):
        raise _bad(f"expected a schema (an object or a boolean), got {type(v).__name__}", where)
    return v, where


def _strings(v, what: str, where: str) -> None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _bad(f"{what} must be an array of strings", where)


def _check_values(s: dict, path: str) -> None:
    for k in _NUMBER:
        if k in s and not _is_number(s[k]):
            raise _bad(f"{k!r} must be a number, got {s[k]!r}", _pointer(path, k))
    if "multipleOf" in s and not s["multipleOf"] > 0:
        raise _bad(f"'multipleOf' must be greater than 0, got {s['multipleOf']!r}", _pointer(path, "multipleOf"))
    for k in _BOUND:
        if k in s and not (_is_number(s[k]) or isinstance(s[k], bool)):
            raise _bad(f"{k!r} must be a number, got {s[k]!r}", _pointer(path, k))
    for k in _COUNT + _COUNT_2019:
        if k in s and not is_count(s[k]):
            raise _bad(f"{k!r} must be a non-negative integer, got {s[k]!r}", _pointer(path, k))
    for k in _STRING:
        if k in s and not isinstance(s[k], str):
            raise _bad(f"{k!r} must be a string, got {s[k]!r}", _pointer(path, k))
    if "uniqueItems" in s and not isinstance(s["uniqueItems"], bool):
        raise _bad("'uniqueItems' must be a boolean", _pointer(path, "uniqueItems"))
    if "enum" in s and not isinstance(s["enum"], list):
        raise _bad("'enum' must be an array", _pointer(path, "enum"))
    if "required" in s and not isinstance(s["required"], bool):  # a boolean is draft-03's form
        _strings(s["required"], "'required'", _pointer(path, "required"))
    if isinstance(s.get("dependentRequired"), dict):
        for name, v in s["dependentRequired"].items():
            _strings(v, f"'dependentRequired' entry {name!r}", _pointer(_pointer(path, "dependentRequired"), name))
    if "type" in s:
        _check_type(s["type"], _pointer(path, "type"))


def _check_type(t, where: str) -> None:
    names = t if isinstance(t, list) else [t]
    for name in names:
        if not isinstance(name, str) or name not in _TYPES:
            raise _bad(f"'type' must name JSON types ({', '.join(sorted(_TYPES))}), got {name!r}", where)
