"""Schema merging: ``allOf`` (and ``if``/``then``/``else``) rewritten into one schema where that is exact.

An intersection of whole objects or arrays is exact in the automaton (``And``), but every state
inside it then has to prove that both sides can still finish. Merging the keywords instead keeps the
automaton plain: ``{"properties": {"a": A}} ∧ {"properties": {"a": B}, "required": ["a"]}`` is
``{"properties": {"a": {"allOf": [A, B]}}, "required": ["a"]}``. A property one schema does not list
takes that schema's ``additionalProperties`` (default true) into its ``allOf``. Keywords that appear
in one schema only are copied; ``type`` is intersected (OpenAPI's ``nullable`` read into it),
``required`` united, bounds (``minItems``, ``maximum``, ...) take the tighter value (draft-04's
boolean ``exclusiveMinimum``/``exclusiveMaximum`` first made numbers), ``uniqueItems`` holds where
one says so, and keywords the lowering does not read (``x-...``, vendor annotations) never clash; any
other clash (two ``contains``, ``patternProperties`` beside another schema's ``properties``,
``patternProperties`` or ``additionalProperties``, ...) leaves the intersection to ``And`` (``merge``
returns None); several schema-form ``items`` (no tuple keywords) merge as ``items: {"allOf": [...]}``.
"""

from __future__ import annotations

import json

from guided.schema.drafts import numeric_bounds
from guided.schema.keywords import INTERPRETED

__all__ = ["merge", "merge_cases", "split_if"]

MAX_CASES = 64  # merge_cases: conjunctions of alternatives spread into at most this many cases

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "example", "$comment", "deprecated", "readOnly",
     "writeOnly", "$schema", "$id", "$anchor", "$defs", "definitions", "markdownDescription"}
)  # fmt: skip
_SPECIAL = frozenset({"type", "properties", "required", "additionalProperties"})
_NEVER = frozenset({"$ref", "$dynamicRef", "unevaluatedProperties", "unevaluatedItems"})
# which schema a member's value meets: from one part only when one has patternProperties (a name
# another part declared or left to its additionalProperties may match a pattern of it)
_MEMBERS = frozenset({"properties", "patternProperties", "additionalProperties"})
_GROUPS = (
    frozenset({"items", "prefixItems", "additionalItems"}),
    frozenset({"if", "then", "else"}),
    frozenset({"contains", "minContains", "maxContains"}),
)
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")
# bounds that meet as one: the larger lower bound, the smaller upper bound (exclusive ones read as
# numbers: a strict and a plain bound from different schemas stay side by side, as the lowering
# takes the tighter of both)
_LOWER = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_UPPER = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
# keywords outside the lowering's vocabulary that still say something (``merge`` keeps them exact)
_READ = frozenset({"id", "$dynamicAnchor"})


def merge(schemas: list, outer: bool = False) -> dict | None:
    """One schema equivalent to the conjunction of ``schemas`` (dicts without $ref), or None.
    ``outer``: the first schema holds the others as its in-place applicators (its own ``allOf``),
    so its ``unevaluatedProperties`` sees every name they evaluate, as it will in the merged schema."""
    parts = _flat(schemas)
    if parts is None:
        return None
    own = _NEVER - {"unevaluatedProperties"} if outer and parts and parts[0] is schemas[0] else _NEVER
    if not all(isinstance(s, dict) and not ((own if i == 0 else _NEVER) & s.keys()) for i, s in enumerate(parts)):
        return None
    if any("patternProperties" in s for s in parts) and sum(_says_members(s) for s in parts) > 1:
        return None
    items = [s["items"] for s in parts if "items" in s]
    # several schema-form ``items`` alone (no tuple keywords beside them): every item meets them all
    items_meet = len(items) > 1 and all(isinstance(i, (dict, bool)) for i in items) and not any(
        k in s for s in parts for k in ("prefixItems", "additionalItems")
    )
    for group in _GROUPS:  # keywords that read each other must come from one schema (or be equal)
        seen = [{k: s[k] for k in group & s.keys()} for s in parts if group & s.keys()]
        if any(g != seen[0] for g in seen[1:]) and not (items_meet and "items" in group):
            return None
    if any(isinstance(s.get(k), bool) for s in parts for k in ("exclusiveMinimum", "exclusiveMaximum")):
        parts = [numeric_bounds(s) for s in parts]  # draft-04's flags read the bound beside them
    out: dict = {}
    if items_meet:
        out["items"] = _all(items)
    for s in parts:
        for k, v in s.items():
            if k in _ANNOTATIONS or k in _SPECIAL or k == "nullable" or (items_meet and k == "items"):
                continue
            if k in out and out[k] != v:
                if k == "not" and (either := _either(out[k], v)) is not None:
                    out[k] = either  # not A and not B: not (A or B), for constants
                    continue
                if k in _LOWER or k in _UPPER:
                    if not (_number(v) and _number(out[k])):
                        return None
                    out[k] = max(out[k], v) if k in _LOWER else min(out[k], v)
                    continue
                if k == "uniqueItems" and isinstance(v, bool) and isinstance(out[k], bool):
                    out[k] = True  # (one schema asks for it: the conjunction does)
                    continue
                if k not in INTERPRETED and k not in _READ and not k.startswith("\x00"):
                    continue  # read by nothing (the first value kept)
                if k != "enum" or not isinstance(v, list) or not isinstance(out[k], list):
                    return None
                kept = _common_values(out[k], v)  # two enums: the values in both
                if not kept:
                    return None
                v = kept
            out[k] = v
    types = _types(parts)
    if types is not None:
        out["type"] = types
    required = [r for s in parts for r in s.get("required", []) if isinstance(r, str)]
    if required:
        out["required"] = list(dict.fromkeys(required))
    names = list(dict.fromkeys(n for s in parts for n in (s.get("properties") or {})))
    if names:
        out["properties"] = {n: _all([(s.get("properties") or {}).get(n, s.get("additionalProperties", True)) for s in parts]) for n in names}
    addl = [s["additionalProperties"] for s in parts if "additionalProperties" in s]
    if addl:
        out["additionalProperties"] = _all(addl)
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _says_members(s: dict) -> bool:
    """Whether the schema says which schema some member's value meets. ``properties`` that only
    forbid names (``{"n": false}``, a ``not: {required: [...]}`` rewritten) do not: such a name is
    forbidden in the merge too, whatever pattern it matches, and the other names are left alone."""
    keys = _MEMBERS & s.keys()
    props = s.get("properties")
    if keys == {"properties"} and isinstance(props, dict) and all(v is False for v in props.values()):
        return False
    return bool(keys)


def _flat(schemas: list) -> list | None:
    """The conjuncts of ``schemas``, nested ``allOf`` spread out (at any depth) and ``true`` dropped;
    None when one is ``false``."""
    parts = []
    for s in schemas:
        if s is False:
            return None
        if isinstance(s, dict) and isinstance(s.get("allOf"), list):
            inner = _flat(s["allOf"])
            if inner is None:
                return None
            rest = {k: v for k, v in s.items() if k != "allOf"}
            parts += ([rest] if rest else []) + inner
        elif s is not True:
            parts.append(s)
    return parts


def _all(subs: list):
    subs = [s for i, s in enumerate(subs) if s is not True and s != {} and s not in subs[:i]]  # equal ones once
    if not subs:
        return True
    if any(s is False for s in subs):
        return False
    if len(subs) == 1:
        return subs[0]
    # flat keywords where they merge exactly ({"type": "string"} and {"enum": [...]} as one schema):
    # what reads a schema's facts (oneOf disjointness, constants) sees them
    return merge(subs) or {"allOf": subs}


def _types(parts: list) -> list | None:
    sets = []
    for s in parts:
        t = s.get("type")
        if t is None:
            continue
        ts = {t} if isinstance(t, str) else set(t)
        if "number" in ts:
            ts.add("integer")
        if s.get("nullable") is True:
            ts.add("null")
        sets.append(ts)
    if not sets:
        return None
    common = set.intersection(*sets)
    return [t for t in _TYPES if t in common]


def split_if(schema: dict) -> dict | None:
    """``if``/``then``/``else`` with an object-shaped ``if`` (only ``properties``/``required``) as
    an ``anyOf`` of plain conjunctions: if holds and then, or one way if fails and else."""
    cond = schema.get("if")
    if not isinstance(cond, dict) or not set(cond) - _ANNOTATIONS <= {"properties", "required", "type"}:
        return None
    if cond.get("type", "object") != "object" or (not cond.get("properties") and not cond.get("required")):
        return None
    props, req = cond.get("properties") or {}, cond.get("required") or []
    rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
    then, else_ = schema.get("then", True), schema.get("else", True)
    holds = {k: v for k, v in cond.items() if k in ("properties", "required")}
    fails = [{"type": "object", "properties": {r: False}} for r in req]  # a required name is absent
    fails += [{"type": "object", "properties": {p: {"not": sub}}, "required": [p]} for p, sub in props.items()]
    if cond.get("type") == "object":
        holds["type"] = "object"
        fails.append({"type": [t for t in _TYPES if t != "object"]})
    branches = [{"allOf": [holds, then]}] + [{"allOf": [f, else_]} for f in fails]
    return {**rest, "anyOf": branches} if "anyOf" not in rest else {**rest, "allOf": [{"anyOf": branches}, *rest.get("allOf", [])]}


def merge_cases(schemas: list, apart=None, implied=None, limit: int = MAX_CASES, growth: int = 8) -> dict | None:
    """The conjunction of ``schemas`` as ``anyOf`` of merged cases, where ``merge`` alone fails because
    several of them branch: an object-shaped ``if``/``then``/``else`` (``split_if``) or an ``anyOf``
    is a choice, and (A1 or A2) and (B1 or B2) = (A1 and B1) or (A1 and B2) or ... Cases that cannot
    hold are dropped as they are built (``_possible``: a required name with constants that have none
    in common, or only constants it must not be; where the case may take other values than objects,
    it keeps those alone), so a chain of ``if``s on one discriminator gives one case per value, not
    2^n. Every case must merge exactly, and there are at most ``limit`` (``growth`` times as many
    while they are built). None otherwise.

    ``apart(x, y)``: whether no value fits two schemas of one member (a schema and its refusal);
    a case where a required member must fit both is dropped. ``implied(case, option)``: whether
    every instance of the case's parts fits the option; then the case takes that option alone (the
    others would only narrow it: their cases are inside it)."""
    parts = _flat(schemas)
    if parts is None:
        return None
    choices = []
    for part in parts:
        if not isinstance(part, dict):
            return None
        if "if" in part:
            part = split_if(part)
            if part is None or "allOf" in part:
                return None
        branches = part.get("anyOf")
        if isinstance(branches, list) and branches:
            rest = {k: v for k, v in part.items() if k != "anyOf"}
            choices.append([{**rest, "allOf": [b]} if rest else b for b in branches])
        else:
            choices.append([part])
    if all(len(o) == 1 for o in choices):
        return None
    # complements and name patterns make each case costly to decide: there the intersection is cheaper
    if any(k in o for options in choices for o in options for k in ("not", "patternProperties")):
        return None
    cases: list[list] = [[]]
    for options in choices:
        grown = []
        for case in cases:
            held = next((o for o in options if _implied(case, o, implied)), None) if len(options) > 1 else None
            grown += [kept for o in (options if held is None else [held]) if (kept := _possible(case + [o], apart)) is not None]
        cases = grown
        if len(cases) > growth * limit:
            return None
    if not cases or len(cases) > limit:
        return None
    merged = []
    for case in cases:
        m = merge(case)
        if m is None:
            return None
        if m not in merged:
            merged.append(m)
    return {"anyOf": merged}


_NOT_OBJECT = {"type": [t for t in _TYPES if t != "object"]}  # (one object: a case holds it once)
_OBJECT_ONLY = frozenset({"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
                          "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas"})  # fmt: skip


def _implied(case: list, option, implied=None) -> bool:
    """Whether every object of the case's parts fits ``option`` (what the parts read when some part
    says ``type: object``): ``{"type": "object", "properties": {n: X}}`` where a part forbids n
    (``n: false``), or what ``implied`` says."""
    parts = _flat(case)
    if parts is None or not any(isinstance(p, dict) and p.get("type") in ("object", ["object"]) for p in parts):
        return False
    if isinstance(option, dict) and set(option) == {"type", "properties"} and option["type"] == "object":
        props = option["properties"]
        if isinstance(props, dict) and len(props) == 1:
            (name,) = props
            if any(isinstance(p, dict) and isinstance(p.get("properties"), dict) and p["properties"].get(name) is False
                   for p in parts):  # fmt: skip
                return True
    return implied is not None and implied(parts, option)


def _possible(case: list, apart=None) -> list | None:
    """``case``, or None when it surely has no instance, or ``case`` with its values restricted to
    non-objects (``_NOT_OBJECT`` added, what only reads objects left out) when no object can meet it
    (``_no_object``) but other values may: ``required`` and ``properties`` hold for every string and
    number, which every if lets through to its then, so such a case keeps them, and only them."""
    parts = _flat(case)
    if parts is None:
        return None
    if not any(p is _NOT_OBJECT for p in parts) and not _no_object(parts, apart):
        return case
    if any(isinstance(p, dict) and p.get("type") in ("object", ["object"]) for p in parts):
        return None
    # what only reads objects asks nothing of these values: left out, it cannot stop the merge
    kept = [{k: v for k, v in p.items() if k not in _OBJECT_ONLY} if isinstance(p, dict) else p
            for p in parts if p is not _NOT_OBJECT]  # fmt: skip
    return [*kept, _NOT_OBJECT]


def _no_object(parts: list, apart=None) -> bool:
    """Whether no object meets the conjunction of ``parts``: a name some part requires must take a
    value from constant sets (``const``, ``enum``) that have none in common, or only values another
    part excludes (``properties: {p: {not: {const or enum}}}``), or be absent (``properties: {p:
    false}``: a refusal of ``required``), or fit schemas of types that have none in common, or two
    schemas ``apart`` says no value fits. Only constants are compared (numbers by value: 1 and 1.0
    are one constant)."""
    required: set[str] = set()
    allowed: dict[str, set[str]] = {}
    excluded: dict[str, set[str]] = {}
    absent: set[str] = set()
    for part in parts:
        if not isinstance(part, dict):
            continue
        required.update(r for r in part.get("required", []) if isinstance(r, str))
        for name, sub in (part.get("properties") or {}).items():
            if sub is False:  # the name is absent: where it is required too, no object
                absent.add(name)
                continue
            values = _constants(sub)
            if values is not None:
                allowed[name] = allowed[name] & values if name in allowed else values
            elif isinstance(sub, dict) and set(sub) - _ANNOTATIONS == {"not"}:
                values = _constants(sub["not"])
                if values is not None:
                    excluded.setdefault(name, set()).update(values)
    if required & absent:
        return True
    if any(name in allowed and allowed[name] <= excluded.get(name, set()) for name in required):
        return True
    for name in required:
        subs = [p["properties"][name] for p in parts if isinstance(p, dict) and isinstance(p.get("properties"), dict)
                and isinstance(p["properties"].get(name), dict)]  # fmt: skip
        if len(subs) < 2:
            continue
        if _types([s for s in subs if "type" in s]) == []:
            return True
        if apart is not None and any(apart(x, y) for i, x in enumerate(subs) for y in subs[i + 1:]):
            return True
    return False


def _constants(schema) -> set[str] | None:
    """The values ``schema`` allows, as canonical JSON, when it is a ``const`` or an ``enum``."""
    if not isinstance(schema, dict):
        return None
    core = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
    if set(core) == {"const"}:
        return {_key(core["const"])}
    if set(core) == {"enum"} and isinstance(core["enum"], list):
        return {_key(v) for v in core["enum"]}
    return None


def _either(a, b) -> dict | None:
    """``{"enum": [...]}`` of the values of two ``const``/``enum`` schemas, else None."""
    if _constants(a) is None or _constants(b) is None:
        return None
    values = {}
    for s in (a, b):
        for v in s["enum"] if "enum" in s else [s["const"]]:
            values.setdefault(_key(v), v)
    return {"enum": list(values.values())}


def _key(value) -> str:
    return json.dumps(_canonical(value), sort_keys=True)


def _common_values(a: list, b: list) -> list:
    """The values of ``a`` equal (as JSON values) to a value of ``b``, in ``a``'s order."""
    keys = {_key(v) for v in b}
    return [v for v in a if _key(v) in keys]


def _canonical(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value
