"""JSON arrays: ``prefixItems``/``items`` (and draft-07 tuple ``items``/``additionalItems``),
``minItems``/``maxItems``, ``contains`` with ``minContains``/``maxContains``, and ``uniqueItems``
where the items come from a small finite set of values.

``contains`` is any items around the ``minContains`` counted ones (an item meeting ``items`` and
``contains``, met as one schema); with ``maxContains`` it splits each element into "matches" and
"does not match" (a complement) and counts the matches;
``uniqueItems`` over finite values intersects one "this value at most once" language per value.
Unique items of an unbounded kind (strings, numbers, any value) are not a regular language: when
``compile_json_schema`` checked the places (``unique_plan``), the grammar accepts the arrays as they
are and the matcher refuses duplicate items (``unique_runtime``); otherwise an error, or with
``lenient`` a warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from guided.errors import SchemaError
from guided.grammar.regex_ast import EMPTY, EPSILON, Node, alt, intersect, literal, optional, repeat, seq
from guided.schema.complement import complement
from guided.schema.facts import disjoint
from guided.schema.unique_plan import MAX_UNIQUE_VALUES, finite_values

if TYPE_CHECKING:  # the lowering calls these helpers with itself
    from guided.schema.lowering import SchemaLowering


__all__ = ["array_node", "MAX_UNIQUE_VALUES"]


def array_node(lowering: SchemaLowering, schema: dict, path: str, base: str, place) -> Node:
    prefix = schema.get("prefixItems") or []
    items = schema.get("items")
    items_path = f"{path}/items"
    prefix_path = f"{path}/prefixItems"
    if isinstance(items, list):  # draft-07 tuple form
        prefix, prefix_path = items, items_path
        items, items_path = schema.get("additionalItems", True), f"{path}/additionalItems"
    if items is None:
        if "unevaluatedItems" in schema and _no_in_place(schema):
            items, items_path = schema["unevaluatedItems"], f"{path}/unevaluatedItems"
        elif "unevaluatedItems" in schema:
            lowering.relax("unevaluatedItems next to in-place applicators is not supported", f"{path}/unevaluatedItems")
        if items is None:
            items = True
    if not isinstance(prefix, list):
        raise SchemaError("prefixItems must be an array", prefix_path)
    lo, hi = lowering.count(schema, "minItems", 0, path), lowering.count(schema, "maxItems", None, path)
    heads = [lowering.lower(s, f"{prefix_path}/{i}", base, place.item(i)) for i, s in enumerate(prefix)]
    item = lowering.lower(items, items_path, base, place.item(None))
    if "contains" in schema and not heads and hi is None and lo <= _least_counted(lowering, schema, path):
        node = _contains(lowering, schema, heads, item, items, path, base, place)  # its elements are items already
    else:
        node = _wrap(lowering, _list(lowering, heads, item, lo, hi))
        if "contains" in schema:
            lowering.intersected += lowering.at_mandatory
            node = intersect(node, _contains(lowering, schema, heads, item, items, path, base, place))
    if schema.get("uniqueItems") is True and (hi is None or hi > 1):
        lowering.intersected += lowering.at_mandatory
        node = intersect(node, *_unique(lowering, schema, prefix, items, path, base))
    return node


def _no_in_place(schema: dict) -> bool:
    return not any(k in schema for k in ("allOf", "anyOf", "oneOf", "if", "$ref", "not"))


def _wrap(lowering: SchemaLowering, body: Node) -> Node:
    return seq(literal("["), lowering.ws, body, lowering.ws, literal("]"))


def _list(lowering: SchemaLowering, heads: list[Node], item: Node, lo: int, hi: int | None) -> Node:
    """Comma-separated elements: heads[i] at index i, then ``item``; lo..hi of them."""
    if hi is not None and hi < lo:
        return EMPTY
    if hi == 0:
        return EPSILON
    k, j = len(heads), max(len(heads), 1)
    # rest: what may follow once the elements before index i are written, built from the end
    if hi is not None and hi < j:
        rest = EPSILON
    else:
        rest = repeat(seq(lowering.sep, item), max(lo - j, 0), None if hi is None else hi - j)
    for i in range(min(k, k if hi is None else hi) - 1, 0, -1):
        step = seq(lowering.sep, heads[i], rest)
        rest = optional(step) if i >= lo else step
    first = seq(heads[0] if k else item, rest)
    return optional(first) if lo == 0 else first


def _least_counted(lowering: SchemaLowering, schema: dict, path: str) -> int:
    """The fewest elements an array meeting ``contains`` has: ``minContains`` (1), where no
    ``maxContains`` bounds the count (then at least that many are counted); else 0."""
    if lowering.count(schema, "maxContains", None, path) is not None:
        return 0
    return lowering.count(schema, "minContains", 1, path)


def _contains(lowering: SchemaLowering, schema: dict, heads, item: Node, items, path: str, base: str, place) -> Node:
    if heads:
        lowering.relax("contains together with prefixItems is not supported", f"{path}/contains")
        return lowering.any_value()
    a, b = lowering.count(schema, "minContains", 1, path), lowering.count(schema, "maxContains", None, path)
    if b is not None and b < a:
        return EMPTY
    if a > 0 and disjoint([items, schema["contains"]], lowering.resolver, base):
        # no item can be counted (``{"items": {"type": "string"}, "contains": {"type": "number"}}``,
        # as the complement of an array of strings meets its items): no array, and no intersection
        # of the two item languages to build (one with schema-free values would need a bound)
        return EMPTY
    sep = lowering.sep
    if b is None and a == 0:  # nothing to count: any items
        return _wrap(lowering, optional(seq(item, repeat(seq(sep, item)))))
    x = _counted(lowering, schema, item, items, path, base, place)
    if b is None:  # at least a counted: any items around a counted ones, no complement needed
        before = repeat(seq(item, sep))
        gap = seq(sep, before)
        return _wrap(lowering, seq(before, x, repeat(seq(gap, x), a - 1, a - 1), repeat(seq(sep, item))))
    # the items not counted: refused by `contains` (lower() put this schema in PLAIN mode: `item` is
    # PLAIN, as a complement needs beside it)
    cond = lowering.lower(schema["contains"], f"{path}/contains", base, place.item(None))
    refused = complement(lowering, schema["contains"], f"{path}/contains", base, place.item(None))
    y = lowering.conjoin([item, refused]) if cond != lowering.any_value() else EMPTY
    ys = repeat(seq(lowering.sep, y))
    xs = seq(lowering.sep, x, ys)
    body = alt(
        EPSILON if a == 0 else EMPTY,
        seq(y, ys, repeat(xs, a, b)),
        seq(x, ys, repeat(xs, max(a - 1, 0), None if b is None else b - 1)) if b != 0 else EMPTY,
    )
    return _wrap(lowering, body)


def _counted(lowering: SchemaLowering, schema: dict, item: Node, items, path: str, base: str, place) -> Node:
    """The items ``contains`` counts: ``items`` and ``contains`` met as one schema (an ``allOf``,
    which merges where that is exact: a closed object beside the refusal of one, as oneOf
    exclusivity writes it, is no object at all), else the two languages intersected."""
    sub = schema["contains"]
    if not isinstance(items, dict) or not isinstance(sub, dict):
        return lowering.conjoin([item, lowering.lower(sub, f"{path}/contains", base, place.item(None))])
    both = lowering.memo_rewrite((id(schema), base, "counted"), schema, lambda: {"allOf": [items, sub]})
    return lowering.lower(both, f"{path}/contains", base, place.item(None))


def _unique(lowering: SchemaLowering, schema: dict, prefix: list, items, path: str, base: str) -> list[Node]:
    values = finite_values(lowering.resolver, items, base)
    for s in prefix:
        more = finite_values(lowering.resolver, s, base)
        values = None if values is None or more is None else values + [v for v in more if v not in values]
    if values is None or len(values) > MAX_UNIQUE_VALUES:
        if lowering.unique_runtime and not lowering.negations:
            return []  # the matcher refuses duplicate items (unique_runtime; unique_plan checked this place)
        why, where = lowering.unique_refusal, f"{path}/uniqueItems"
        if lowering.unique_runtime:  # (the plan checked this place, but here it is complemented)
            why = ("it sits inside a complement (oneOf exclusivity, not, the else of if), where the "
                   "arrays with a repeated item would have to be generated")  # fmt: skip
        elif why is None:
            why = "the matcher's run-time check is not enabled (compile with compile_json_schema)"
        elif not isinstance(why, str):  # the plan's PlanError: its pointer names the place it refused
            why, where = why.reason, why.path
        lowering.relax(f"uniqueItems over items that are not a small finite set of values: {why}", where)
        return []
    lits = [lowering.value_literal(v) for v in values]
    out = []
    for i, lit in enumerate(lits):
        others = alt(*(m for j, m in enumerate(lits) if j != i))
        many = seq(others, repeat(seq(lowering.sep, others)))
        once = seq(optional(seq(many, lowering.sep)), lit, optional(seq(lowering.sep, many)))
        out.append(_wrap(lowering, alt(optional(many), once)))
    return out
