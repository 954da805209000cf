"""Keywords by draft: a schema whose ``$schema`` names an older draft does not have the keywords later
drafts added, and a validator of that draft ignores them (``jsonschema.Draft4Validator`` skips ``if``
and ``const``; ``Draft7Validator`` skips ``dependentRequired``). ``for_draft`` drops them from every
subschema, with a warning naming them, so that the compiled language is the one the declared draft
validates. Without ``$schema`` (most schemas sent for generation) every keyword applies (2020-12).

The rest of the draft differences are read where the keyword is lowered: ``id`` as the base URI and
boolean ``exclusiveMinimum``/``exclusiveMaximum`` up to draft-04 (``resolver``, ``numbers``),
``$ref`` overriding its siblings up to draft-07 (``lowering``).
"""

from __future__ import annotations

import threading
import warnings

__all__ = ["for_draft", "unknown_keywords", "numeric_bounds"]

_LATER_THAN_07 = frozenset({
    "dependentRequired", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "minContains",
    "maxContains", "prefixItems", "$recursiveRef", "$recursiveAnchor", "$dynamicRef", "$dynamicAnchor",
})  # fmt: skip
_UNKNOWN = {
    "draft-04": _LATER_THAN_07 | {"const", "contains", "propertyNames", "if", "then", "else"},
    "draft-06": _LATER_THAN_07 | {"if", "then", "else"},
    "draft-07": _LATER_THAN_07,
    "2019-09": frozenset({"prefixItems", "$dynamicRef", "$dynamicAnchor"}),
}
# where subschemas sit: maps of name -> schema, single schemas, lists of schemas; values are never schemas
_MAPS = frozenset({"properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies"})
_DATA = frozenset({"enum", "const", "default", "examples", "example"})

_MEMO: dict[int, tuple[object, object]] = {}  # id(schema) -> (schema, result): a compile reads it twice
_MEMO_LOCK = threading.Lock()


def unknown_keywords(schema) -> frozenset[str]:
    """The keywords the draft named by the root's ``$schema`` does not have (empty when none is named)."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return frozenset()
    for draft, names in _UNKNOWN.items():
        if draft in uri:
            return names
    return frozenset()


def for_draft(schema, text: str | None = None):
    """The schema without the keywords its declared draft does not have (the same object when it
    uses none of them); warns once per compile naming what was dropped. ``text``, the schema's JSON
    (or a JSON text holding it), spares the walk when no such keyword occurs in it as a string."""
    drop = unknown_keywords(schema)
    if not drop:
        return schema
    with _MEMO_LOCK:
        hit = _MEMO.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        if any(hit[1] is schema for hit in _MEMO.values()):
            return schema  # already the result of this function
    dropped: set[str] = set()
    absent = text is not None and not any(f'"{k}"' in text for k in drop)
    out = schema if absent else _strip(schema, drop, dropped)
    if dropped:
        warnings.warn(
            f"JSON Schema: {schema['$schema']} has no {', '.join(sorted(dropped))}: ignored as its "
            "validators ignore them (leave $schema out, or name a later draft, to apply them)",
            stacklevel=3,
        )
    with _MEMO_LOCK:
        if len(_MEMO) > 32:
            _MEMO.clear()
        _MEMO[id(schema)] = (schema, out)
    return out


def _strip(node, drop: frozenset, dropped: set):
    """``node`` as a schema, copied only where something under it is dropped."""
    if isinstance(node, list):
        items = [_strip(x, drop, dropped) for x in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    out, changed = {}, False
    for key, value in node.items():
        if key in drop:
            dropped.add(key)
            changed = True
            continue
        if key in _DATA:
            new = value
        elif key in _MAPS and isinstance(value, dict):  # names are not keywords: only the values are schemas
            new = {k: _strip(v, drop, dropped) for k, v in value.items()}
            if all(new[k] is v for k, v in value.items()):
                new = value
        else:  # a subschema, a list of them, or an unknown keyword a $ref may point into
            new = _strip(value, drop, dropped)
        changed |= new is not value
        out[key] = new
    return out if changed else node


def numeric_bounds(schema: dict) -> dict:
    """The schema with draft-04's boolean ``exclusiveMinimum``/``exclusiveMaximum`` turned into the
    draft-06 numbers (a flag reads the ``minimum``/``maximum`` beside it; without one it asks
    nothing); numbers are left as they are."""
    out = dict(schema)
    for ex, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(ex)
        if isinstance(flag, bool):
            del out[ex]
            if flag and bound in out:
                out[ex] = out.pop(bound)
    return out
