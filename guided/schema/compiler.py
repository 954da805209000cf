"""JSON Schema -> regex AST or context-free grammar -> compiled grammar: the public entry points.

``json_schema_to_grammar(schema, **options)`` lowers a JSON Schema (a dict, a JSON string, or a
pydantic model class; draft 2020-12 and draft-07, as pydantic v2 writes them) to the language of its
instances as generated: one regex AST node when that language is regular, else a ``CfgGrammar``
(see the policy below); or raises ``SchemaError`` naming the keyword and its JSON pointer.
``compile_json_schema(compiler, schema, **options)`` compiles either (``compile_ast`` or
``compile_cfg``: both give matchers with the same API), cached under the JSON of (schema, options,
registry), member order kept (``cache_key``). ``json_schema_to_node`` is the regex-only variant (schema-free values bounded by
``any_depth``, default 10 there; recursive schemas need ``max_depth``) for callers that embed the
node in a larger regex.

Output policy
-------------
* Whitespace: "flexible" (default) allows up to ``max_ws`` (default 8) of space, tab, CR, LF after
  ``{ [ , :`` and before ``} ] , :``; "compact" allows none. Never before or after the root value,
  so a model cannot loop on whitespace.
* Key order (``key_order``): "declared" (default) accepts the declared order (``properties`` order,
  merged in document order over the schemas that apply at the same place, then names only
  ``required`` lists) or the required-first order, other properties (``patternProperties``,
  ``additionalProperties``) after them, so keys the order fixes are forced. "any" accepts any order
  of at most ``MAX_PERMUTED`` (6) declared properties at a place (each at most once, required ones
  present; the automaton's state is the set of names seen, ``n * 2**(n-1)`` member edges), other
  properties anywhere. Past that bound, through ``compile_json_schema``: any order too (the "bag"
  policy: the grammar takes members in any order with repeats, the matcher refuses a name written
  twice), wherever every undeclared name is alike (no ``patternProperties``/``propertyNames``) and
  at most 8 names must be present; elsewhere (and from ``json_schema_to_grammar`` alone) the
  declared order or the required names first and then the rest in any order (in declared order
  past the bound), other properties before or after them; where ``minProperties``/
  ``maxProperties`` count members, the "declared" policy (see ``guided.schema.key_order``). The
  policy depends on the place only, so ``not``/``oneOf`` stay exact.
* Strings: the canonical JSON spelling of each character (``json.dumps(..., ensure_ascii=False)``).
* Numbers: integers as ``-?(0|[1-9][0-9]*)`` (``1.0`` allowed from draft-06 on, as JSON Schema
  counts it an integer); bounded numbers (and ``multipleOf``) as plain decimals without an exponent.
* Recursion: a ``$ref`` cycle (``{"$ref": "#"}``, trees and linked lists in ``$defs``, pydantic
  self-referencing models) becomes a nonterminal per recursive definition, keyed like the regular
  lowering's memo (schema, base URI, key-order place); everything between recursive references stays
  regular and becomes whole terminals. ``max_depth=N`` instead unrolls cycles N levels (regular).
* Schema-free values (``true``, ``{}``, ``{"type": "object"}``/``"array"`` without constraints,
  ``additionalProperties``/``items`` left open) nest without bound through one shared ``any``
  nonterminal, whenever they occur (a schema without any stays on the regular path, unchanged).
  Measured on 101 MaskBench schemas (``benchmarks/schema_any_policy.py --every 75``, Llama-3, CPU)
  against the regular ``any_depth=10`` bound: the same schemas pass (96); time to first mask x1.47
  median (x3.8 p90); time per mask unchanged at the median (mean per schema x1.00, x1.65 p90). The
  exactness is worth that one-off cost; ``any_depth=N`` remains an explicit opt-in.
* Intersections and complements have no context-free form. Over holes (recursive references or
  unbounded values) the lowering first avoids them: ``$ref`` siblings and ``anyOf``/``oneOf`` branches
  are merged into one schema when that is exact, ``oneOf`` branches proved disjoint need no
  exclusivity, ``not`` of whole kinds or of regular languages is computed per kind. Otherwise a
  recursive reference under ``allOf``/``not``/``oneOf``/``if``/``contains``/``uniqueItems``/
  ``dependentSchemas`` is a ``SchemaError`` naming the keyword and pointer (``lenient``: relaxed to any
  JSON value there, with a warning), and a schema-free value there nests at most ``any_depth`` (or
  10) deep, with a warning. Output is never silently narrowed or widened.
* ``format`` is asserted (as MaskBench and the test suite's ``optional/format`` expect), following
  the RFC grammars (see ``guided.schema.formats``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace
from functools import cached_property
from typing import Any

from guided.errors import GrammarError, LimitError, SchemaError
from guided.grammar import intern_common, quiet_collector
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.regex_ast import EMPTY, Let, Node, recursive
from guided.limits import check_schema
from guided.schema.any_value import ANY, ANY_NAMES, ANY_PLAIN
from guided.schema.drafts import for_draft
from guided.schema.dynamic_refs import static_dynamic_refs
from guided.schema.formats import HOST_FORMATS, format_node
from guided.schema.intersections import meet_one
from guided.schema.key_order import KeyOrder, has_bag, mark_mandatory, repeats_names, root_place
from guided.schema.keywords import OLD_DRAFTS
from guided.schema.lowering import SchemaLowering
from guided.schema.options import SchemaOptions
from guided.schema.pydantic_models import json_schema_for
from guided.schema.recursion import (
    Hole,
    SchemaCfg,
    fill_holes,
    has_hole,
    has_meet,
    hole_memo,
    hole_names,
    survey_holes,
)
from guided.schema.resolver import SchemaResolver, shared_copies
from guided.schema.shapes import check_shapes
from guided.schema.strings import ANY_STRING_BODY, ENC_ANY_CHAR, json_string, other_than, word_char
from guided.schema.unique_plan import PlanError, UniquePlan, mentions_unique
from guided.schema.unique_runtime import UniqueChecked

__all__ = [
    "json_schema_to_grammar",
    "json_schema_to_node",
    "compile_json_schema",
    "schema_dict",
    "cache_key",
    "SchemaOptions",
]

logger = logging.getLogger(__name__)


def schema_dict(schema: Any) -> dict | bool:
    """A schema as a dict: from a dict/bool, a JSON string, or a pydantic model class."""
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, (str, bytes)):
        try:
            value = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"the schema is not valid JSON: {e}") from e
        if not isinstance(value, (dict, bool)):
            raise SchemaError("a JSON Schema must be an object or a boolean")
        return value
    if hasattr(schema, "model_json_schema"):

        return json_schema_for(schema)
    raise SchemaError(f"not a JSON Schema: {type(schema).__name__}")


def json_schema_to_grammar(
    schema: Any,
    *,
    registry: dict | None = None,
    unique_runtime: UniquePlan | PlanError | str | None = None,
    names_runtime: bool = False,
    hosts_runtime: frozenset = frozenset(),
    _bind: bool = False,
    _lowered: Any = None,
    _resolver: SchemaResolver | None = None,
    **options,
) -> Node | CfgGrammar:
    """The language of a JSON Schema's instances: a regex AST node, else a ``CfgGrammar`` (where a
    recursive ``$ref`` cycle is left). Schema-free values (``{}``, open objects' other members) nest
    without bound: in a regex they are ``Recursive`` leaves, whose derivatives the regular engine
    takes; in a grammar, the nonterminal ``any``.

    Parameters
    ----------
    schema : dict, bool, str or pydantic model class
    registry : dict, optional
        ``{uri: schema}`` for remote ``$ref`` targets; nothing is ever fetched.
    unique_runtime : UniquePlan, PlanError, str or None
        A checked plan: ``uniqueItems`` over items the grammar cannot make unique is left to the
        matcher (``compile_json_schema`` wraps the grammar); a PlanError or a string: why the plan
        was refused (the error then says it, at the PlanError's pointer).
    names_runtime : bool
        The matcher refuses a member name written twice (``compile_json_schema`` wraps the grammar):
        with ``key_order="any"``, objects with more declared names than a permutation automaton
        holds then accept them in any order (with repeats, which the matcher refuses); without it
        they keep the declared order (see ``key_order``).
    hosts_runtime : frozenset
        The formats (``hostname``, ``idn-hostname``) whose labels the matcher checks (``hostnames``):
        their grammar takes every A-label's (and U-label's) syntax; without it, host names have no
        A-labels and idn-hostname is refused.
    **options
        ``SchemaOptions`` fields: strict, lenient, whitespace, max_ws, max_depth, any_depth,
        max_nodes, timeout_s.

    Raises
    ------
    SchemaError
        A keyword cannot be enforced exactly (unless ``lenient``), or the schema is malformed or
        accepts nothing.
    LimitError, CompileTimeoutError
        The lowering exceeded its size or time bound.
    """
    opts = options.pop("options", None) or SchemaOptions(**options)
    schema = for_draft(schema_dict(schema))
    check_schema(schema, opts.limits)  # sizes, depth, counts: LimitError naming the limit and JSON pointer
    check_shapes(schema)  # malformed keywords: SchemaError naming the keyword and JSON pointer
    schema = _as_lowered(schema, opts) if _lowered is None else _lowered  # (the caller's, made from this schema)
    # (the caller's resolver, built over its document and the registry: the places its walks made)
    lowering = SchemaLowering(schema, opts, registry, resolver=_resolver if _lowered is not None else None)
    static = static_dynamic_refs(schema, registry, lowering.resolver)  # dynamic references that are plain $refs
    if static[0] is not schema or static[1] is not registry:
        lowering = SchemaLowering(static[0], opts, static[1])
    root, registry, resolver = lowering.root, lowering.registry, lowering.resolver
    deadline = lowering.deadline  # (one time bound for both lowerings below; abandon() drops it)
    language, untracked = _lowered_language(lowering, unique_runtime, names_runtime, hosts_runtime, _bind)
    if untracked:
        # a bag left required names to the matcher where an intersection may refuse one of their
        # members: the matcher would then wait for a name the grammar cannot write (a dead end)
        again = SchemaLowering(root, opts, registry, resolver=resolver)
        again.untrack, again.deadline = False, deadline
        language, _ = _lowered_language(again, unique_runtime, names_runtime, hosts_runtime, _bind)
    return language


def _lowered_language(lowering: SchemaLowering, unique_runtime, names_runtime: bool, hosts_runtime: frozenset,
                      bind: bool) -> tuple[Node | CfgGrammar, bool]:  # fmt: skip
    """``_lower`` with the lowering told what the matcher checks, and whether a bag that leaves
    required names to the matcher met an intersection; the lowering is abandoned after."""
    lowering.unique_runtime = isinstance(unique_runtime, UniquePlan)
    lowering.names_runtime = names_runtime
    lowering.hosts_runtime = hosts_runtime
    lowering.unique_refusal = unique_runtime if isinstance(unique_runtime, (str, PlanError)) else None
    try:
        with hole_memo():  # one has_hole memo for the whole lowering (see has_hole)
            language = _lower(lowering, bind=bind)
    except BaseException as e:
        lowering.abandon()
        if isinstance(e, RecursionError):
            raise LimitError("the schema nests too deeply to compile (recursion limit)") from None
        raise
    untracked = bool(lowering.untracked and lowering.intersected)
    lowering.abandon()
    return language, untracked


def _as_lowered(schema, opts: SchemaOptions):
    """The document the lowering reads: a copy of a subschema is one object there, lowered once
    (``resolver.shared_copies``), except under ``max_depth`` (unrolling counts a cycle's levels by
    schema identity)."""
    return shared_copies(schema) if opts.max_depth is None else schema


def _lower(lowering: SchemaLowering, leaves: bool = True, bind: bool = False) -> Node | CfgGrammar:
    """The lowering's language; with ``leaves`` False, schema-free values stay nonterminals even where
    no other one is left (the context-free grammar's lexemes, for ``_intern_common_lexemes``). With
    ``bind``, a regex may come as a ``Let`` (see ``_with_value_leaves``)."""
    node = lowering.lower_root()
    if node == EMPTY:
        raise SchemaError("the schema accepts no instance")
    if not has_hole(node):
        return node
    if ANY not in lowering.rules:
        lowering.rules[ANY] = lowering.anys.body()
    resolved: dict[int, tuple[Node, Node]] = {}  # intersection (by identity) -> (it, its replacement)

    def fix(meet: Node) -> Node:
        hit = resolved.get(id(meet))
        if hit is None:
            hit = resolved[id(meet)] = (meet, meet_one(lowering, meet, None, None))
        return hit[1]

    regular = _with_value_leaves(lowering, node, fix, bind) if leaves else None
    if regular is not None:
        return regular
    seconds = lowering.deadline - time.monotonic()  # (intersections the try above resolved are not again)
    return SchemaCfg(lowering.rules, fix, seconds, separator=lowering.sep).grammar(node)


# the bytes a JSON value begins with: a string, a number, true, false, null, an array, an object
_VALUE_FIRST = sum(1 << b for b in b'"-0123456789tfn[{')


def _with_value_leaves(lowering: SchemaLowering, node: Node, fix, bind: bool = False) -> Node | None:
    """The language as one regex when its only nonterminals are the schema-free values (``any``,
    ``any_p``): each becomes a ``Recursive`` leaf (a JSON value, nesting without bound, whose
    derivatives the regular engine takes like any other expression's), after the intersections
    above them are resolved by ``fix`` (as ``SchemaCfg`` resolves them). None (the context-free path)
    when another nonterminal (a recursive ``$ref``) is left, or an intersection or complement.

    With ``bind`` and no intersection above a hole, the node is not rebuilt: a ``Let`` binds each
    hole to its leaf, which interning puts in place (rebuilding the paths down to the holes, every
    open object's, cost ~15% of a typical compile)."""
    leaves: dict[str, Node] = {}

    def leaf(hole: Hole) -> Node:
        got = leaves.get(hole.name)
        if got is None:
            name = hole.name
            if name not in ANY_NAMES:
                raise _OtherNonterminal
            body = lowering.rules.get(name) or (lowering.anys_p if name == ANY_PLAIN else lowering.anys).body()
            known = _LEAF_OF.get(id(body))  # (the body is most often the one node of its options: AnyValue.body)
            if known is None or known[0] is not body:
                value = None if hole_names(body) != {name} or has_meet(body) else recursive(body, Hole(name), _VALUE_FIRST, 1)
                known = (body, value)
                if len(_LEAF_OF) < 256:
                    _LEAF_OF[id(body)] = known  # (the body kept alive with its id)
            if known[1] is None:
                raise _OtherNonterminal
            got = leaves[name] = known[1]
            if got.name not in _COMMON_VALUES:  # every later compile with these options copies its expression
                intern_common([got])
                _COMMON_VALUES.add(got.name)
        return got

    # an intersection or complement (a oneOf's exclusions, say) beside the leaves: the context-free
    # path, for now. In one regex, its derivatives carry the whole rest of the document along: rows
    # of states in such schemas cost ~5 ms each, and single masks took 0.3-1.2 s where the lexer's
    # smaller lexemes took 0.1-0.2 s (MaskBench: o17529, helm-testsuite, tye-schema). Told before
    # the filling where the node shows it (the filling cost such schemas ~10 ms for nothing), and
    # after it where a resolved intersection's replacement holds one
    def bound(names) -> Node | None:
        try:
            holes = tuple(Hole(name) for name in sorted(names))
            return Let(node, holes, tuple(leaf(h) for h in holes))
        except _OtherNonterminal:
            leaves.clear()
            return None

    if bind and not node.has_meet and ANY_NAMES.issuperset(lowering.rules):
        # no intersection anywhere, and no nonterminal but the values (their rules: ANY always,
        # ANY_PLAIN where the lowering used it): bound without a walk of the node. (A body that
        # refers to another value is a reason to look whether the node holds that name at all.)
        out = bound(lowering.rules)
        if out is not None:
            return out
    survey = survey_holes(node, ANY_NAMES)
    if survey is None:
        return None
    names, meets_above = survey
    if bind and not meets_above:
        return bound(names)
    fixed: list[Node] = []

    def meet(m: Node) -> Node:
        fixed.append(fix(m))
        return fixed[-1]

    try:
        out = fill_holes(node, leaf, meets=meet)
    except _OtherNonterminal:
        return None
    return None if any(has_meet(x) for x in fixed) else out


class _OtherNonterminal(Exception):
    """A nonterminal other than the schema-free values is left (``_with_value_leaves``)."""


_LEAF_OF: dict[int, tuple[Node, Node | None]] = {}  # id(a value's body) -> (it, its leaf, or None: not one)
_COMMON_VALUES: set[str] = set()  # the Recursive leaves (schema-free values) among the common expressions


def json_schema_to_node(schema: Any, *, registry: dict | None = None, **options) -> Node:
    """The regular approximation of a JSON Schema's instances as one regex AST node.

    Schema-free values nest at most ``any_depth`` (default 10 here) arrays/objects deep; a recursive
    ``$ref`` cycle is a ``SchemaError`` unless ``max_depth`` unrolls it. Use ``json_schema_to_grammar``
    or ``compile_json_schema`` for the exact language. Parameters and errors as there.
    """
    opts = options.pop("options", None)
    if opts is None:
        options.setdefault("any_depth", 10)
        opts = SchemaOptions(**options)
    elif opts.any_depth is None:
        opts = replace(opts, any_depth=10)
    out = json_schema_to_grammar(schema, registry=registry, options=opts)
    if isinstance(out, CfgGrammar):
        raise SchemaError(
            "recursive schema: a $ref cycle needs the context-free path (compile_json_schema or "
            "json_schema_to_grammar), or max_depth=N to unroll it N levels deep"
        )
    return out


def cache_key(schema: Any, options: SchemaOptions, registry: dict | None = None) -> str:
    """The JSON of (schema, options, registry): equal keys compile to equal grammars. Members keep
    their order: the order of ``properties`` is the declared order generation follows (sorted keys
    gave a schema the cached grammar of one declaring the same properties in another order)."""
    return json.dumps([schema_dict(schema), options.key(), registry or {}], ensure_ascii=False)


def compile_json_schema(compiler, schema: Any, *, registry: dict | None = None, **options):
    """Compile a JSON Schema with a ``GrammarCompiler``, cached per (schema, options, registry): a
    regular engine ``CompiledGrammar`` or a context-free ``CompiledCfg`` (same Matcher API), or,
    where ``uniqueItems`` needs the run-time check, either inside a ``UniqueChecked``."""
    with quiet_collector():  # the lowering's garbage is collected once, at the end (guided.grammar.collector)
        try:
            return _compile_json_schema(compiler, schema, registry, options)
        except (SchemaError, GrammarError) as closed:
            if not options.get("strict"):
                raise
            # ``strict`` closes objects as a preference of generation: where closing them leaves no
            # instance (a name only a `not` or an enum speaks of) or no exact check, the schema keeps
            # its literal meaning, still exact; an error here is the schema's own
            compiled = _compile_json_schema(compiler, schema, registry, {**options, "strict": False})
            logger.warning("objects of this JSON Schema are left open: closing them fails (%s)", closed)
            return compiled


def _compile_json_schema(compiler, schema: Any, registry: dict | None, options: dict):
    _intern_common_lexemes()
    opts = SchemaOptions(**options)
    schema = schema_dict(schema)
    key = ("json-schema", cache_key(schema, opts, registry))  # a cached grammar skips the lowering
    schema = for_draft(schema, text=key[1])  # (a function of the schema: the key may be taken before)
    checks = _Checks(schema, registry, opts, key[1])
    compiled = compiler.compile_lowered(
        key,
        lambda: json_schema_to_grammar(
            schema, registry=registry, options=opts, unique_runtime=checks.found[0] or checks.found[1],
            names_runtime=checks.found[2], hosts_runtime=checks.host_formats, _bind=True, _lowered=checks.lowered,
            _resolver=checks.resolver,
        ),
    )
    # one wrapper per grammar, kept on it, so the run-time checks' plans live exactly as long as the
    # compiler caches the grammar (a cache of their own kept 256 schemas' resolvers alive past it: tens
    # of thousands more objects for each full pass of the collector, which landed in single masks)
    max_ws = opts.max_ws if opts.whitespace == "flexible" else 0
    return UniqueChecked.shared(compiled, key, lambda: checks.wrap(compiled, max_ws))


class _Checks:
    """The run-time checks a schema's grammar needs, worked out once, on first use: by the lowering
    (when the grammar is built) or by the wrapper (when it comes from the disk cache); a grammar
    cached in memory with its wrapper needs neither."""

    def __init__(self, schema, registry: dict | None, opts: SchemaOptions, text: str):
        self.schema, self.registry, self.opts = schema, registry, opts
        self.text = text  # the JSON of the schema (its cache key)

    @cached_property
    def lowered(self):
        """The document the lowering reads (``_as_lowered``: a walk of the whole schema, made once)."""
        return _as_lowered(self.schema, self.opts)

    @cached_property
    def resolver(self) -> SchemaResolver | None:
        """One resolver over the lowered document and the registry, shared by the key-order walks
        (``_names``) and the lowering: each indexed the document and made the same places apart
        (~3% of a median schema's compile). None where indexing fails: the lowering then reports
        the error with its own message."""
        schema = self.lowered
        try:
            return SchemaResolver(schema if isinstance(schema, dict) else {}, self.registry)
        except (SchemaError, RecursionError):
            return None

    @cached_property
    def found(self) -> tuple:
        """(uniqueItems plan, why it cannot have one, whether some place takes the "bag" policy, the
        root key-order place where names are checked, the plan whose places host names' labels are
        checked at)."""
        schema = self.lowered
        # (a schema whose text never names uniqueItems has none: no walk looks for it)
        unique = unique_plan(schema, self.registry, self.opts) if '"uniqueItems"' in self.text else (None, None)
        hosts = None
        formats = tuple(f for f in HOST_FORMATS if f'"format": "{f}"' in self.text)
        if formats and unique[1] is None:  # (a refused uniqueItems plan: no plan for either)
            hosts = hosts_plan(schema, self.registry, self.opts, unique[0], self.text, formats)
        return (*unique, *_names(schema, self.registry, self.opts, self.resolver), hosts)

    @property
    def host_formats(self) -> frozenset:
        """The formats whose labels the matcher checks (``hosts_plan``)."""
        return frozenset(self.found[4].hosts) if self.found[4] is not None else frozenset()

    def wrap(self, compiled, max_ws: int):
        """A UniqueChecked around ``compiled``, or None when nothing needs checking at run time."""
        plan, _, _, keys, hosts = self.found
        if plan is None and keys is None and hosts is None:
            return None
        return UniqueChecked(compiled, plan or hosts, keys, self.opts.strict, self.opts.key_order, max_ws=max_ws)


def _names(schema, registry: dict | None, opts: SchemaOptions, resolver: SchemaResolver | None = None) -> tuple[bool, KeyOrder | None]:
    """(whether some place takes the "bag" policy, the root key-order place when an object of the
    grammar's may repeat a name: the matcher then refuses the repeat, so that every output parses
    to one value)."""
    try:
        root = root_place(schema, registry, resolver)  # one resolver, so both walks share the places they make
        if opts.key_order == "any":  # (before any policy is asked: a mandatory place's bag tracks no required name)
            uri = schema.get("$schema") if isinstance(schema, dict) else None
            mark_mandatory(root, isinstance(uri, str) and any(d in uri for d in OLD_DRAFTS))
        return (opts.key_order == "any" and has_bag(root, opts.strict),
                root if repeats_names(root, opts.key_order, opts.strict) else None)  # fmt: skip
    except (SchemaError, RecursionError):
        return False, None  # the lowering reports a malformed schema with its own message


def unique_plan(schema, registry: dict | None, opts: SchemaOptions) -> tuple[UniquePlan | None, PlanError | None]:
    """(the checked places where the matcher refuses duplicate items, None) or (None, why the schema
    cannot have the check); (None, None) without ``uniqueItems``. A refused schema still compiles
    where the grammar holds every ``uniqueItems`` (finite items); elsewhere the lowering raises with
    the reason (or relaxes, when lenient)."""
    if not mentions_unique(schema):
        return None, None
    try:
        plan = _plan(schema, registry, opts)
        plan.check()
    except PlanError as e:
        return None, e
    except (SchemaError, RecursionError):
        return None, None  # the lowering reports a malformed schema with its own message
    return plan, None


def _plan(schema, registry: dict | None, opts: SchemaOptions) -> UniquePlan:
    """The places of the document the lowering reads (static dynamic references made plain)."""
    plan = UniquePlan(schema, registry, strict=opts.strict)
    static = static_dynamic_refs(schema, registry, plan.resolver)
    if static[0] is not schema or static[1] is not registry:
        plan = UniquePlan(static[0], static[1], strict=opts.strict)
    return plan


# keywords whose subschemas' strings no place of the plan reaches (they keep host names without A-labels)
_UNREACHED = ('"if"', '"contains"', '"propertyNames"')


def hosts_plan(schema, registry: dict | None, opts: SchemaOptions, plan: UniquePlan | None, text: str,
               formats: tuple[str, ...]) -> UniquePlan | None:  # fmt: skip
    """The plan (``plan``, the uniqueItems one, when there is one) whose places the matcher checks
    the labels of ``hostname`` and ``idn-hostname`` strings at (of ``formats``, those it can check:
    ``plan.hosts``), or None where it cannot check any or need not: no place where a format
    applies, some place where one applies in some branches only, a keyword whose strings no place
    reaches (``_UNREACHED``), or no plan (``$dynamicRef``, more than ``MAX_PLACES`` places). A
    format left unchecked keeps host names without A-labels (``hostname``, which a grammar alone
    holds exactly) or is refused (``idn-hostname``). ``text``: the JSON of the schema and the
    registry."""
    if any(k in text for k in _UNREACHED):
        return None
    try:
        plan = plan or _plan(schema, registry, opts)
        plan.hosts = tuple(f for f in formats if plan.format_checkable(f))
    except (SchemaError, RecursionError):
        return None
    return plan if plan.hosts else None


_common_done = threading.Event()


def _intern_common_lexemes() -> None:
    """Once per process: intern the lexemes of a schema-free value (strings, numbers, literals,
    punctuation with the default whitespace) as common expressions (``intern_common``). Nearly every
    schema's grammar contains them, so each compile copies them instead of building them again."""
    if _common_done.is_set():
        return
    free = json_schema_to_grammar({})  # a Recursive leaf, for regular grammars with schema-free values
    with hole_memo():  # the same value as a nonterminal, for context-free ones: its terminals
        grammar = _lower(SchemaLowering({}, SchemaOptions(), None), leaves=False)
    nodes = [free, *(t.node for t in grammar.terminals.values())]
    # date-time (in one schema of eight): its leap seconds are two thousand expressions
    date_time = json_string(format_node("date-time"))
    # and the pieces of an object's other names (``strings.none_of``) that most trie nodes of its
    # declared names need: what begins with a character other than one printable ASCII one (or than
    # none), and that character. Every fork knows them as a trie's parts: a compile neither builds
    # them nor looks their nodes up (that was a third of interning a median schema's regex)
    names = [*map(chr, range(0x20, 0x7F))]
    name_parts = [(other_than, ()), *((other_than, (c,)) for c in names), *((word_char, c) for c in names)]
    intern_common([ANY_STRING_BODY, json_string(), *nodes, date_time], char_units=[ENC_ANY_CHAR], trie_parts=name_parts)
    _common_done.set()
