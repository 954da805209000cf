"""SchemaLowering: a JSON Schema to one regex AST node accepting exactly its instances (as generated).

Each schema becomes the intersection of its parts: its own type-specific keywords, ``$ref``,
``allOf`` (intersection), ``anyOf`` (union), ``oneOf`` (exactly one: each branch minus the others),
``not`` (complement within the JSON values), ``if``/``then``/``else``. Objects and arrays are in
``json_objects`` and ``json_arrays``; strings, numbers and formats in ``json_strings``,
``json_numbers`` and ``json_formats``. Whatever cannot be enforced exactly raises ``SchemaError``
naming the keyword's JSON pointer, or with ``lenient`` is relaxed with a warning.
"""

from __future__ import annotations

import json
import time
import warnings

import jsonschema

from guided.errors import CompileTimeoutError, GrammarError, LimitError, SchemaError
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    Node,
    Not,
    alt,
    any_char,
    chars,
    intersect,
    literal,
    repeat,
    seq,
)
from guided.grammar.regex_parser import parse_regex
from guided.json_formats import format_node
from guided.json_numbers import integer_node, number_node
from guided.json_strings import json_literal_string, json_string, quoted, string_body
from guided.key_order import KeyOrder
from guided.schema_any import AnyValue
from guided.schema_cfg import Hole, has_hole, map_meets
from guided.schema_facts import TYPES, disjoint, json_equal, within
from guided.schema_meet import Unresolved, disjoint_upper, distributed, holes_meet, meet_one
from guided.schema_merge import merge, split_if
from guided.schema_options import SchemaOptions
from guided.schema_resolver import SchemaResolver

__all__ = ["SchemaLowering"]

_UNSUPPORTED = ("$dynamicRef", "$recursiveRef")
_UNSUPPORTED_FORMATS = frozenset(
    {"regex", "idn-email", "idn-hostname", "iri", "iri-reference", "uri-template"}
)
_SIMPLE_SIBLINGS = frozenset(
    {"type", "enum", "const", "format", "minLength", "maxLength", "pattern", "minimum", "maximum",
     "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "nullable", "title", "description",
     "default", "examples", "$comment", "$schema", "$id"}
)  # fmt: skip
_ALL_TYPES = frozenset(TYPES) - {"integer"}
TYPE_KEYWORDS = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
     "maxProperties", "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties",
     "items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "minContains",
     "maxContains", "uniqueItems", "unevaluatedItems", "minLength", "maxLength", "pattern", "format",
     "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)  # fmt: skip
_MERGE_IGNORED = frozenset({"title", "description", "$comment", "default", "examples"})
_OLD_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")
MAX_ENUM = 10_000
_NULL, _BOOLEAN = literal("null"), alt(literal("true"), literal("false"))


class SchemaLowering:
    """One lowering run over one root schema (its resolver, budget, deadline and warnings)."""

    def __init__(self, root, options: SchemaOptions, registry: dict | None = None):
        self.root = root
        self.o = options
        self.resolver = SchemaResolver(root if isinstance(root, dict) else {}, registry)
        ws = (
            EPSILON
            if options.whitespace == "compact"
            else repeat(chars([(9, 10), (13, 13), (32, 32)]), 0, options.max_ws)
        )
        self.ws = ws
        self.sep = seq(ws, literal(","), ws)
        self.colon = seq(ws, literal(":"), ws)
        self.deadline = time.monotonic() + options.timeout_s
        self.visited = 0
        self.active: dict[int, int] = {}  # id(schema reached by $ref) -> times on the current path
        self.unrolling = 0
        self.memo: dict[tuple, Node] = {}
        self._keep: list = []
        self.rules: dict[str, Node] = {}  # nonterminal -> body (a regex AST with holes)
        self.rule_paths: dict[str, str] = {}  # nonterminal -> JSON pointer of its schema
        self.open_refs: dict[
            tuple, str | None
        ] = {}  # $ref targets being lowered -> nonterminal once recursive
        self.anys = AnyValue(self)
        self.inlined: dict[int, int] = {}  # $ref targets merged into an allOf being lowered
        self.probing = 0  # > 0: an intersection over holes raises Unresolved (schema_meet)
        self.proof_time = 0.0  # seconds spent proving oneOf branches disjoint (schema_meet)
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.old_draft = isinstance(schema_uri, str) and any(d in schema_uri for d in _OLD_DRAFTS)
        # draft-03/04 count 1.0 as a number, not an integer
        self.draft4 = isinstance(schema_uri, str) and any(d in schema_uri for d in ("draft-03", "draft-04"))

    # ------------------------------------------------------------------ entry
    def lower_root(self) -> Node:
        return self.lower(self.root, "#", self.resolver.root_base, None)

    def warn(self, message: str, path: str) -> None:
        warnings.warn(f"JSON Schema relaxed at {path}: {message}", stacklevel=3)

    def relax(self, message: str, path: str) -> None:
        """A keyword cannot be enforced exactly: an error, or a warning when lenient."""
        if not self.o.lenient:
            raise SchemaError(message, path)
        self.warn(message + "; the keyword is not enforced", path)

    def tick(self, path: str) -> None:
        self.visited += 1
        if self.visited > self.o.max_nodes:
            raise LimitError(f"JSON Schema lowering exceeded {self.o.max_nodes} schema nodes (at {path})")
        if time.monotonic() > self.deadline:
            raise CompileTimeoutError(f"JSON Schema lowering exceeded {self.o.timeout_s} s (at {path})")

    # ------------------------------------------------------------------ schemas
    def lower(self, schema, path: str, base: str, place: KeyOrder | None) -> Node:
        """The language of ``schema`` at one place of the instance."""
        self.tick(path)
        if schema is True:
            return self.any_value()
        if schema is False:
            return EMPTY
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}", path)
        base = self.resolver.base_of.get(id(schema), base)
        if place is None:
            place = KeyOrder(self.resolver, [(schema, base)])
        key = (id(schema), base, place.key)
        if not self.unrolling and key in self.memo:
            return self.memo[key]
        node = self._lower(schema, path, base, place)
        if not self.unrolling:
            self.memo[key] = node
        return node

    def _lower(self, schema: dict, path: str, base: str, place: KeyOrder) -> Node:
        inlined: list[int] = []
        merged = self._merged(schema, base, inlined)
        if merged is not None:
            self._keep.append(merged)  # memo keys use id(): keep rewritten schemas alive
            for t in inlined:  # a $ref cycle through allOf must close at a $ref, not inline forever
                self.inlined[t] = self.inlined.get(t, 0) + 1
            try:
                return self.lower(merged, path, base, place)
            finally:
                for t in inlined:
                    self.inlined[t] -= 1
        for kw in _UNSUPPORTED:
            if kw in schema:
                raise SchemaError(f"{kw} is not supported", f"{path}/{kw}")
        if "$ref" in schema:
            target = self.lower_ref(schema["$ref"], path, base, place)
            if self.old_draft:  # before 2019-09, $ref's siblings are ignored
                return target
            parts = [target]
        else:
            parts = []
        parts.append(self.own(schema, path, base, place))
        parts += self.applicators(schema, path, base, place)
        if self.o.max_depth is None and holes_meet(self, parts):
            node = self._rewritten(distributed(self, schema, base), path, base, place)
            if node is not None:
                return node
        return self.conjoin(parts, path, "allOf or $ref with sibling keywords")

    def _rewritten(self, rewritten: dict | None, path: str, base: str, place: KeyOrder) -> Node | None:
        """The language of a schema rewritten by ``distributed``, or None when it still needs an
        intersection over holes (then the original form is used: the smaller intersection)."""
        if rewritten is None:
            return None
        self._keep.append(rewritten)
        mark = len(self.memo)
        self.probing += 1
        try:
            return self.lower(rewritten, path, base, place)
        except Unresolved:
            for key in list(self.memo)[mark:]:  # may name nonterminals whose bodies were never built
                del self.memo[key]
            return None
        finally:
            self.probing -= 1

    def _merged(self, schema: dict, base: str, inlined: list[int]) -> dict | None:
        """``allOf`` and object-shaped ``if`` rewritten into plain keywords, when exact (schema_merge)."""
        if "if" in schema and "allOf" not in schema and "anyOf" not in schema:
            return split_if(schema)
        subs = schema.get("allOf")
        if not isinstance(subs, list) or not subs or "$ref" in schema:
            return None
        parts = [{k: v for k, v in schema.items() if k != "allOf"}]
        for sub in subs:
            while (
                isinstance(sub, dict)
                and "$ref" in sub
                and (self.old_draft or set(sub) - _MERGE_IGNORED <= {"$ref"})
            ):
                try:
                    sub, sub_base, _ = self.resolver.resolve(sub["$ref"], base, "#")
                except SchemaError:
                    return None
                if sub_base != base or (self.o.max_depth is None and self.inlined.get(id(sub), 0) >= 2):
                    return None
                inlined.append(id(sub))
            parts.append(sub)
        return merge(parts)

    def conjoin(self, parts: list[Node], path: str | None = None, keyword: str | None = None) -> Node:
        any_ = self.any_value()
        if any(p == EMPTY for p in parts):
            return EMPTY
        positive = [p for p in parts if p != any_ and not isinstance(p, Not)]
        negative = [p for p in parts if isinstance(p, Not)]
        if not positive and negative and any_ == self.anys.hole:
            return self.meet(self.anys.excluding([n.item for n in negative]), path, "not")
        if not positive:
            positive = [any_]
        out = positive + negative
        return out[0] if len(out) == 1 else self.both(*out, path=path, keyword=keyword)

    def lower_ref(self, ref, path: str, base: str, place: KeyOrder) -> Node:
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", f"{path}/$ref")
        target, tbase, tpath = self.resolver.resolve(ref, base, f"{path}/$ref")
        if self.o.max_depth is not None:
            return self._unroll(target, tbase, tpath, place)
        if not isinstance(target, dict):
            return self.lower(target, tpath, tbase, place)
        key = (id(target), self.resolver.base_of.get(id(target), tbase), place.key)
        if key in self.open_refs:  # a cycle closes here: the target becomes a nonterminal
            name = self.open_refs[key] or f"ref_{len(self.rule_paths)}"
            self.open_refs[key] = name
            self.rule_paths[name] = tpath
            return Hole(name)
        self.open_refs[key] = None
        try:
            node = self.lower(target, tpath, tbase, place)
        finally:
            name = self.open_refs.pop(key)
        if name is None:
            return node
        self.rules[name] = node
        self.memo[key] = Hole(name)
        return self.memo[key]

    def _unroll(self, target, tbase: str, tpath: str, place: KeyOrder) -> Node:
        """``max_depth`` given: a cycle is unrolled that many levels, deeper levels accept nothing."""
        count = self.active.get(id(target), 0)
        if count > self.o.max_depth:
            return EMPTY
        self.active[id(target)] = count + 1
        self.unrolling += 1 if count else 0
        try:
            return self.lower(target, tpath, tbase, place)
        finally:
            self.unrolling -= 1 if count else 0
            self.active[id(target)] = count

    def meet(self, node: Node, path: str | None = None, keyword: str | None = None) -> Node:
        """Intersections and complements with holes below, resolved (see ``schema_meet.meet_one``)."""
        return map_meets(node, lambda m: meet_one(self, m, path, keyword))

    def both(self, *parts: Node, path: str, keyword: str) -> Node:
        """The intersection of parts, resolved by ``meet`` when a part has holes."""
        node = intersect(*parts)
        return self.meet(node, path, keyword) if any(has_hole(p) for p in parts) else node

    def applicators(self, schema: dict, path: str, base: str, place: KeyOrder) -> list[Node]:
        parts = []
        for i, sub in enumerate(self._list(schema, "allOf", path)):
            parts.append(self.lower(sub, f"{path}/allOf/{i}", base, place))
        subs = self._list(schema, "anyOf", path)
        if subs:
            parts.append(alt(*(self.lower(s, f"{path}/anyOf/{i}", base, place) for i, s in enumerate(subs))))
        subs = self._list(schema, "oneOf", path)
        if subs:
            parts.append(self.one_of(subs, f"{path}/oneOf", base, place))
        if "not" in schema:
            inner = self.lower(schema["not"], f"{path}/not", base, place)
            parts.append(Not(inner) if inner != EMPTY else self.any_value())
        if "if" in schema:
            cond = self.lower(schema["if"], f"{path}/if", base, place)
            then = self.lower(schema.get("then", True), f"{path}/then", base, place)
            else_ = self.lower(schema.get("else", True), f"{path}/else", base, place)
            yes = (
                self.both(cond, then, path=f"{path}/then", keyword="if/then")
                if then != self.any_value()
                else cond
            )
            parts.append(alt(yes, self.conjoin([else_, Not(cond)], f"{path}/if", "if/else")))
        return parts

    def one_of(self, subs: list, path: str, base: str, place: KeyOrder) -> Node:
        nodes = [self.lower(s, f"{path}/{i}", base, place) for i, s in enumerate(subs)]
        live = [(i, n) for i, n in enumerate(nodes) if n != EMPTY]
        if (
            len(live) <= 1
            or disjoint([subs[i] for i, _ in live], self.resolver, base)
            or disjoint_upper(self, [n for _, n in live])
        ):
            return alt(*(n for _, n in live)) if live else EMPTY
        branches = []
        for i, n in live:
            others = [Not(m) for j, m in live if j != i]
            branches.append(self.both(n, *others, path=path, keyword="oneOf (exclusivity)"))
        return alt(*branches)

    def _list(self, schema: dict, kw: str, path: str) -> list:
        value = schema.get(kw)
        if value is None:
            return []
        if not isinstance(value, list) or not value:
            raise SchemaError(f"{kw} must be a non-empty array", f"{path}/{kw}")
        return value

    # ------------------------------------------------------------------ own keywords
    def own(self, schema: dict, path: str, base: str, place: KeyOrder) -> Node:
        types = self.types(schema, path)
        if "const" in schema or "enum" in schema:
            return self.enum(schema, types, path, base, place)
        if _ALL_TYPES <= set(types) and not (schema.keys() & TYPE_KEYWORDS):
            return self.any_value()
        return alt(*(self.of_type(t, schema, path, base, place) for t in types))

    def types(self, schema: dict, path: str) -> list[str]:
        t = schema.get("type")
        if t is None:
            types = list(TYPES)
        else:
            types = [t] if isinstance(t, str) else t
            if not isinstance(types, list) or any(x not in TYPES for x in types):
                raise SchemaError(f"bad type {t!r}", f"{path}/type")
            types = list(types)
        if schema.get("nullable") is True and "null" not in types:
            types.append("null")
        if "number" in types and "integer" in types:
            types.remove("integer")
        return types

    def of_type(self, t: str, schema: dict, path: str, base: str, place: KeyOrder) -> Node:
        if t == "null":
            return _NULL
        if t == "boolean":
            return _BOOLEAN
        if t == "integer":
            return integer_node(schema, path, self.o.lenient, self.warn, frac=not self.draft4)
        if t == "number":
            return number_node(schema, path, self.o.lenient, self.warn)
        if t == "string":
            return self.string(schema, path)
        if t == "array":
            from guided.json_arrays import array_node

            return array_node(self, schema, path, base, place)
        from guided.json_objects import object_node

        return object_node(self, schema, path, base, place)

    def count(self, schema: dict, kw: str, default, path: str):
        """A non-negative integer keyword (``2.0`` counts as 2)."""
        v = schema.get(kw, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != int(v):
            raise SchemaError(f"{kw} must be a non-negative integer", f"{path}/{kw}")
        return int(v)

    def string(self, schema: dict, path: str) -> Node:
        decoded = self.string_decoded(schema, path)
        return json_string(decoded) if decoded is not None else quoted(string_body(0, None))

    def string_decoded(self, schema: dict, path: str) -> Node | None:
        """The decoded-string language of a schema's string keywords (None: every string)."""
        parts = []
        lo, hi = self.count(schema, "minLength", 0, path), self.count(schema, "maxLength", None, path)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                parts.append(parse_regex(pattern, search=True))
            except GrammarError as e:
                self.relax(f"pattern cannot be enforced exactly: {e}", f"{path}/pattern")
        fmt = schema.get("format")
        if isinstance(fmt, str):
            node = format_node(fmt)
            if node is not None:
                parts.append(node)
            elif fmt in _UNSUPPORTED_FORMATS:
                self.relax(f"format {fmt!r} has no regular grammar here", f"{path}/format")
        if (lo or hi is not None) and not (parts and within(parts, lo, hi)):
            parts.append(repeat(any_char(), lo, hi) if hi is None or hi >= lo else EMPTY)
        if not parts:
            return None
        return intersect(*parts) if len(parts) > 1 else parts[0]

    def enum(self, schema: dict, types: list[str], path: str, base: str, place: KeyOrder) -> Node:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise SchemaError("enum must be an array", f"{path}/enum")
        if len(values) > MAX_ENUM:
            raise LimitError(f"enum has {len(values)} values, more than {MAX_ENUM} (at {path}/enum)")
        if "const" in schema and "enum" in schema:
            values = [v for v in values if any(json_equal(v, e) for e in schema["enum"])]
        if set(schema) <= _SIMPLE_SIBLINGS:  # siblings are simple: filter in Python, exactly
            sibling = {k: v for k, v in schema.items() if k not in ("enum", "const", "nullable")}
            if schema.get("nullable") is True and "type" in sibling:
                sibling["type"] = types
            checker = jsonschema.Draft202012Validator(
                sibling, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
            kept = [v for v in values if _checked(checker, v, self, sibling, path)]
            return alt(*(self.value_literal(v) for v in kept))
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        own = alt(*(self.of_type(t, rest, path, base, place) for t in types))
        return intersect(alt(*(self.value_literal(v) for v in values)), own)

    def value_literal(self, v) -> Node:
        """The spellings of one JSON value (flexible whitespace inside arrays and objects)."""
        if v is None:
            return literal("null")
        if v is True or v is False:
            return literal("true" if v else "false")
        if isinstance(v, (int, float)):  # the value's own spelling only: a constant stays forced
            if v != v or v in (float("inf"), float("-inf")):
                return EMPTY
            return literal(json.dumps(v))
        if isinstance(v, str):
            return json_literal_string(v)
        if isinstance(v, list):
            items = [self.value_literal(x) for x in v]
            body = seq(*[x for i, it in enumerate(items) for x in ((self.sep, it) if i else (it,))])
            return seq(literal("["), self.ws, body, self.ws, literal("]"))
        if isinstance(v, dict):
            members = [seq(json_literal_string(k), self.colon, self.value_literal(x)) for k, x in v.items()]
            # key order is free in a value the schema spells out: any order of up to MAX_PERMUTED members
            from guided.json_objects import any_order

            return seq(literal("{"), self.ws, any_order(self, members), self.ws, literal("}"))
        raise SchemaError(f"not a JSON value: {v!r}")

    # ------------------------------------------------------------------ schema-free values
    def any_value(self, depth: int | None = None) -> Node:
        """Every JSON value: nesting without bound (a nonterminal), or at most ``depth`` (default
        ``any_depth`` when set) arrays/objects deep."""
        d = self.o.any_depth if depth is None else depth
        return self.anys.hole if d is None else self.anys.bounded(d)


def _checked(checker, value, lowering: SchemaLowering, sibling: dict, path: str) -> bool:
    try:
        return checker.is_valid(value)
    except jsonschema.exceptions.SchemaError as e:
        raise SchemaError(f"invalid schema: {e.message}", path) from e
