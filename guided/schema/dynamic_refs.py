"""``$dynamicRef`` (2020-12) and ``$recursiveRef`` (2019-09) where they are plain ``$ref`` s.

A dynamic reference first resolves like ``$ref``. Only when that target is a "bookend" (it declares
the fragment's name with ``$dynamicAnchor``, or ``$recursiveAnchor: true`` for ``$recursiveRef``)
is the dynamic scope searched, and the outermost resource in it that declares the same anchor is
used instead. So the reference is exactly a ``$ref`` to its first target when

* the fragment is not a plain name (a JSON pointer, or none, for ``$dynamicRef``),
* the target is no bookend (an ``$anchor``, a ``$dynamicAnchor`` of another name, no
  ``$recursiveAnchor``), or
* the schema and the registry documents it reaches declare that anchor once only: any resource the
  search could find is the target's own.

``static_dynamic_refs`` rewrites those into ``$ref`` (the grammar is built from static targets);
any other dynamic reference, whose target depends on the path that reached it, is a
``SchemaError`` naming it.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import urldefrag

from guided.errors import SchemaError
from guided.limits import DATA_KEYWORDS
from guided.schema.resolver import SchemaResolver, escape_pointer, join_uri

__all__ = ["static_dynamic_refs"]

_KEYS = ("$dynamicRef", "$recursiveRef")


def _dicts(node, path: str = "#"):
    """Every schema object under ``node`` with its JSON pointer (data keywords' values skipped)."""
    stack = [(node, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            yield value, where
            stack.extend((v, f"{where}/{escape_pointer(k)}") for k, v in value.items()
                         if k not in DATA_KEYWORDS and isinstance(v, (dict, list)))  # fmt: skip
        elif isinstance(value, list):
            stack.extend((v, f"{where}/{i}") for i, v in enumerate(value) if isinstance(v, (dict, list)))


def static_dynamic_refs(schema, registry: dict | None, resolver: SchemaResolver) -> tuple[object, dict | None]:
    """(schema, registry) with every dynamic reference that is a plain ``$ref`` written as one
    (copied where changed; the same objects when there is none); raises SchemaError for the others.
    ``resolver``: one built over them, which counted the dynamic references it indexed (without a
    registry the schema is walked no further when it has none)."""
    if not registry and not resolver.dynamic_refs:
        return schema, registry
    docs = _reached(schema, registry or {}, resolver)  # (indexes the registry documents reached)
    if not resolver.dynamic_refs:
        return schema, registry
    dynamic, recursive = Counter(), 0
    for doc, at in docs:
        for d, _ in _dicts(doc, at):
            if isinstance(d.get("$dynamicAnchor"), str):
                dynamic[d["$dynamicAnchor"]] += 1
            recursive += d.get("$recursiveAnchor") is True
    static: set[int] = set()
    for doc, at in docs:
        for d, where in _dicts(doc, at):
            for key in _KEYS:
                ref = d.get(key)
                if not isinstance(ref, str):
                    continue
                base = resolver.base_of.get(id(d), resolver.root_base)
                target = resolver.resolve(ref, base, f"{where}/{key}")[0]  # (a dangling one raises)
                if key == "$dynamicRef":
                    name = urldefrag(join_uri(base, ref))[1]
                    bookend = isinstance(target, dict) and target.get("$dynamicAnchor") == name
                    scoped = bookend and bool(name) and not name.startswith("/") and dynamic[name] > 1
                    what = f"$dynamicAnchor {name!r}"
                else:
                    scoped = isinstance(target, dict) and target.get("$recursiveAnchor") is True and recursive > 1
                    what = "$recursiveAnchor true"
                if scoped:
                    raise SchemaError(
                        f"{key} {ref!r} resolves through the dynamic scope (more than one schema declares "
                        f"{what}), which is not supported: the grammar is built from static targets",
                        f"{where}/{key}",
                    )
                static.add(id(d))
    new_registry = None if registry is None else {uri: _rewrite(doc, static) for uri, doc in registry.items()}
    return _rewrite(schema, static), new_registry


def _reached(schema, registry: dict, resolver: SchemaResolver) -> list[tuple[object, str]]:
    """The schema and the registry documents its references reach, transitively: (document, the
    JSON pointer its paths begin with). Only their anchors can be found by a dynamic reference."""
    docs, seen, i = [(schema, "#")], set(), 0
    while i < len(docs):
        doc, _ = docs[i]
        i += 1
        for d, _ in _dicts(doc):
            for key in ("$ref", *_KEYS):
                ref = d.get(key)
                if not isinstance(ref, str):
                    continue
                uri = urldefrag(join_uri(resolver.base_of.get(id(d), resolver.root_base), ref))[0]
                if uri in registry and uri not in seen:
                    seen.add(uri)
                    resolver.resolve(uri, uri, "#")  # indexed: its bases and anchors are known
                    docs.append((registry[uri], uri + "#"))
    return docs


def _rewrite(node, static: set[int]):
    """``node`` with each schema object of ``static`` taking its dynamic reference as a ``$ref``
    (beside an own ``$ref``: in an ``allOf``, as both apply in place), copied only where changed."""
    if isinstance(node, list):
        items = [_rewrite(x, static) for x in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    if not isinstance(node, dict):
        return node
    out = {k: (v if k in DATA_KEYWORDS else _rewrite(v, static)) for k, v in node.items()}
    if id(node) in static:
        for key in _KEYS:
            if key in out:
                ref = out.pop(key)
                if "$ref" in out:
                    out["allOf"] = [*out.get("allOf", []), {"$ref": ref}]
                else:
                    out["$ref"] = ref
    elif all(out[k] is node[k] for k in node):
        return node
    return out
