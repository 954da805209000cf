"""SchemaLowering: a JSON Schema to one regex AST node accepting exactly its instances (as generated).

Each schema becomes the intersection of its parts: its own type-specific keywords, ``$ref``,
``allOf`` (intersection), ``anyOf`` (union), ``oneOf`` (exactly one: each branch minus the others),
``not`` (complement within the JSON values), ``if``/``then``/``else``. Objects and arrays are in
``json_objects`` and ``json_arrays``; strings, numbers and formats in ``json_strings``,
``json_numbers`` and ``json_formats``. Whatever cannot be enforced exactly raises ``SchemaError``
naming the keyword's JSON pointer, or with ``lenient`` is relaxed with a warning.

Complements. ``not``, the ``else`` of ``if``, ``oneOf`` exclusivity and the items ``contains``
does not count need the values a schema refuses. Where those have a schema of their own
(``schema_complement.complement_schema``: ``required`` -> objects without the name, ``minimum`` ->
numbers below it, ...) that schema is lowered like any other, and nothing is complemented. What is
left is a complement of languages, and a value has many spellings (``1``, ``1.0``, ``1e0``,
``10e-1``; members in any order), while the set of all spellings of a value is not regular once
exponents are allowed. So a complement is taken among spellings without exponent, where the
spellings of a value are few and regular (its shortest one, trailing fraction zeros, ``-0`` for 0).
Each lowering runs in one of three modes (part of the memo key):

* ``FREE``: the instances as generated (every number spelling, declared key order);
* ``PLAIN``: the same with numbers without exponent only (``PLAIN_NUMBER``). Whatever is
  intersected with a complement is lowered so (a schema with ``not`` or ``contains``, an ``else``
  branch, a ``oneOf`` branch that must exclude the others), and a complement with nothing beside it
  is taken within ``any_p`` (schema_any);
* ``NEG``: a language holding *every exponent-free spelling* of the schema's values (members in
  any order, duplicates allowed: ``object_bags``; integers with any ``.000``; constants with their
  trailing zeros and ``-0``: ``saturated_number``), possibly more. This is what gets complemented.
  A complement inside it flips back to ``FREE``.

So a complement removes every exponent-free spelling of every value the schema accepts: the result
never accepts an instance the schema refuses, and beside it numbers are accepted without exponent
only (a restriction of what is generated, never a relaxation).
"""

from __future__ import annotations

import itertools
import json
import time
import warnings
from contextlib import contextmanager
from functools import lru_cache

import jsonschema

from guided.errors import CompileTimeoutError, GrammarError, LimitError, SchemaError
from guided.grammar import parse_regex
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    Alt,
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
from guided.schema.any_value import ANY_PLAIN, AnyValue
from guided.schema.arrays import array_node
from guided.schema.complement import MEMBER, complement, complement_schema, member_node
from guided.schema.facts import TYPES, discriminator, disjoint, json_equal, pairs_apart, unshared, within
from guided.schema.formats import HOST_FORMATS, format_holds, format_node
from guided.schema.intersections import Unresolved, disjoint_upper, distributed, holes_meet, meet_one
from guided.schema.key_order import KeyOrder, closes_by_default, exclusive_branches
from guided.schema.keywords import (
    ALL_TYPES,
    ANNOTATIONS,
    IN_PLACE,
    INTERPRETED,
    MAX_ENUM,
    OBJECT_ONLY,
    OLD_DRAFTS,
    SIMPLE_SIBLINGS,
    TYPE_KEYWORDS,
    UNSUPPORTED_FORMATS,
    UNSUPPORTED_KEYWORDS,
    takes_all,
)
from guided.schema.merge import merge, merge_cases, split_if
from guided.schema.numbers import PLAIN_NUMBER, integer_node, number_node, plain_number, saturated_number
from guided.schema.object_bags import value_bag
from guided.schema.objects import any_order, object_node
from guided.schema.options import SchemaOptions
from guided.schema.recursion import Hole, has_hole, map_meets
from guided.schema.resolver import SchemaResolver
from guided.schema.strings import json_literal_string, json_string, quoted, string_body

__all__ = ["SchemaLowering"]

# a oneOf branch beside two or more refusals spreads into at most this many cases (``_spread``): each
# is an object of the branch's names, and an alternation of many such objects costs the masks more
# than the intersection it replaces (GeoJSON's geometries with a misspelt discriminator: 45 each)
_SPREAD_CASES = 16
_SPREAD_REFUSALS = 8  # (past that many refusals, trying costs more compile time than it saves)
_NULL, _BOOLEAN = literal("null"), alt(literal("true"), literal("false"))


FREE, PLAIN, NEG = "free", "plain", "neg"


def _describes_objects(values: list) -> bool:
    """Whether any schema in these documents closes its objects by default under ``strict``
    (over-approximated: every nested dict is read as a schema)."""
    stack, seen = list(values), set()
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, dict) and id(value) not in seen:
            seen.add(id(value))
            if closes_by_default(value):
                return True
            stack.extend(value.values())
    return False


def _closed_to(schema: dict, names) -> bool:
    """Whether the schema's objects have no member named other than ``names`` (its own
    ``additionalProperties: false``, no ``patternProperties``, its ``properties`` among them)."""
    props = schema.get("properties") or {}
    return (
        schema.get("additionalProperties") is False
        and not schema.get("patternProperties")
        and isinstance(props, dict)
        and set(props) <= set(names)
    )


def _same(p: Node, q: Node) -> bool:
    """``p == q`` for regex AST nodes, by class first."""
    return p is q or (p.__class__ is q.__class__ and p == q)


class SchemaLowering:
    """One lowering run over one root schema (its resolver, budget, deadline and warnings)."""

    FREE, PLAIN, NEG = FREE, PLAIN, NEG

    def __init__(self, root, options: SchemaOptions, registry: dict | None = None, resolver: SchemaResolver | None = None):
        self.root = root
        self.options = options
        self.registry = registry
        self._mentions_unevaluated: bool | None = None  # _unevaluated(), on first need
        # (a caller's resolver over this root and registry shares the places its walks made)
        self.resolver = resolver or SchemaResolver(root if isinstance(root, dict) else {}, registry)
        # one object of each per whitespace option in the process: the context-free path finds the
        # separator by identity (``recursion._HoleRules``), in the schema-free values too (shared by
        # lowerings: ``any_value._KINDS``)
        self.ws, self.sep, self.colon = _punctuation(options.whitespace, options.max_ws)
        self.deadline = time.monotonic() + options.timeout_s
        self.visited = 0
        self.active: dict[int, int] = {}  # id(schema reached by $ref) -> times on the current path
        self.unrolling = 0
        self.memo: dict[tuple, Node] = {}
        # one object per language lowered: a schema met at several places (memo keys differ by
        # place) lowers to equal nodes built apart, which every later dict lookup (the pool's
        # interning memo, the terminals' runs) compared structurally, all the way down
        self.canon: dict[Node, Node] = {}
        self._keep: list = []
        self.rules: dict[str, Node] = {}  # nonterminal -> body (a regex AST with holes)
        self.rule_paths: dict[str, str] = {}  # nonterminal -> JSON pointer of its schema
        self.open_refs: dict[
            tuple, str | None
        ] = {}  # $ref targets being lowered -> nonterminal once recursive
        self.mode = FREE  # see "Complements" above
        self.negations = 0  # complements being lowered (NEG flips back to FREE inside two)
        self.literal = 0  # oneOf branches lowered beside the others' complements (literal meaning there)
        self.pieces: set[int] = set()  # ids of the dicts of complements' schema forms (kept alive with them)
        # strict closes something only where some schema describes objects: elsewhere the lowering
        # is the literal one (no memo entry split by the closing context)
        self.closing = options.strict and _describes_objects([root, *(registry or {}).values()])
        self.unique_runtime = False  # uniqueItems the grammar cannot hold is checked by the matcher
        self.names_runtime = False  # the matcher refuses repeated names (key_order "bag" places)
        # bags that leave required names to the matcher (``objects``; a mandatory place's, with
        # ``untrack``), and intersections of values built while a mandatory place is lowered (where
        # such a bag may be below: at other places none is, since no place below one that is not
        # mandatory is): where both happened, the compile lowers again with ``untrack`` off, since
        # an intersection may refuse a member the matcher waits for
        self.untrack = True
        self.untracked = 0
        self.intersected = 0
        self.at_mandatory = False  # the place being lowered is mandatory (``KeyOrder.mandatory``)
        self.hosts_runtime = frozenset()  # formats whose labels the matcher checks wherever no complement is (hostnames)
        self.unique_refusal = None  # why it cannot be (unique_plan's PlanError or a string), for the error
        self.anys = AnyValue(self)
        self.anys_p = AnyValue(self, plain=True)
        self.anys.sibling, self.anys_p.sibling = self.anys_p, self.anys
        self.plain_used = False  # whether the any_c nonterminal was handed out
        self.rewrites: dict[tuple, dict | None] = {}  # (id(schema), base) -> schema without `not`
        # ids of rewritten schemas that evaluate the names and items of their source (allOf merged
        # without if/not): the schema's own, or these, are what _evaluated_split may split
        self.faithful: set[int] = set()
        self.leaves: set[int] = set()  # keywords a complement schema leaves under `not` (no rewrite)
        self.member_specs: set[int] = set()  # ids of the MEMBER specs complement schemas wrote
        self.complements: dict[tuple, object] = {}  # (id(schema), base) -> its complement schema
        self.refusals: dict[int, object] = {}  # id of a member's refusal in a complement -> the member's schema
        self.inlined: dict[int, int] = {}  # $ref targets merged into an allOf being lowered
        self.probing = 0  # > 0: an intersection over holes raises Unresolved (schema_meet)
        self.proof_work = 0  # work spent proving oneOf branches disjoint (intersections.disjoint_upper)
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.old_draft = isinstance(schema_uri, str) and any(d in schema_uri for d in OLD_DRAFTS)
        # draft-03/04 count 1.0 as a number, not an integer
        self.draft4 = isinstance(schema_uri, str) and any(d in schema_uri for d in ("draft-03", "draft-04"))

    # ------------------------------------------------------------------ entry
    def abandon(self) -> None:
        """Once the language is built, or the lowering failed: drop everything it holds. What it built
        (memos, rules, the schema-free languages, which refer back to it) is otherwise left in
        reference cycles that only the collector frees: after a failure the frames of the error's
        traceback keep this object alive until the caller drops the error (a million objects, 2 s in
        whichever later mask a full pass lands in, after one large schema failed at its node bound);
        after a success, the collection at the end of the compile (``quiet_collector``) walked them
        all (10-20k objects, 10-47 ms, in a large schema's time to first mask). The schema-free
        values refer to each other (``sibling``): their memos are dropped too."""
        for anys in (self.__dict__.get("anys"), self.__dict__.get("anys_p")):
            if anys is not None:
                anys.__dict__.clear()
        self.__dict__.clear()

    def lower_root(self) -> Node:
        node = self.lower(self.root, "#", self.resolver.root_base, None)
        if self.plain_used and ANY_PLAIN not in self.rules:
            self.rules[ANY_PLAIN] = self.anys_p.body()
        return node

    @contextmanager
    def in_mode(self, mode: str):
        old, self.mode = self.mode, mode
        try:
            yield
        finally:
            self.mode = old

    def beside_complement(self):
        """The mode for what is intersected with a complement: no exponents, when free."""
        return self.in_mode(PLAIN if self.mode == FREE else self.mode)

    @property
    def closes_objects(self) -> bool:
        """Whether an object that leaves ``additionalProperties`` unset is lowered closed: under
        ``strict``, outside every complement. Closing is a restriction of what is generated; inside
        a complement (``not``, an ``if`` refused, ``oneOf`` exclusivity) it would be a relaxation,
        so there the schema keeps its literal meaning. A complement's schema form is generated, so
        it closes (to the names of its place: ``objects._object``); a ``oneOf`` branch beside the
        others' complements keeps the literal meaning (``literally``), as its places know."""
        return self.closing and not self.negations and not self.literal

    def a_labels(self, fmt: str) -> bool:
        """Whether host names of format ``fmt`` take every A-label's (and U-label's) syntax here
        (``formats.format_node``): where the matcher checks them (outside every complement,
        ``hosts_runtime``), and inside an odd number of complements, where a superset keeps the
        complement a subset. Elsewhere (inside two) hostname's names without A-labels: a subset,
        as a grammar alone can be exact (and idn-hostname none)."""
        return self.mode == NEG or (fmt in self.hosts_runtime and not self.negations)

    @contextmanager
    def literally(self):
        """Objects keep their literal meaning in what is lowered here (see ``closes_objects``)."""
        self.literal += 1
        try:
            yield
        finally:
            self.literal -= 1

    def negated(self, schema, path: str, base: str, place: KeyOrder | None) -> Node:
        """The language to complement for ``schema``: ``NEG`` mode (and a complement inside a
        complement flips back to ``FREE``)."""
        self.negations += 1
        try:
            with self.in_mode(FREE if self.mode == NEG else NEG):
                return self.lower(schema, path, base, place)
        finally:
            self.negations -= 1

    def warn(self, message: str, path: str) -> None:
        warnings.warn(f"JSON Schema relaxed at {path}: {message}", stacklevel=3)

    def relax(self, message: str, path: str) -> None:
        """A keyword cannot be enforced exactly: an error, or a warning when lenient."""
        if not self.options.lenient:
            raise SchemaError(message, path)
        self.warn(message + "; the keyword is not enforced", path)

    def tick(self, path: str) -> None:
        self.visited += 1
        if self.visited > self.options.max_nodes:
            raise LimitError(f"JSON Schema lowering exceeded {self.options.max_nodes} schema nodes (at {path})")
        if time.monotonic() > self.deadline:
            raise CompileTimeoutError(f"JSON Schema lowering exceeded {self.options.timeout_s} s (at {path})")

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
        if "not" in schema and id(schema["not"]) not in self.leaves:  # refused values as a schema
            rewritten = self._without_not(schema, base)
            if rewritten is not None:
                return self.lower(rewritten, path, base, place)
        if self.mode == FREE and ("not" in schema or self._uncounted_need_complement(schema, base)):
            with self.in_mode(PLAIN):  # its own keywords are intersected with a complement
                return self.lower(schema, path, base, place)
        if place is None:
            place = KeyOrder.at(self.resolver, [(schema, base)])
        key = (id(schema), base, place.key, self.mode, self.closes_objects, bool(self.hosts_runtime) and not self.negations)
        if not self.unrolling and key in self.memo:
            return self.memo[key]
        outer, self.at_mandatory = self.at_mandatory, place.mandatory
        try:
            node = self._lower(schema, path, base, place)
        finally:
            self.at_mandatory = outer
        node = self.canon.setdefault(node, node)
        if not self.unrolling:
            self.memo[key] = node
        return node

    def _lower(self, schema: dict, path: str, base: str, place: KeyOrder) -> Node:
        if "if" in schema and all(takes_all(schema.get(k, True)) for k in ("then", "else")) and not self._unevaluated():
            # an "if" whose then and else take every value asks nothing: dropped, so that neither
            # its cases nor its complement meet a recursive value beside it (pulumi's schema). Not
            # where unevaluated* may read the names or items it evaluates.
            schema = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
            self._keep.append(schema)  # memo keys use id()
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
        split = self._evaluated_split(schema, base)
        if split is not None:  # unevaluated* beside a oneOf/anyOf of disjoint branches: one variant each
            return self.lower(split, path, base, place)
        split = self._presence_split(schema, base)
        if split is not None:  # oneOf/anyOf of required sets: object variants, no intersection
            return self.lower(split, path, base, place)
        for kw in UNSUPPORTED_KEYWORDS:
            if kw in schema:
                raise SchemaError(f"{kw} is not supported", f"{path}/{kw}")
        if "$ref" in schema:
            target = self.lower_ref(schema["$ref"], path, base, place)
            if self.old_draft:  # before 2019-09, $ref's siblings are ignored
                return target
            parts = [target]
        else:
            parts = []
        if MEMBER in schema and id(schema[MEMBER]) in self.member_specs:  # internal (schema_complement)
            if _closed_to(schema, schema[MEMBER].get("names") or ()):
                return EMPTY  # a member named none of the names, in an object closed to them
            member = member_node(self, schema[MEMBER], path, base, place)
            if not parts and set(schema) <= {MEMBER, "type"} and schema.get("type", "object") == "object":
                return member
            parts.append(member)
        parts.append(self.own(schema, path, base, place))
        parts += self.applicators(schema, path, base, place)
        if self.options.max_depth is None and holes_meet(self, parts):
            node = self._rewritten(self._distributed(schema, base), path, base, place)
            if node is not None:
                return node
        return self.conjoin(parts, path, "allOf or $ref with sibling keywords")

    def _unevaluated(self) -> bool:
        """Whether ``unevaluatedProperties``/``unevaluatedItems`` occur in the schema or its registry."""
        if self._mentions_unevaluated is None:
            text = json.dumps([self.root, self.registry], default=str)
            self._mentions_unevaluated = '"unevaluatedProperties"' in text or '"unevaluatedItems"' in text
        return self._mentions_unevaluated

    def _uncounted_need_complement(self, schema: dict, base: str) -> bool:
        """Whether the items ``contains`` does not count are a complement (no schema says them)."""
        return "contains" in schema and complement_schema(self, schema["contains"], base) is None

    def _presence_split(self, schema: dict, base: str) -> dict | None:
        """An object schema whose ``oneOf`` (or ``anyOf``) branches only say which names are
        ``required``, rewritten as ``anyOf`` of object variants, each with its branch's names
        required and (``oneOf``) a name of every other branch absent (``properties: {x: false}``);
        under ``anyOf`` a variant keeps the non-objects. Equivalent, and it needs no intersection:
        properties whose values recurse stay context-free (WashingtonPost's content schemas). None
        when the schema is not of that shape or the variants would exceed 32."""
        def make():
            kws = [k for k in ("oneOf", "anyOf") if k in schema]
            if len(kws) == 1 and not any(k in schema for k in ("allOf", "not", "if", "$ref", "$dynamicRef")):
                return _presence_variants(schema, kws[0])
            return None

        return self.memo_rewrite((id(schema), base, "presence"), schema, make)

    def _evaluated_split(self, schema: dict, base: str) -> dict | None:
        """``unevaluatedProperties``/``unevaluatedItems`` beside one in-place applicator that
        evaluates names only where it holds, rewritten so that every applicator left beside them is
        an ``allOf`` the merge spreads into plain keywords (then unevaluated* reads what they
        evaluate), and every complement sits outside them (it evaluates nothing):

        * ``oneOf``/``anyOf``: ``anyOf`` of one variant per set of branches that may hold together
          (``oneOf``: each alone; ``anyOf``: each nonempty set of up to 4), the siblings with those
          branches as ``allOf`` members beside the other branches' complements; where no instance
          matches two branches (``facts.disjoint``, read with the siblings), one per branch, alone;
        * ``if``: the siblings with ``if`` and ``then``, or the siblings with ``else`` beside the
          complement of ``if``;
        * ``not``: the siblings beside it.

        Exact. None otherwise (the keyword stays refused)."""
        if "unevaluatedProperties" not in schema and "unevaluatedItems" not in schema:
            return None
        if id(schema) not in self.resolver.base_of and id(schema) not in self.faithful:
            return None  # an if split into cases, a not made plain: they evaluate other names

        def make():
            kws = [k for k in ("oneOf", "anyOf", "if", "not") if k in schema]
            if len(kws) != 1 or any(k in schema for k in ("allOf", "$ref", "dependentSchemas")):
                return None
            kw = kws[0]
            if kw == "not":
                return {"allOf": [{k: v for k, v in schema.items() if k != "not"}, {"not": schema["not"]}]}
            if kw == "if":
                beside = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
                cond, then, other = schema["if"], schema.get("then", True), schema.get("else", True)
                return {"anyOf": [{**beside, "allOf": [cond, then]},
                                  {"allOf": [{**beside, "allOf": [other]}, {"not": cond}]}]}  # fmt: skip
            subs = schema[kw]
            if not isinstance(subs, list) or not subs or len(subs) > 32:
                return None
            beside = {k: v for k, v in schema.items() if k != kw}
            n = len(subs)
            if n == 1 or disjoint(subs, self.resolver, base, beside):
                return {"anyOf": [{**beside, "allOf": [sub]} for sub in subs]}
            if kw == "oneOf":
                sets = [(i,) for i in range(n)]
            elif n <= 4:
                sets = [t for k in range(1, n + 1) for t in itertools.combinations(range(n), k)]
            else:
                return None
            variants = []
            for held in sets:
                nots = [{"not": subs[j]} for j in range(n) if j not in held]
                variants.append({"allOf": [{**beside, "allOf": [subs[i] for i in held]}, *nots]})
            return {"anyOf": variants}

        return self.memo_rewrite((id(schema), base, "evaluated"), schema, make)

    def refusal(self, refused, schema):
        """``refused``, noted as the values ``schema`` refuses (``merge_cases`` drops a case where a
        member must be both): returned as is."""
        if isinstance(refused, dict):
            self.refusals[id(refused)] = schema
            self.keep((refused, schema))
        return refused

    def _refuse_each_other(self, a, b) -> bool:
        """Whether one of two member schemas is noted as the refusal of the other (or of one equal
        to it: the same base is the lowering's, where complements are written)."""
        for x, y in ((a, b), (b, a)):
            of = self.refusals.get(id(x))
            if of is not None and (of is y or json_equal(of, y)):
                return True
        return False

    def _has_other_member(self, parts: list, option) -> bool:
        """Whether every object of ``parts`` (which say ``type: object``) has a member ``option``,
        a complement's piece "a member named none of these names", asks for: a name some part
        requires that is none of them (a closed branch's refusal beside a branch with its own)."""
        spec = option.get(MEMBER) if isinstance(option, dict) and set(option) <= {"type", MEMBER} else None
        if spec is None or id(spec) not in self.member_specs or spec.get("value") is not True:
            return False
        if set(spec) - {"names", "patterns", "value"} or spec.get("patterns"):
            return False
        names = set(spec.get("names") or ())
        required = {r for p in parts if isinstance(p, dict) for r in p.get("required", []) if isinstance(r, str)}
        return bool(required - names)

    def keep(self, obj) -> None:
        """Keep a rewritten schema alive: memo keys use id()."""
        self._keep.append(obj)

    def memo_rewrite(self, key: tuple, source, make):
        """``make()``, memoised under ``key`` (which holds ``id(source)``): the rewrite is kept
        alive beside its source, so the id stays theirs."""
        if key not in self.rewrites:
            out = self.rewrites[key] = make()
            self.keep((source, out))
        return self.rewrites[key]

    def _without_not(self, schema: dict, base: str):
        """``schema`` with ``not: X`` replaced by ``allOf: [complement_schema(X)]`` (kept, so the
        memo sees one dict per schema), or None when X's complement has no schema form or the
        schema reads unevaluatedProperties (not's names are not evaluated; an allOf member's are)."""
        key = (id(schema), base)
        if key not in self.rewrites:
            other = None if "unevaluatedProperties" in schema else complement_schema(self, schema["not"], base)
            if other is None:
                self.rewrites[key] = None
            else:
                rest = {k: v for k, v in schema.items() if k != "not"}
                if other is not True:
                    rest["allOf"] = [*rest.get("allOf", []), other]
                self.rewrites[key] = rest
                self._keep.append((schema, rest))
        return self.rewrites[key]

    def _distributed(self, schema: dict, base: str) -> dict | None:
        """``distributed(schema)``, one dict per (schema, base) and per content: a cycle through the
        rewrite (its branches inline ``$ref`` targets, merges copy) then meets the same dict again
        and closes there."""
        key = (id(schema), base, "distributed")
        if key not in self.rewrites:
            out = distributed(self, schema, base)
            if out is not None:  # merges build new dicts: an equal rewrite met before is that one
                out = self.rewrites.setdefault((base, json.dumps(out, sort_keys=True, default=repr)), out)
            self.rewrites[key] = out
            self.keep((schema, out))
        return self.rewrites[key]

    def _rewritten(self, rewritten: dict | None, path: str, base: str, place: KeyOrder) -> Node | None:
        """The language of a schema rewritten by ``distributed``, or None when it still needs an
        intersection over holes (then the original form is used: the smaller intersection). It is
        lowered as a reference target, so a cycle through it becomes a nonterminal."""
        if rewritten is None:
            return None
        mark = len(self.memo)
        self.probing += 1
        try:
            return self.lower_target(rewritten, path, base, place)
        except Unresolved:
            for key in list(self.memo)[mark:]:  # may name nonterminals whose bodies were never built
                del self.memo[key]
            return None
        finally:
            self.probing -= 1

    def _merged(self, schema: dict, base: str, inlined: list[int]) -> dict | None:
        """``allOf`` and object-shaped ``if`` rewritten into plain keywords, when exact (schema_merge)."""
        if "if" in schema and "allOf" not in schema and "anyOf" not in schema:
            if "unevaluatedProperties" in schema or "unevaluatedItems" in schema:
                return None  # its cases would evaluate other names than the if does: _evaluated_split
            rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
            if set(rest) - ANNOTATIONS - {"type"}:
                # keywords beside the if: merged into each case, so that no case meets them in an
                # intersection (a chain of nested ifs on discriminators, each case one object); None
                # where split_if is (the if is not object-shaped) or a case does not merge
                cases = merge_cases([rest, {k: schema[k] for k in ("if", "then", "else") if k in schema}])
                if cases is not None:
                    return cases
            return split_if(schema)
        subs = schema.get("allOf")
        if "$ref" in schema and "unevaluatedProperties" in schema and not self.old_draft:
            # $ref is in place too: its target's names count as evaluated, as an allOf member's do
            subs = [{"$ref": schema["$ref"]}, *(subs if isinstance(subs, list) else [])]
            schema = {k: v for k, v in schema.items() if k != "$ref"}
        if not isinstance(subs, list) or not subs or "$ref" in schema:
            return None
        parts = self._all_of_parts({**schema, "allOf": subs}, base, inlined)
        if parts is None:
            return None
        merged = merge(parts, outer=True)
        if merged is not None and not any(isinstance(p, dict) and ("if" in p or "not" in p) for p in parts):
            self.faithful.add(id(merged))  # kept alive by _lower: the members' names are its names
        if merged is None and sum(isinstance(p, dict) and "if" in p for p in parts) >= 2:
            # a chain of ifs: spread into cases (not for anyOf members alone, whose spread can be
            # far larger than the intersection it replaces)
            merged = merge_cases(parts)
        return merged

    def _all_of_parts(self, schema: dict, base: str, inlined: list[int]) -> list | None:
        """The schema's own keywords and its ``allOf`` members' conjuncts (``_conjuncts``), or None."""
        parts = [{k: v for k, v in schema.items() if k != "allOf"}]
        for sub in schema["allOf"]:
            spread = self._conjuncts(sub, base, inlined, set())
            if spread is None:
                return None
            parts += spread
        return parts

    def _conjuncts(self, sub, base: str, inlined: list[int], seen: set[int]) -> list | None:
        """``sub`` as a list of conjuncts: a bare ``$ref`` replaced by its target (same document), a
        target's own ``allOf`` spread out in turn; None at a cycle or a reference it cannot follow."""
        while isinstance(sub, dict) and "$ref" in sub and (self.old_draft or set(sub) - ANNOTATIONS <= {"$ref"}):
            try:
                sub, sub_base, _ = self.resolver.resolve(sub["$ref"], base, "#")
            except SchemaError:
                return None
            if sub_base != base or id(sub) in seen:
                return None
            if self.options.max_depth is None and self.inlined.get(id(sub), 0) >= 2:
                return None
            seen.add(id(sub))
            inlined.append(id(sub))
        if isinstance(sub, dict) and isinstance(sub.get("allOf"), list) and "$ref" not in sub:
            out = [{k: v for k, v in sub.items() if k != "allOf"}]
            for inner in sub["allOf"]:
                spread = self._conjuncts(inner, base, inlined, seen)
                if spread is None:
                    return None
                out += spread
            return out
        return [sub]

    def conjoin(self, parts: list[Node], path: str | None = None, keyword: str | None = None) -> Node:
        """The intersection of parts; a complement (``Not``) among them is taken within the
        exponent-free values (outside ``NEG`` mode): positive parts beside one must be ``PLAIN``."""
        # (nodes of another class are never equal: compared by class first, without Python's reflected
        # __eq__/__ne__ calls, a conjunction of a big schema's members cost a few percent of its compile)
        if any(p.__class__ is Alt and not p.items for p in parts):
            return EMPTY
        negative = [p for p in parts if isinstance(p, Not)]
        anys = self.anys_p if negative and self.mode != NEG else self.anys
        any_ = self.any_value()
        universe = any_ if anys is self.anys else self._any_of(anys)
        positive = [p for p in parts if not (_same(p, any_) or _same(p, universe) or isinstance(p, Not))]
        if not positive and negative and universe == anys.hole:
            return self.meet(anys.excluding([n.item for n in negative]), path, "not")
        if not positive:
            positive = [universe]
        out = positive + negative
        return out[0] if len(out) == 1 else self.both(*out, path=path, keyword=keyword)

    def lower_ref(self, ref, path: str, base: str, place: KeyOrder) -> Node:
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", f"{path}/$ref")
        target, tbase, tpath = self.resolver.resolve(ref, base, f"{path}/$ref")
        return self.lower_target(target, tpath, tbase, place)

    def lower_target(self, target, tpath: str, tbase: str, place: KeyOrder) -> Node:
        """A schema reached by reference (a ``$ref`` target, a complement schema): a cycle through
        it closes here as a nonterminal (or, with ``max_depth``, is unrolled)."""
        if self.options.max_depth is not None:
            return self._unroll(target, tbase, tpath, place)
        if not isinstance(target, dict):
            return self.lower(target, tpath, tbase, place)
        key = (id(target), self.resolver.base_of.get(id(target), tbase), place.key)
        key = (*key, self.mode, self.closes_objects)
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
        if count > self.options.max_depth:
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

    def both(self, *parts: Node, path: str, keyword: str, values: bool = True) -> Node:
        """The intersection of parts, resolved by ``meet`` when a part has holes (``values``: of
        values that may be objects, counted in ``intersected`` at a mandatory place)."""
        self.intersected += values and self.at_mandatory
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
            parts.append(self.one_of(subs, f"{path}/oneOf", base, place, schema))
        if "not" in schema:  # (lower() put this schema in PLAIN mode, or it is in NEG mode)
            parts.append(complement(self, schema["not"], f"{path}/not", base, place))
        if "if" in schema:
            cond = self.lower(schema["if"], f"{path}/if", base, place)
            then = self.lower(schema.get("then", True), f"{path}/then", base, place)
            refused = complement(self, schema["if"], f"{path}/if", base, place)
            if isinstance(refused, Not):  # beside a complement: no exponents
                with self.beside_complement():
                    else_ = self.lower(schema.get("else", True), f"{path}/else", base, place)
            else:
                else_ = self.lower(schema.get("else", True), f"{path}/else", base, place)
            yes = (
                self.both(cond, then, path=f"{path}/then", keyword="if/then")
                if then != self.any_value()
                else cond
            )
            parts.append(alt(yes, self.conjoin([else_, refused], f"{path}/if", "if/else")))
        return parts

    def one_of(self, subs: list, path: str, base: str, place: KeyOrder, beside: dict | None = None) -> Node:
        """Each branch minus the others, unless the branches are proved disjoint on values: on the
        schemas (read with ``beside``, the schema holding the oneOf), or on the languages that hold
        every exponent-free spelling of their values. Branches that may need exclusivity keep their
        literal meaning under ``strict`` (``key_order.exclusive_branches``; the places say so): beside
        the others' complements, closed branches made other (and far costlier) languages."""
        if self.closes_objects and exclusive_branches({"oneOf": subs}, self.resolver, base):
            with self.literally():
                return self.one_of(subs, path, base, place, beside)
        nodes = [self.lower(s, f"{path}/{i}", base, place) for i, s in enumerate(subs)]
        live = [(i, n) for i, n in enumerate(nodes) if n != EMPTY]
        if len(live) <= 1 or disjoint([subs[i] for i, _ in live], self.resolver, base, beside):
            return alt(*(n for _, n in live)) if live else EMPTY
        objects = self._apart_on_objects(subs, [i for i, _ in live], base)
        if objects is None:  # told apart by a property no branch requires, nothing valid without it
            objects = self._apart_on_discriminator(subs, [i for i, _ in live], base)
        if objects is not None:  # no non-object is valid (two branches take it), objects are apart
            return alt(*(self.lower(b, f"{path}/{i}", base, place) for (i, _), b in zip(live, objects, strict=True)))
        # a branch needs the complements of those it may overlap only (pairs proved apart: none)
        pairs = pairs_apart([subs[i] for i, _ in live], self.resolver, base, beside)
        return self._exclusive(subs, live, path, base, place, {(live[a][0], live[b][0]) for a, b in pairs})

    def _exclusive(self, subs: list, live: list, path: str, base: str, place: KeyOrder, apart: set) -> Node:
        """``oneOf`` exclusivity: each live branch ``(i, node)`` beside the complements of the
        others, except those proved apart from it (``apart``: pairs ``(i, j)``, ``i < j``). Of
        another branch, a branch refuses only the conjuncts it does not hold itself
        (``_unshared``: a shared base is never complemented), and takes nothing when it holds them
        all (it implies the other)."""

        def overlap(i: int, j: int) -> bool:
            return i != j and (min(i, j), max(i, j)) not in apart

        nodes = dict(live)
        shared = [i for i, _ in live if any(overlap(i, j) for j, _ in live)]
        holes = any(has_hole(nodes[i]) for i in shared)
        if holes:  # proved on languages holding every plain spelling
            # (every branch's: the bounds read the first level of the nonterminals defined so far)
            spelled = {i: n if self.mode == NEG else self.negated(subs[i], f"{path}/{i}", base, place) for i, n in live}
            if disjoint_upper(self, [spelled[i] for i in shared]):
                return alt(*(n for _, n in live))
        # what branch i must not also match: branch j less the conjuncts i holds too (None: i
        # implies j, so no value of i matches exactly one); a (schema, base) pair
        against = {(i, j): self._unshared(subs, i, j, base) for i in shared for j in shared if overlap(i, j)}
        gone = {i for (i, _), t in against.items() if t is None}
        # exclusivity as plain schemas that merge into the branch (with schema-free values or
        # recursion below, a complement needs a bounded approximation; of a whole object, costly
        # emptiness searches at mask time); else as complements of the languages
        others = {ij: complement_schema(self, *t) if t is not None and t[1] == base else None
                  for ij, t in against.items() if ij[0] not in gone} if holes else {}  # fmt: skip
        if holes and all(o is not None for o in others.values()):
            key = (id(subs), base, "oneOf", frozenset(apart))
            rewritten = self.memo_rewrite(key, subs, lambda: [
                None if i in gone else self._spread([subs[i], *(o for (a, _), o in others.items() if a == i and o is not True)], base)
                for i, _ in live
            ])  # fmt: skip
            return alt(*(self.lower(b, f"{path}/{i}", base, place) for (i, _), b in zip(live, rewritten, strict=True) if b is not None))
        refused = {(id(t[0]), t[1]): self._refused(t[0], f"{path}/{j}", t[1], place, holes)
                   for (_, j), t in against.items() if t is not None}  # fmt: skip
        branches = []
        for i, n in live:
            if i in gone:
                continue
            if self.mode == FREE and i in shared:
                with self.beside_complement():
                    n = self.lower(subs[i], f"{path}/{i}", base, place)
            parts = [refused[id(against[i, j][0]), against[i, j][1]] for j, _ in live if overlap(i, j)]
            branches.append(self.conjoin([n, *parts], path, "oneOf (exclusivity)"))
        return alt(*branches)

    def _spread(self, members: list, base: str) -> dict:
        """``{"allOf": members}`` (a branch and the refusals of the branches it may overlap), as
        ``anyOf`` of merged cases where ``merge_cases`` can, for one to ``_SPREAD_REFUSALS``
        refusals and at most ``_SPREAD_CASES`` cases: no intersection with schema-free values below
        is left to a depth bound, nor one of whole objects to the automaton. A single refusal kept
        as the intersection made some masks 20x slower (o65945: 11 -> 212 ms, once its ``maxItems:
        0`` branch was proved apart and left one refusal where there were two)."""
        both = {"allOf": members}
        if not 2 <= len(members) <= _SPREAD_REFUSALS + 1:
            return both
        parts = self._all_of_parts(both, base, [])
        cases = None if parts is None else merge_cases(
            parts, self._refuse_each_other, self._has_other_member, limit=_SPREAD_CASES, growth=4)
        return both if cases is None else cases

    def _unshared(self, subs: list, i: int, j: int, base: str) -> tuple | None:
        """Branch j as the (schema, base) that branch i must not match: the conjuncts of j that i
        does not hold too (``facts.unshared``; several merged back into one schema where exact, so
        the complement's pieces stay flat; kept for the memo, as a conjunct may be a new dict), or
        all of j when none is shared or the rest lie at different bases; None when i holds all of
        j's (i implies j)."""
        rest = unshared(subs[i], subs[j], self.resolver, base)
        if rest is None or (len(rest) > 1 and any(b != rest[0][1] for _, b in rest)):
            return subs[j], base
        if not rest:
            return None
        def make():
            return rest[0][0] if len(rest) == 1 else merge([x for x, _ in rest]) or {"allOf": [x for x, _ in rest]}

        part = self.memo_rewrite((id(subs), base, "unshared", i, j), subs, make)
        return part, rest[0][1]

    def _apart_on_objects(self, subs: list, live: list[int], base: str) -> list[dict] | None:
        """For ``oneOf`` branches that only constrain objects (so each accepts every non-object) and
        are proved disjoint on objects: each branch as ``{"type": "object"} ∧ branch`` (kept, for the
        memo), else None. Disjoint on objects: a discriminator (``required`` names with different
        ``enum`` values), or closed objects (``additionalProperties: false``) whose names are pairwise
        apart, which share only ``{}``: when two or more accept it, every branch also gets
        ``minProperties: 1`` (an empty object matches more than one, so oneOf refuses it)."""

        def make():
            branches = [self._object_only(subs[i], base) for i in live]
            if not all(b is not None for b in branches):
                return None
            if disjoint([{**b, "type": "object"} for b in branches], self.resolver, base):
                extra = {}
            elif _closed_and_apart(branches):
                extra = {"minProperties": 1} if sum(map(_accepts_empty_object, branches)) >= 2 else {}
            else:
                return None
            return [{"allOf": [{"type": "object", **extra}, subs[i]]} for i in live]

        return self.memo_rewrite((id(subs), base, "objects"), subs, make)

    def _apart_on_discriminator(self, subs: list, live: list[int], base: str) -> list[dict] | None:
        """The branches each as ``{"allOf": [branch, {"type": "object", "required": [P]}]}`` when
        ``facts.discriminator`` finds P (kept, for the memo), else None."""

        def make():
            name = discriminator([subs[i] for i in live], self.resolver, base)
            return None if name is None else [{"allOf": [subs[i], {"type": "object", "required": [name]}]} for i in live]

        return self.memo_rewrite((id(subs), base, "discriminator"), subs, make)

    def _object_only(self, schema, base: str) -> dict | None:
        """The schema (a ``$ref`` resolved) when all its keywords constrain objects only, else None."""
        if isinstance(schema, dict) and set(schema) - ANNOTATIONS == {"$ref"}:
            try:
                schema, tbase, _ = self.resolver.resolve(schema["$ref"], base, "#")
            except SchemaError:
                return None
            if tbase != base:
                return None
        if not isinstance(schema, dict) or not set(schema) - ANNOTATIONS <= OBJECT_ONLY:
            return None
        return schema

    def _refused(self, schema, path: str, base: str, place: KeyOrder, holes: bool) -> Node:
        if holes:
            return complement(self, schema, path, base, place)
        inner = self.negated(schema, path, base, place)
        return Not(inner) if inner != EMPTY else self.any_value()

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
        if ALL_TYPES <= set(types) and not (schema.keys() & TYPE_KEYWORDS):
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
            frac, zeros = not self.draft4, self.mode == NEG  # NEG: every spelling without exponent
            return integer_node(schema, path, self.options.lenient, self.warn, frac=frac, zeros=zeros)
        if t == "number":
            node = number_node(schema, path, self.options.lenient, self.warn, zeros=self.mode == NEG)
            return intersect(node, PLAIN_NUMBER) if self.mode == PLAIN else node
        if t == "string":
            return self.string(schema, path)
        if t == "array":

            return array_node(self, schema, path, base, place)
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
            node = format_node(fmt, fmt in HOST_FORMATS and self.a_labels(fmt))
            if node is not None:
                parts.append(node)
            elif fmt in UNSUPPORTED_FORMATS:  # (idn-hostname where the matcher does not check it)
                self.relax(f"format {fmt!r} is enforced only where it applies in every branch of its place or in "
                           "none, outside if, contains and propertyNames", f"{path}/format")  # fmt: skip
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
        own = (schema.keys() & INTERPRETED) - IN_PLACE  # (applicators and $ref meet it in _lower)
        if own <= SIMPLE_SIBLINGS:  # siblings are simple: filter in Python, exactly
            sibling = {k: schema[k] for k in own - {"enum", "const", "nullable"}}
            if schema.get("nullable") is True and "type" in sibling:
                sibling["type"] = types
            checker = jsonschema.Draft202012Validator(
                sibling, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
            fmt = sibling.get("format") if isinstance(sibling.get("format"), str) else None
            kept = [v for v in values if _checked(checker, v, self, sibling, path)  # (jsonschema checks few formats)
                    and (fmt is None or not isinstance(v, str) or format_holds(fmt, v) is not False)]  # fmt: skip
            return alt(*(self.value_literal(v) for v in kept))
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        own = alt(*(self.of_type(t, rest, path, base, place) for t in types))
        self.intersected += self.at_mandatory
        return intersect(alt(*(self.value_literal(v) for v in values)), own)

    def value_literal(self, v) -> Node:
        """The spellings of one JSON value (flexible whitespace inside arrays and objects)."""
        if v is None:
            return literal("null")
        if v is True or v is False:
            return literal("true" if v else "false")
        if isinstance(v, (int, float)):  # one spelling (a constant stays forced); NEG: both
            if v != v or v in (float("inf"), float("-inf")):
                return EMPTY
            if self.mode != NEG:  # a float written 2.0 in the schema is also taken as 2, as JSON writers spell it
                if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
                    return alt(literal(json.dumps(v)), literal(str(int(v))))
                return literal(json.dumps(v) if self.mode == FREE else plain_number(v))
            return alt(literal(json.dumps(v)), saturated_number(v))
        if isinstance(v, str):
            return json_literal_string(v)
        if isinstance(v, list):
            items = [self.value_literal(x) for x in v]
            body = seq(*[x for i, it in enumerate(items) for x in ((self.sep, it) if i else (it,))])
            return seq(literal("["), self.ws, body, self.ws, literal("]"))
        if isinstance(v, dict):
            members = [seq(json_literal_string(k), self.colon, self.value_literal(x)) for k, x in v.items()]
            if self.mode == NEG:  # every order: any len(v) of the members
                return value_bag(self, members)
            # key order is free in a value the schema spells out: any order of up to MAX_PERMUTED members
            return seq(literal("{"), self.ws, any_order(self, members), self.ws, literal("}"))
        raise SchemaError(f"not a JSON value: {v!r}")

    # ------------------------------------------------------------------ schema-free values
    def any_value(self, depth: int | None = None) -> Node:
        """Every JSON value: nesting without bound (a nonterminal), or at most ``depth`` (default
        ``any_depth`` when set) arrays/objects deep."""
        return self._any_of(self.anys_p if self.mode == PLAIN else self.anys, depth)

    def _any_of(self, anys: AnyValue, depth: int | None = None) -> Node:
        d = self.options.any_depth if depth is None else depth
        if d is None:
            self.plain_used |= anys.plain
            return anys.hole
        return anys.bounded(d)

    def any_kinds(self, name: str) -> tuple[Node, Node, Node]:
        """(scalars, arrays, objects) of the schema-free nonterminal ``name``."""
        return (self.anys_p if name == ANY_PLAIN else self.anys).kinds()


@lru_cache(maxsize=64)
def _punctuation(whitespace: str, max_ws: int) -> tuple[Node, Node, Node]:
    """(whitespace, ``ws , ws``, ``ws : ws``) of the whitespace options."""
    ws = EPSILON if whitespace == "compact" else repeat(chars([(9, 10), (13, 13), (32, 32)]), 0, max_ws)
    return ws, seq(ws, literal(","), ws), seq(ws, literal(":"), ws)


def _checked(checker, value, lowering: SchemaLowering, sibling: dict, path: str) -> bool:
    try:
        return checker.is_valid(value)
    except jsonschema.exceptions.SchemaError as e:
        raise SchemaError(f"invalid schema: {e.message}", path) from e


def _presence_variants(schema: dict, kw: str) -> dict | None:
    """See ``SchemaLowering._presence_split``."""
    branches = schema[kw]
    if not isinstance(branches, list) or not branches:
        return None
    sets = []
    for b in branches:
        if not isinstance(b, dict) or set(b) - ANNOTATIONS != {"required"}:
            return None
        req = b["required"]
        if not isinstance(req, list) or not all(isinstance(x, str) for x in req):
            return None
        sets.append(set(req))
    props = schema.get("properties", {})
    if not isinstance(props, dict) or not (props or schema.get("type") == "object"):
        return None
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types
    if types is not None and (not isinstance(types, list) or "object" not in types):
        return None
    parent = {k: v for k, v in schema.items() if k != kw}
    own = [x for x in parent.get("required", []) if isinstance(x, str)]
    variants: list[dict] = []
    for i, need in enumerate(sets):
        choices: list[list[str]] = [[]]  # names to make absent, one per other branch (oneOf)
        if kw == "oneOf":
            for j, other in enumerate(sets):
                if j == i:
                    continue
                free = sorted(other - need)
                if not free:  # branch i implies branch j: never exactly one
                    choices = []
                    break
                choices = [c + [x] for c in choices for x in free]
                if len(choices) > 32:
                    return None
        for absent in choices:
            required = list(dict.fromkeys([*own, *sorted(need)]))
            if set(absent) & set(required):
                continue
            v = {**parent, "type": "object", "required": required}
            if absent:
                v["properties"] = {**props, **dict.fromkeys(absent, False)}
            variants.append(v)
            if len(variants) > 32:
                return None
    if kw == "anyOf" or len(sets) == 1:  # non-objects satisfy every branch: valid once at least one is
        rest = [t for t in (types or ["null", "boolean", "number", "string", "array"]) if t != "object"]
        if rest:
            variants.append({**parent, "type": rest})
    return {"anyOf": variants} if variants else False


def _closed_and_apart(branches: list[dict]) -> bool:
    """Whether the object schemas are closed (``additionalProperties: false``, no patterns or name
    schemas) and no name is declared by two of them: then an object two of them accept has no names."""
    seen: set[str] = set()
    for b in branches:
        if b.get("additionalProperties") is not False or b.get("patternProperties") or "propertyNames" in b:
            return False
        names = set(b.get("properties") or {})
        if names & seen:
            return False
        seen |= names
    return True


def _accepts_empty_object(branch: dict) -> bool:
    """Whether an object-only schema (keywords in OBJECT_ONLY) accepts ``{}``."""
    return not branch.get("required") and not (branch.get("minProperties") or 0) >= 1
