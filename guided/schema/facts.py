"""Cheap, exact facts about schemas and regex AST nodes that let the lowering skip an intersection.

``disjoint``: no instance matches two of the schemas (then ``oneOf`` is ``anyOf``), proved from
types, constant values, discriminator properties and closed objects' required names.
``within``: a string language already implies length bounds (then no length intersection).
``json_equal``: JSON value equality (``1 == 1.0``, ``True != 1``).
"""

from __future__ import annotations

from guided.grammar.regex_ast import Alt, Chars, Node, Repeat, Seq

__all__ = ["TYPES", "disjoint", "within", "json_equal"]

TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


def within(parts: list[Node], lo: int, hi: int | None) -> bool:
    """Whether the string length bounds are implied by one of the other parts (then no And)."""
    for p in parts:
        a, b = _length_range(p)
        if a >= lo and (hi is None or (b is not None and b <= hi)):
            return True
    return False


def _length_range(n: Node) -> tuple[int, int | None]:
    """Exact (min, max) length of a complement-free node's strings; (0, None) when unknown."""
    if isinstance(n, Chars):
        return 1, 1
    if isinstance(n, Seq):
        lo, hi = 0, 0
        for x in n.items:
            a, b = _length_range(x)
            lo, hi = lo + a, None if hi is None or b is None else hi + b
        return lo, hi
    if isinstance(n, Alt):
        if not n.items:
            return 0, 0
        ranges = [_length_range(x) for x in n.items]
        his = [b for _, b in ranges]
        return min(a for a, _ in ranges), None if None in his else max(his)
    if isinstance(n, Repeat):
        a, b = _length_range(n.item)
        return a * n.min, None if n.max is None or b is None else b * n.max
    return 0, None


def json_equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def disjoint(subs: list, resolver, base: str, context: dict | None = None) -> bool:
    """Cheap proof that no instance matches two of the schemas (then oneOf is anyOf). ``context``:
    the schema beside them (the oneOf's siblings), which every instance that matters also meets:
    its ``type``, ``required`` and ``properties`` are read with each branch's."""
    sigs = []
    for s in subs:
        s = resolver.followed(s, base)
        if not isinstance(s, dict):
            return False
        sigs.append(_signature(_beside(s, context) if context else s))
    return all(_apart(sigs[i], sigs[j]) for i in range(len(sigs)) for j in range(i + 1, len(sigs)))


def _beside(s: dict, context: dict) -> dict:
    """A branch read with its context: the context's type where the branch has none, both
    ``required`` lists, and the context's properties where the branch names none (a branch's own
    value set holds what both allow, so it still proves what it proves alone)."""
    out = dict(s)
    if "type" not in out and "type" in context:
        out["type"] = context["type"]
    req = [r for part in (context.get("required"), s.get("required")) if isinstance(part, list) for r in part]
    if req:
        out["required"] = req
    props = {}
    for part in (context.get("properties"), s.get("properties")):
        if isinstance(part, dict):
            props.update(part)
    if props:
        out["properties"] = props
    return out


def _values(s: dict):
    values = [s["const"]] if "const" in s else s.get("enum")
    if isinstance(values, list) and all(isinstance(v, (str, bool)) or v is None for v in values):
        return {(type(v).__name__, v) for v in values}
    return None


def _signature(s: dict):
    """(possible types, possible scalar values or None, {required property: its scalar values},
    required names, the names a closed object may have or None, {declared property: its _kinds})."""
    types, values = _kinds(s)
    disc = {}
    props, req = s.get("properties"), s.get("required")
    if isinstance(props, dict) and isinstance(req, list):
        for name in req:
            sub = props.get(name) if isinstance(name, str) else None
            if isinstance(sub, dict) and _values(sub) is not None:
                disc[name] = _values(sub)
    required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
    closed = None  # the only names a closed object may have
    if s.get("additionalProperties") is False and not s.get("patternProperties"):
        closed = set(props) if isinstance(props, dict) else set()
    # what a declared property's value may be, when it says: (types, scalar values or None)
    members = {}
    if isinstance(props, dict):
        for name, sub in props.items():
            if isinstance(sub, dict) and "$ref" not in sub and ("type" in sub or _values(sub) is not None):
                members[name] = _kinds(sub)
    return types, values, disc, required, closed, members


def _kinds(s: dict):
    """(the types a value of ``s`` may have, its scalar values or None)."""
    values = _values(s)
    t = s.get("type")
    if values is not None:
        types = {{"str": "string", "bool": "boolean", "NoneType": "null"}[k] for k, _ in values}
    elif t is None:
        types = set(TYPES)
    else:
        types = {t} if isinstance(t, str) else set(t)
    if types & {"number", "integer"}:
        types |= {"number", "integer"}
    if s.get("nullable") is True:
        types.add("null")
    return types, values


def _apart(a, b) -> bool:
    if not a[0] & b[0]:
        return True
    if a[1] is not None and b[1] is not None and not a[1] & b[1]:
        return True
    if (a[0] & b[0]) <= {"object"}:  # only objects could match both
        if any(not (a[2][k] & b[2][k]) for k in a[2].keys() & b[2].keys()):
            return True
        # one requires a property the other, closed, cannot have
        if (b[4] is not None and a[3] - b[4]) or (a[4] is not None and b[3] - a[4]):
            return True
        # a property one of them requires, whose values the two declare apart (types or constants):
        # an instance both take has it, with a value both take
        for name in (a[3] | b[3]) & a[5].keys() & b[5].keys():
            (ta, va), (tb, vb) = a[5][name], b[5][name]
            if not ta & tb or (va is not None and vb is not None and not va & vb):
                return True
    return False
