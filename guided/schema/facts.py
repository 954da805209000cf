"""Cheap, exact facts about schemas and regex AST nodes that let the lowering skip an intersection.

``disjoint``: no instance matches two of the schemas (then ``oneOf`` is ``anyOf``), proved from
types, constant values, string patterns that share no string, discriminator properties, closed
objects' required names, and a branch that is the ``not`` of another; a branch's ``allOf`` members
(and their ``$ref`` targets) are read with it.
``discriminator``: a property by which ``oneOf`` branches are told apart although none requires
it (then ``oneOf`` is ``anyOf`` of the branches with that property required).
``within``: a string language already implies length bounds (then no length intersection).
``json_equal``: JSON value equality (``1 == 1.0``, ``True != 1``); ``json_value_key``: a hashable key with the
same equality.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from functools import lru_cache

from guided.errors import GrammarError, LimitError, SchemaError
from guided.grammar import ExprPool, parse_regex
from guided.grammar.regex_ast import Alt, Chars, Node, Repeat, Seq, intersect, literal
from guided.schema.shapes import is_count

__all__ = ["TYPES", "ANNOTATIONS", "disjoint", "discriminator", "within", "json_equal", "json_value_key", "number_key"]

TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
# keywords that never change the language
ANNOTATIONS = frozenset({"title", "description", "$comment", "default", "examples"})
_UNREAD = frozenset({"$id", "id", "unevaluatedProperties", "unevaluatedItems"})  # see _conjuncts
MAX_CONJUNCTS = 64  # a branch read as more conjuncts than this is not examined by ``discriminator``


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


_NUMBER = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")


def number_key(text: str) -> tuple:
    """("n", sign, digits, exponent) of a JSON number, equal for equal values (``1``, ``1.0``,
    ``10e-1``); exact for any exponent (Decimal's context limits are not)."""
    m = _NUMBER.fullmatch(text)
    sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or "", int(m.group(4) or 0)
    digits = (whole + frac).lstrip("0")
    if not digits:
        return ("n", "", "0", 0)
    exp -= len(frac)
    stripped = digits.rstrip("0")
    return ("n", sign, stripped, exp + len(digits) - len(stripped))


def json_value_key(value) -> tuple:
    """A hashable key equal for equal JSON values, as ``json_equal`` (``1 == 1.0``, ``True != 1``,
    objects whatever their member order): numbers through ``number_key`` (a parsed one may be given
    as its key already). Values deduplicated through it cost a hash each, where comparing each with
    every one kept before was quadratic (an enum of thousands of values under uniqueItems)."""
    if value is True or value is False:
        return ("b", value)
    if value is None:
        return ("z",)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, tuple):  # a number_key
        return value
    if isinstance(value, float) and not math.isfinite(value):  # not JSON, but Python's json reads them
        return ("f", value) if value == value else ("nan", object())  # NaN equals nothing, itself included
    if isinstance(value, (int, float, Decimal)):
        return number_key(json.dumps(value) if not isinstance(value, Decimal) else str(value))
    if isinstance(value, list):
        return ("a", tuple(json_value_key(v) for v in value))
    return ("o", frozenset((k, json_value_key(v)) for k, v in value.items()))


def disjoint(subs: list, resolver, base: str, context: dict | None = None) -> bool:
    """Cheap proof that no instance matches two of the schemas (then oneOf is anyOf). ``context``:
    the schema beside them (the oneOf's siblings), which every instance that matters also meets:
    its ``type``, ``required`` and ``properties`` are read with each branch's."""
    if len(subs) < 2:
        return all(isinstance(resolver.followed(s, base), dict) for s in subs)
    pairs = len(subs) * (len(subs) - 1) // 2
    return len(pairs_apart(subs, resolver, base, context, stop_early=True)) == pairs


def pairs_apart(subs: list, resolver, base: str, context: dict | None = None, stop_early: bool = False) -> set:
    """The pairs ``(i, j)``, ``i < j``, of schemas proved to share no instance (read as ``disjoint``
    reads them): a ``oneOf`` branch needs the complements of the branches it may overlap only.
    ``stop_early``: stop at the first pair not proved apart."""
    sigs, followed = [], []
    for s in subs:
        s = resolver.followed(s, base)
        if not isinstance(s, dict):
            sigs.append(None)
            followed.append(s)
            continue
        followed.append(s)
        s = _flattened(s, resolver, base)
        sigs.append([_signature(_beside(a, context) if context else a) for a in _alternatives(s, resolver, base)])
    out = set()
    for i in range(len(sigs)):
        for j in range(i + 1, len(sigs)):
            if sigs[i] is not None and sigs[j] is not None and (
                all(_apart(x, y) for x in sigs[i] for y in sigs[j])
                or _negates(followed[i], followed[j], resolver, base)
                or _negates(followed[j], followed[i], resolver, base)
            ):
                out.add((i, j))
            elif stop_early:
                return out
    return out


def discriminator(subs: list, resolver, base: str) -> str | None:
    """A property name P that tells ``oneOf`` branches apart although no branch requires it, when
    the branches also accept nothing without it; then ``oneOf`` is exactly ``anyOf`` of
    ``{"allOf": [branch, {"type": "object", "required": [P]}]}``. Else None.

    The common shape is inheritance: ``{"allOf": [{"$ref": "#/definitions/base"}, {"properties":
    {"kind": {"enum": ["x"]}, ...}}]}`` per branch, with ``kind`` optional. Each branch is read as
    its conjuncts (its ``allOf`` members and ``$ref`` targets, flattened; the branch holds exactly
    when all of them do), and the proof has two halves:

    - P present: each branch has exactly one conjunct whose ``properties`` names P, with ``const``
      or ``enum`` scalars, and no value is in two branches' lists; so an instance with P matches at
      most one branch, and exactly one is the same as at least one.
    - P absent (every non-object too): on such an instance a branch means its conjuncts with P taken
      out of that one ``properties`` (which then says nothing). When two branches a != b have the
      same conjuncts so stripped (compared as JSON, each with the base its ``$ref`` targets resolve
      against) and every branch's stripped conjuncts include theirs, any branch that matches makes
      a and b match too: no such instance matches exactly one branch."""
    conj = []
    for s in subs:
        c = _conjuncts(s, resolver, base, 0, [])
        if c is None or len(c) > MAX_CONJUNCTS:
            return None
        conj.append(c)
    names = [n for x, _ in conj[0] if isinstance(x.get("properties"), dict) for n in x["properties"]]
    for name in dict.fromkeys(n for n in names if isinstance(n, str)):
        stripped, seen = [], set()
        for c in conj:
            sites = [k for k, (x, _) in enumerate(c) if isinstance(x.get("properties"), dict) and name in x["properties"]]
            if len(sites) != 1:
                break
            x, b = c[sites[0]]
            p = resolver.followed(x["properties"][name], b)
            values = _values(p) if isinstance(p, dict) else None
            if values is None or values & seen:
                break
            seen |= values
            rest = {k: v for k, v in x.items() if k != "properties"}
            props = {k: v for k, v in x["properties"].items() if k != name}
            if props:
                rest["properties"] = props
            kept = [*c[: sites[0]], (rest, b), *c[sites[0] + 1 :]]
            stripped.append([(x, b) for x, b in kept if set(x) - ANNOTATIONS])
        else:
            if _covered_twice(stripped):
                return name
    return None


def _conjuncts(s, resolver, base: str, depth: int, out: list) -> list | None:
    """``s`` as (schema, base) pairs that all hold exactly when ``s`` does: ``allOf`` members and
    lone ``$ref`` targets read in; None for what is not read so (a ``$ref`` with siblings, whose
    meaning depends on the draft, a new ``$id``, ``unevaluatedProperties``/``unevaluatedItems``,
    which see the annotations of the schemas around them, so a conjunct alone means something
    else, a ``false``, or nesting past 8)."""
    if s is True:
        return out
    if not isinstance(s, dict) or depth > 8 or not _UNREAD.isdisjoint(s):
        return None
    if "$ref" in s:
        if set(s) - ANNOTATIONS != {"$ref"}:
            return None
        try:
            target, tbase, _ = resolver.resolve(s["$ref"], base, "#")
        except SchemaError:  # a dangling $ref: the lowering reports it
            return None
        return _conjuncts(target, resolver, tbase, depth + 1, out)
    members = s.get("allOf", [])
    if not isinstance(members, list):
        return None
    for m in members:
        if _conjuncts(m, resolver, base, depth + 1, out) is None:
            return None
    rest = {k: v for k, v in s.items() if k != "allOf"}
    if set(rest) - ANNOTATIONS:
        out.append((rest, base))
    return out


def unshared(a, b, resolver, base: str) -> list | None:
    """The conjuncts of ``b`` (``(schema, base)`` pairs, read as ``_conjuncts`` reads them) that
    ``a`` does not also hold, when ``a`` holds some of them: ``a ∧ ¬b`` is ``a ∧ ¬(the rest)``, and
    with no rest ``a`` implies ``b`` (``a ∧ ¬b`` is empty). None when the two are not read so or
    share no conjunct. Compared as JSON, each with its base (inheritance: ``{"allOf": [{"$ref":
    "#/definitions/base"}, ...]}`` in every ``oneOf`` branch)."""
    ca = _conjuncts(a, resolver, base, 0, [])
    cb = _conjuncts(b, resolver, base, 0, []) if ca else None
    if not cb or len(ca) > MAX_CONJUNCTS or len(cb) > MAX_CONJUNCTS:
        return None
    ca, cb = _required_apart(ca), _required_apart(cb)

    def held(x, xb) -> bool:
        return any(xb == yb and (x is y or json_equal(x, y)) for y, yb in ca)

    rest = [(x, xb) for x, xb in cb if not held(x, xb)]
    return rest if len(rest) < len(cb) else None


def _required_apart(conjuncts: list) -> list:
    """Each conjunct's ``required`` names as conjuncts of their own (``{"required": [r]}``: every
    name is a separate assertion), beside the rest of it: a branch that only requires one more name
    than another then differs from it by that name alone."""
    out = []
    for x, xb in conjuncts:
        req = x.get("required")
        if not isinstance(req, list) or not req or not all(isinstance(r, str) for r in req):
            out.append((x, xb))
            continue
        rest = {k: v for k, v in x.items() if k != "required"}
        if set(rest) - ANNOTATIONS:
            out.append((rest, xb))
        out += [({"required": [r]}, xb) for r in dict.fromkeys(req)]
    return out


def _covered_twice(stripped: list) -> bool:
    """Whether two branches' conjunct lists are equal and included in every branch's (see
    ``discriminator``)."""

    def has(c: list, item: tuple) -> bool:
        x, b = item
        return any(b == b2 and (x is y or json_equal(x, y)) for y, b2 in c)

    def within(c: list, d: list) -> bool:
        return all(has(d, item) for item in c)

    for a, ca in enumerate(stripped):
        if all(within(ca, d) for d in stripped) and any(
            within(d, ca) for j, d in enumerate(stripped) if j != a
        ):
            return True
    return False


def _alternatives(s: dict, resolver, base: str) -> list[dict]:
    """``s`` as the branches of its own ``anyOf``/``oneOf`` (each read with ``s``'s other keywords):
    two schemas are apart when every branch of one is apart from every branch of the other."""
    kws = [k for k in ("anyOf", "oneOf") if isinstance(s.get(k), list)]
    if len(kws) != 1 or not 0 < len(s[kws[0]]) <= 8:
        return [s]
    rest = {k: v for k, v in s.items() if k != kws[0]}
    out = []
    for b in s[kws[0]]:
        b = resolver.followed(b, base)
        if b is False:
            continue
        if not isinstance(b, dict):
            return [s]
        out.append(_flattened({"allOf": [rest, b]}, resolver, base))
    return out


def _negates(a: dict, b: dict, resolver, base: str) -> bool:
    """Whether b says ``not: a`` (the same schema, or one equal to it): no value is in both."""
    n = resolver.followed(b.get("not"), base)
    return isinstance(n, dict) and (n is a or json_equal(n, a))


def _flattened(s: dict, resolver, base: str, depth: int = 0) -> dict:
    """``s`` with the keywords of its ``allOf`` members (their ``$ref`` targets followed) read in: a
    schema whose values include all of ``s``'s (each keyword kept holds for every value of ``s``;
    ``required`` lists are united, a property's keywords gathered from every member)."""
    subs = s.get("allOf")
    if not isinstance(subs, list) or depth > 4:
        return _props_followed(s, resolver, base)
    out = {k: v for k, v in s.items() if k != "allOf"}
    for m in subs:
        m = resolver.followed(m, base)
        if not isinstance(m, dict):
            continue
        m = _flattened(m, resolver, base, depth + 1)
        for k, v in m.items():
            if k == "required" and isinstance(v, list) and isinstance(out.get(k, []), list):
                out[k] = [*out.get(k, []), *v]
            elif k == "properties" and isinstance(v, dict) and isinstance(out.get(k, {}), dict):
                props = dict(out.get(k, {}))
                for name, sub in v.items():
                    had = props.get(name, True)
                    props[name] = {**had, **sub} if isinstance(had, dict) and isinstance(sub, dict) else (
                        sub if had is True else had)  # fmt: skip
                out[k] = props
            elif k not in out:
                out[k] = v
    return _props_followed(out, resolver, base)


def _props_followed(s: dict, resolver, base: str) -> dict:
    """``s`` with each property's ``$ref`` target read in beside the property's own keywords."""
    props = s.get("properties")
    if not isinstance(props, dict) or not any(isinstance(p, dict) and "$ref" in p for p in props.values()):
        return s
    out = dict(props)
    for name, sub in props.items():
        if isinstance(sub, dict) and "$ref" in sub:
            target = resolver.followed(sub, base)
            own = {k: v for k, v in sub.items() if k != "$ref"}
            out[name] = {**target, **own} if isinstance(target, dict) else own
    return {**s, "properties": out}


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
    required names, the names a closed object may have as (declared names, patterns) or None,
    {declared property: its _kinds}, its string pattern or None, its sizes per type: ``_sizes``)."""
    types, values, pattern, sizes = _kinds(s)
    disc = {}
    props, req = s.get("properties"), s.get("required")
    if isinstance(props, dict) and isinstance(req, list):
        for name in req:
            sub = props.get(name) if isinstance(name, str) else None
            if isinstance(sub, dict) and _values(sub) is not None:
                disc[name] = _values(sub)
    required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
    closed = None  # the only names a closed object may have: (declared ones, patterns of the others)
    pats = s.get("patternProperties") or {}
    if s.get("additionalProperties") is False and isinstance(pats, dict) and all(isinstance(p, str) for p in pats):
        closed = (set(props) if isinstance(props, dict) else set(), tuple(pats))
    # what a declared property's value may be, when it says: (types, scalar values or None)
    members = {}
    if isinstance(props, dict):
        for name, sub in props.items():
            if isinstance(sub, dict) and "$ref" not in sub and ("type" in sub or _values(sub) is not None):
                members[name] = _kinds(sub)
    return types, values, disc, required, closed, members, pattern, sizes


# the bounds on the size of a value of each type: items, characters, members
_SIZE_KEYS = {"array": ("minItems", "maxItems"), "string": ("minLength", "maxLength"),
              "object": ("minProperties", "maxProperties")}  # fmt: skip


def _sizes(s: dict) -> dict:
    """{type: (least size, largest size or None)} for the types whose size ``s`` bounds."""
    out = {}
    for t, (lo_key, hi_key) in _SIZE_KEYS.items():
        lo, hi = s.get(lo_key, 0), s.get(hi_key)
        lo = lo if is_count(lo) else 0
        hi = hi if is_count(hi) else None
        if lo or hi is not None:
            out[t] = (lo, hi)
    return out


def _sizes_apart(a: tuple, b: tuple) -> bool:
    """Whether two size ranges share no size."""
    (lo_a, hi_a), (lo_b, hi_b) = a, b
    return (hi_a is not None and hi_a < lo_b) or (hi_b is not None and hi_b < lo_a)


def _kinds(s: dict):
    """(the types a value of ``s`` may have, its scalar values or None, its string pattern or None,
    the sizes it allows per type: ``_sizes``)."""
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
    pattern = s.get("pattern") if isinstance(s.get("pattern"), str) else None
    return types, values, pattern, _sizes(s)


def _values_apart(a: tuple, b: tuple) -> bool:
    """Whether two (types, values, pattern, sizes) facts share no value."""
    (ta, va, pa, ra), (tb, vb, pb, rb) = a, b
    if not ta & tb:
        return True
    if va is not None and vb is not None:
        return not va & vb
    if va is None and vb is None and all(t in ra and t in rb and _sizes_apart(ra[t], rb[t]) for t in ta & tb):
        return True  # every type both take, told apart by its size (``maxItems: 1`` vs ``minItems: 2``)
    if not (ta & tb) <= {"string"}:
        return False
    if va is not None and pb is not None:
        return not any(k == "str" and _may_meet(pb, v) for k, v in va)
    if vb is not None and pa is not None:
        return not any(k == "str" and _may_meet(pa, v) for k, v in vb)
    return pa is not None and pb is not None and not _may_meet(pa, pb, True)


@lru_cache(maxsize=4096)
def _may_meet(pattern: str, other: str, other_is_pattern: bool = False) -> bool:
    """Whether a string matches ``pattern`` (ECMA, unanchored) and ``other`` (a pattern, or a
    constant); True when the regex cannot be read or the check runs out of work."""
    try:
        b = parse_regex(other, search=True) if other_is_pattern else literal(other)
        pool = ExprPool()
        return pool.is_live(pool.intern(intersect(parse_regex(pattern, search=True), b)), 20_000)
    except (GrammarError, LimitError, ValueError, RecursionError):
        return True


def _cannot_have(closed: tuple | None, names: set) -> bool:
    """Whether a closed object (``_signature``'s (declared names, patterns)) refuses one of ``names``:
    declared nowhere and matching no pattern (an unreadable pattern matches every name)."""
    if closed is None:
        return False
    declared, patterns = closed
    return any(n not in declared and not any(_may_meet(p, n) for p in patterns) for n in names)


def _apart(a, b) -> bool:
    if _values_apart((a[0], a[1], a[6], a[7]), (b[0], b[1], b[6], b[7])):
        return True
    if (a[0] & b[0]) <= {"object"}:  # only objects could match both
        if any(not (a[2][k] & b[2][k]) for k in a[2].keys() & b[2].keys()):
            return True
        # one requires a property the other, closed, cannot have
        if _cannot_have(b[4], a[3]) or _cannot_have(a[4], b[3]):
            return True
        # a property one of them requires, whose values the two declare apart (types or constants):
        # an instance both take has it, with a value both take
        for name in (a[3] | b[3]) & a[5].keys() & b[5].keys():
            if _values_apart(a[5][name], b[5][name]):
                return True
    return False
