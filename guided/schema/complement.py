"""The instances a schema refuses: as a schema where one says it exactly, else as a complement.

``not``, the ``else`` of ``if``, ``oneOf`` exclusivity and the items ``contains`` does not count all
need the values some schema ``X`` refuses. ``complement_schema`` writes them as a schema without
``not`` wherever the keywords allow: ``X`` is the conjunction of its keywords, so its complement is
the union of one piece per keyword, each piece the values that keyword refuses (``required: [r]``
-> objects without ``r``; ``minimum: m`` -> numbers below ``m``; ``items: S`` -> arrays containing
an item ``S`` refuses; ``anyOf`` -> all branches refused; ...). Such a schema is lowered like any
other: exact on values whatever their spelling, merged with its siblings, and cheap (no
determinization of a complemented automaton, no bound on schema-free nesting). One internal keyword,
``MEMBER``, says "the object has a member whose name ... and whose value ...", which JSON Schema
cannot say without ``not``.

Keywords with no such piece (``const``/``enum``, ``pattern``, ``format``, ``multipleOf``,
``type: integer`` among numbers, ``uniqueItems``) stay as ``{"not": keyword}``: a complement of a
small regular language, taken among exponent-free spellings (``schema_lowering``, "Complements").
``complement`` returns the part for a conjunction: the schema's language, or ``Not`` of the
``NEG``-mode language when no complement schema exists (``$ref`` cycles, other bases, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from guided.errors import SchemaError
from guided.grammar import parse_regex
from guided.grammar.regex_ast import EMPTY, Node, Not, alt, intersect, literal, repeat, seq
from guided.schema.keywords import INTERPRETED
from guided.schema.strings import encode, json_string, none_of, quoted

if TYPE_CHECKING:  # the lowering calls these helpers with itself
    from guided.schema.lowering import SchemaLowering


__all__ = ["complement", "complement_schema", "member_node", "MEMBER"]

MEMBER = "\x00member"  # internal: {"names": [...], "patterns": [...], "match": p, "name_not": N, "value": V}
_TYPES = ("null", "boolean", "object", "array", "number", "string")
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "example", "$comment", "deprecated", "readOnly",
     "writeOnly", "$schema", "$defs", "definitions", "markdownDescription", "format_hint"}
)  # fmt: skip
# keywords the lowering interprets: one without a piece here means no complement schema
_KNOWN = INTERPRETED | {MEMBER}
_LEAVES = ("const", "enum", "pattern", "format", "multipleOf", "uniqueItems")
_OF_TYPE = {"pattern": "string", "format": "string", "multipleOf": "number", "uniqueItems": "array"}
_TYPED_LEAVES = frozenset({"pattern", "format", "multipleOf"})
_MAX_DEPTH = 16
_NAME_KEYS = frozenset({"type", "pattern", "minLength", "maxLength", "format", "enum", "const"})


class _NoSchema(Exception):
    """The complement has no schema form here."""


def complement(lowering: SchemaLowering, schema, path: str, base: str, place) -> Node:
    """A part whose conjunction with the other parts keeps exactly the values ``schema`` refuses:
    the language of ``complement_schema``, or ``Not`` of the ``NEG``-mode language."""
    other = None if id(schema) in lowering.leaves else complement_schema(lowering, schema, base)
    if other is not None:  # (a cycle through complements closes like one through $ref)
        return lowering.lower_target(other, path, base, place)
    inner = lowering.negated(schema, path, base, place)
    return Not(inner) if inner != EMPTY else lowering.any_value()


def complement_schema(lowering: SchemaLowering, schema, base: str):
    """A schema accepting exactly the values ``schema`` refuses (at ``base``), or None; one per
    (schema, base) and run, so the lowering's memo and cycle checks see the same dict again."""
    key = (id(schema), base)
    if key not in lowering.complements:
        try:
            lowering.complements[key] = _complement(lowering, schema, base, 0, set())
            _pieces(lowering, lowering.complements[key])
        except _NoSchema:
            lowering.complements[key] = None
        lowering.keep((schema, lowering.complements[key]))
    return lowering.complements[key]


def _pieces(lowering: SchemaLowering, value) -> None:
    """Note the dicts of a complement's schema form: where ``strict`` closes their objects, it closes
    them to the names of the place (those the complemented schema speaks of among them), not to
    their own few (``{"type": "object"}`` would be ``{}``)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict) and id(v) not in lowering.pieces:
            lowering.pieces.add(id(v))
            stack.extend(v.values())


def _complement(lowering: SchemaLowering, schema, base: str, depth: int, open_refs: set):
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict) or depth > _MAX_DEPTH or "$id" in schema or "$anchor" in schema:
        raise _NoSchema
    if lowering.resolver.base_of.get(id(schema), base) != base:
        raise _NoSchema
    keys = set(schema) - _ANNOTATIONS
    if not keys <= _KNOWN:  # unknown keywords are ignored by the lowering: likewise here
        keys &= _KNOWN

    def comp(sub):
        return _complement(lowering, sub, base, depth + 1, open_refs)

    pieces: list = []
    if "$ref" in keys:
        ref = schema["$ref"]
        target, tbase, _ = _resolve(lowering, ref, base)
        if tbase != base or id(target) in open_refs:
            raise _NoSchema
        open_refs.add(id(target))
        try:
            pieces.append(comp(target))
        finally:
            open_refs.discard(id(target))
        if lowering.old_draft:  # before 2019-09, $ref's siblings are ignored
            return _union(pieces)
    types = _types(schema)
    if types is not None:
        pieces += _type_pieces(lowering, types)
    for kw in _LEAVES:
        if kw in keys:
            if kw in _TYPED_LEAVES:  # its type in the leaf too: a complement of strings or numbers
                leaf = _leaf(lowering, {"type": _OF_TYPE[kw], kw: schema[kw]})  # (no schema-free value)
            else:
                leaf = _leaf(lowering, {kw: schema[kw]})
            pieces.append({"type": _OF_TYPE[kw], "not": leaf} if kw in _OF_TYPE else {"not": leaf})
    pieces += _string_pieces(schema, keys)
    pieces += _number_pieces(lowering, schema, keys)
    pieces += _object_pieces(lowering, schema, keys, comp)
    pieces += _array_pieces(schema, keys, comp)
    pieces += _applicator_pieces(schema, keys, comp)
    return _union(pieces)


def _resolve(lowering: SchemaLowering, ref, base: str):
    if not isinstance(ref, str):
        raise _NoSchema
    try:
        return lowering.resolver.resolve(ref, base, "#")
    except SchemaError:
        raise _NoSchema from None


def _join(schemas: list, kw: str):
    """``anyOf`` / ``allOf`` of the schemas, boolean schemas folded away."""
    unit = kw == "allOf"  # the schema that changes nothing: true for allOf, false for anyOf
    schemas = [s for s in schemas if s is not unit]
    if any(s is (not unit) for s in schemas):
        return not unit
    if not schemas:
        return unit
    return schemas[0] if len(schemas) == 1 else {kw: schemas}


def _union(pieces: list):
    return _join(pieces, "anyOf")


def _all(schemas: list):
    return _join(schemas, "allOf")


def _types(schema: dict) -> list[str] | None:
    t = schema.get("type")
    if t is None:
        return None
    types = [t] if isinstance(t, str) else t
    if not isinstance(types, list) or not all(isinstance(x, str) for x in types):
        raise _NoSchema
    types = list(types)
    if schema.get("nullable") is True:
        types.append("null")
    return types


def _spec(lowering: SchemaLowering, spec: dict) -> dict:
    """A ``MEMBER`` spec this module wrote (only those are honoured: ``lowering.member_specs``)."""
    lowering.member_specs.add(id(spec))
    lowering.keep(spec)
    return spec


def _leaf(lowering: SchemaLowering, schema: dict) -> dict:
    """A keyword left to a complement of its language (never rewritten again: see ``lowering.leaves``)."""
    lowering.leaves.add(id(schema))
    lowering.keep(schema)
    return schema


def _type_pieces(lowering: SchemaLowering, types: list[str]) -> list:
    others = [t for t in _TYPES if t not in types and (t != "number" or "integer" not in types)]
    pieces: list = [{"type": others}] if others else []
    if "integer" in types and "number" not in types:  # numbers that are not integers
        pieces.append({"type": "number", "not": _leaf(lowering, {"type": "integer"})})
    return pieces


def _string_pieces(schema: dict, keys: set) -> list:
    out = []
    if "minLength" in keys:
        out.append(_below("string", "maxLength", schema["minLength"]))
    if "maxLength" in keys:
        out.append(_above("string", "minLength", schema["maxLength"]))
    return [p for p in out if p is not False]


def _number_pieces(lowering: SchemaLowering, schema: dict, keys: set) -> list:
    out = []
    for kw, opposite in (("minimum", "exclusiveMaximum"), ("maximum", "exclusiveMinimum"),
                         ("exclusiveMinimum", "maximum"), ("exclusiveMaximum", "minimum")):  # fmt: skip
        if kw in keys:
            v = schema[kw]
            if isinstance(v, bool) or not isinstance(v, (int, float)):  # draft-04 boolean forms
                raise _NoSchema
            out.append({"type": "number", opposite: v})
    return out


def _count(v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 0:
        raise _NoSchema
    return int(v)


def _below(kind: str, kw: str, v) -> dict | bool:
    """Values of ``kind`` whose count is below ``v``."""
    n = _count(v)
    return {"type": kind, kw: n - 1} if n > 0 else False


def _above(kind: str, kw: str, v) -> dict:
    return {"type": kind, kw: _count(v) + 1}


def _object_pieces(lowering: SchemaLowering, schema: dict, keys: set, comp) -> list:
    out: list = []
    props = schema.get("properties", {}) if "properties" in keys else {}
    pats = schema.get("patternProperties", {}) if "patternProperties" in keys else {}
    required = schema.get("required", []) if "required" in keys else []
    if not isinstance(props, dict) or not isinstance(pats, dict) or not isinstance(required, list):
        raise _NoSchema
    if "unevaluatedProperties" in keys or "dependencies" in keys:
        raise _NoSchema
    for r in dict.fromkeys(required):  # an object without a required name
        if not isinstance(r, str):
            raise _NoSchema
        out.append({"type": "object", "properties": {r: False}})
    for name, sub in props.items():  # a member whose value its property refuses
        c = comp(sub)
        if c is not False:
            out.append({"type": "object", "required": [name], "properties": {name: lowering.refusal(c, sub)}})
    for p, sub in pats.items():  # a member whose name matches and whose value the pattern's schema refuses
        c = comp(sub)
        if c is not False:
            out.append({"type": "object", MEMBER: _spec(lowering, {"match": p, "value": c})})
    addl = schema["additionalProperties"] if "additionalProperties" in keys else True
    c = comp(addl)
    if c is not False:  # a member no property or pattern names, with a value refused
        out.append({"type": "object", MEMBER: _spec(lowering, {"names": list(props), "patterns": list(pats), "value": c})})
    if "propertyNames" in keys:
        names = schema["propertyNames"]
        if names is not False and (not isinstance(names, dict) or not set(names) - _ANNOTATIONS <= _NAME_KEYS):
            raise _NoSchema
        if names is not True:
            out.append({"type": "object", MEMBER: _spec(lowering, {"name_not": names, "value": True})})
    if "minProperties" in keys:
        out.append(_below("object", "maxProperties", schema["minProperties"]))
    if "maxProperties" in keys:
        out.append(_above("object", "minProperties", schema["maxProperties"]))
    for trigger, names in (schema.get("dependentRequired", {}) if "dependentRequired" in keys else {}).items():
        if not isinstance(names, list):
            raise _NoSchema
        out += [{"type": "object", "required": [trigger], "properties": {n: False}} for n in names]
    for trigger, sub in (schema.get("dependentSchemas", {}) if "dependentSchemas" in keys else {}).items():
        c = comp(sub)
        if c is not False:
            out.append({"type": "object", "required": [trigger], "allOf": [c]} if c is not True else
                       {"type": "object", "required": [trigger]})  # fmt: skip
    if MEMBER in keys:
        raise _NoSchema
    return [p for p in out if p is not False]


def _array_pieces(schema: dict, keys: set, comp) -> list:
    out: list = []
    if "unevaluatedItems" in keys or "additionalItems" in keys:
        raise _NoSchema
    prefix = schema.get("prefixItems", []) if "prefixItems" in keys else []
    items = schema.get("items", True) if "items" in keys else True
    if isinstance(items, list):  # draft-07 tuple form
        raise _NoSchema
    if not isinstance(prefix, list):
        raise _NoSchema
    for i, sub in enumerate(prefix):  # the item at i is refused
        c = comp(sub)
        if c is not False:
            out.append({"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [c]})
    c = comp(items)
    if c is not False:  # an item past the prefix is refused
        if prefix:
            raise _NoSchema
        out.append({"type": "array", "contains": c})
    if "minItems" in keys:
        out.append(_below("array", "maxItems", schema["minItems"]))
    if "maxItems" in keys:
        out.append(_above("array", "minItems", schema["maxItems"]))
    if "contains" in keys:
        sub = schema["contains"]
        lo = _count(schema.get("minContains", 1))
        hi = schema.get("maxContains")
        if lo > 0:  # too few
            out.append({"type": "array", "contains": sub, "minContains": 0, "maxContains": lo - 1})
        if hi is not None:  # too many
            out.append({"type": "array", "contains": sub, "minContains": _count(hi) + 1})
    return [p for p in out if p is not False]


def _applicator_pieces(schema: dict, keys: set, comp) -> list:
    out: list = []
    for sub in schema.get("allOf", []) if "allOf" in keys else []:
        out.append(comp(sub))
    if "anyOf" in keys:
        out.append(_all([comp(s) for s in _list(schema["anyOf"])]))
    if "oneOf" in keys:
        subs = _list(schema["oneOf"])
        none = _all([comp(s) for s in subs])
        two = [{"allOf": [a, b]} for i, a in enumerate(subs) for b in subs[i + 1 :]]
        out.append(_union([none, *two]))
    if "not" in keys:
        out.append(schema["not"])
    if "if" in keys:
        cond, then, else_ = schema["if"], schema.get("then", True), schema.get("else", True)
        refused_then, refused_else = comp(then), comp(else_)
        if refused_then is not False:
            out.append(_all([cond, refused_then]))
        if refused_else is not False:
            out.append(_all([comp(cond), refused_else]))
    return out


def _list(value) -> list:
    if not isinstance(value, list) or not value:
        raise _NoSchema
    return value


# ---------------------------------------------------------------------- the MEMBER keyword
def member_node(lowering: SchemaLowering, spec: dict, path: str, base: str, place) -> Node:
    """Objects with at least one member whose name passes the spec's name conditions and whose value
    is in the spec's ``value`` schema; other members anything, in any order."""
    conds = []
    names = spec.get("names") or []
    if names:
        conds.append(none_of(names))
    for p in spec.get("patterns") or []:
        conds.append(encode(Not(parse_regex(p, search=True))))
    if spec.get("match") is not None:
        conds.append(encode(parse_regex(spec["match"], search=True)))
    if spec.get("name_not") is not None:
        decoded = _string_language(lowering, spec["name_not"], path)
        if decoded is None:
            return EMPTY  # every name is allowed: no member is refused for its name
        conds.append(encode(Not(decoded)))
    key = quoted(intersect(*conds)) if conds else json_string()
    value = lowering.lower(spec.get("value", True), path, base, place.other())
    if value == EMPTY or key == EMPTY:
        return EMPTY
    member = seq(json_string(), lowering.colon, lowering.any_value())
    body = seq(repeat(seq(member, lowering.sep)), key, lowering.colon, value, repeat(seq(lowering.sep, member)))
    return seq(literal("{"), lowering.ws, body, lowering.ws, literal("}"))


def _string_language(lowering: SchemaLowering, names, path: str):
    """The decoded names a plain-string ``propertyNames`` schema accepts (None: all)."""
    if names is False:
        return EMPTY
    if "enum" in names or "const" in names:
        values = [names["const"]] if "const" in names else names["enum"]
        return alt(*(literal(v) for v in values if isinstance(v, str)))
    return lowering.string_decoded(names, path)
