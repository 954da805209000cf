"""JSON objects: properties in declared order, required ones exact, optional ones any subset.

At one place of the instance the property names its schemas declare come first, in ``KeyOrder``'s
order; each is present or absent (required ones present), with commas placed exactly by starting
the object at its first present property. Properties no schema there names come after, in any
order, their names split by which ``patternProperties`` match them (each part gets the intersection
of the matching pattern schemas, or ``additionalProperties`` when none matches). ``propertyNames``
intersects every key; ``minProperties``/``maxProperties`` count members; ``dependentRequired``,
``dependentSchemas`` and draft-07 ``dependencies`` split the object on whether their trigger
property is present.
"""

from __future__ import annotations

import itertools
import json
import math
from functools import lru_cache
from typing import TYPE_CHECKING

from guided.errors import GrammarError, LimitError, SchemaError
from guided.grammar import parse_regex
from guided.grammar.languages import is_empty, matches
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    Node,
    Not,
    Seq,
    alt,
    cat,
    intersect,
    literal,
    optional,
    repeat,
    seq,
)
from guided.schema.key_order import MAX_PERMUTED, bag_fits, closes_by_default, closing_names
from guided.schema.keywords import ANNOTATIONS, INTERPRETED
from guided.schema.object_bags import bag
from guided.schema.recursion import has_hole
from guided.schema.strings import ANY_STRING_BODY, encode, json_literal_string, none_of, quoted

if TYPE_CHECKING:  # the lowering calls these helpers with itself
    from guided.schema.lowering import SchemaLowering


__all__ = ["object_node", "any_order", "MAX_PATTERN_GROUPS", "MAX_DEPENDENCY_CASES", "MAX_DEPENDENCIES_SPLIT"]

MAX_PATTERN_GROUPS = 64  # kinds of undeclared name by the patternProperties they match (_pattern_groups)
# property dependencies split an object into cases (each trigger present or absent): at most this
# many cases that are not empty (a chain a -> b -> c ... leaves few: a name cannot be both required
# and absent), from at most MAX_DEPENDENCIES_SPLIT dependencies
MAX_DEPENDENCY_CASES = 64
MAX_DEPENDENCIES_SPLIT = 12
_OBJECT_KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")
_OPEN, _CLOSE = literal("{"), literal("}")
_STRING_ONLY = frozenset(
    {"type", "pattern", "minLength", "maxLength", "format", "title", "description", "$comment"}
)


def object_node(lowering: SchemaLowering, schema: dict, path: str, base: str, place) -> Node:
    deps = _dependencies(schema, path)
    if not deps:
        return _object(lowering, schema, path, base, place, (), (), (), ())
    involved = list(dict.fromkeys(n for trigger, names, _, _ in deps for n in (trigger, *names)))
    found: dict[int, list | None] = {}  # _name_cases per dependency schema (by id: each is alive here)

    def name_cases(sub) -> list | None:
        if id(sub) not in found:
            found[id(sub)] = _name_cases(sub)
        return found[id(sub)]

    # names a dependency's schema makes absent (``not: {required}``) are named in every case (kept out
    # of the other members, as triggers are, wherever the place does not list them)
    for _, _, sub, _ in deps:
        involved += [n for _, off in name_cases(sub) or () for n in off if n not in involved]
    always, always_extra, deps = _settled(schema, deps)
    cases, deps = _by_discriminator(deps, path)
    involved += [n for req, off, _ in cases for n in (*req, *off) if n not in involved]
    if len(deps) > MAX_DEPENDENCIES_SPLIT:
        raise LimitError(f"more than {MAX_DEPENDENCIES_SPLIT} property dependencies in one object (at {path})")
    variants = []
    for (case_required, case_forbidden, case_extra), present in itertools.product(
        cases, itertools.product((True, False), repeat=len(deps))
    ):
        required, forbidden, extra = [*always, *case_required], list(case_forbidden), [*always_extra, *case_extra]
        for on, (trigger, names, sub, sub_path) in zip(present, deps, strict=True):
            triggers = trigger if isinstance(trigger, tuple) else (trigger,)
            if on:  # the names are present (whether or not a trigger is): exact beside "no trigger"
                required += [*([] if isinstance(trigger, tuple) else triggers), *names]
                if sub is not None:
                    extra.append((sub, sub_path))
            else:
                forbidden += triggers
        names_only = [name_cases(sub) for sub, _ in extra]  # such schemas become cases too
        extra = [e for e, alts in zip(extra, names_only, strict=True) if alts is None]
        for picked in itertools.product(*(alts for alts in names_only if alts is not None)):
            more = [n for names, _ in picked for n in names]
            off = [*forbidden, *(n for _, absent in picked for n in absent)]
            if set(required + more) & set(off):  # a name both required and absent: no object
                continue
            variants.append((frozenset(required + more), frozenset(off), tuple(extra)))
            if len(variants) > 8 * MAX_DEPENDENCY_CASES:
                raise LimitError(f"property dependencies in one object make more than {8 * MAX_DEPENDENCY_CASES} "
                                 f"cases (at {path})")  # fmt: skip
    variants = _widest(variants)
    if len(variants) > MAX_DEPENDENCY_CASES:
        raise LimitError(f"property dependencies in one object make more than {MAX_DEPENDENCY_CASES} cases "
                         f"(at {path})")  # fmt: skip
    return alt(*(_object(lowering, schema, path, base, place, sorted(r), sorted(f), list(e), involved)
                 for r, f, e in variants))  # fmt: skip


def _widest(variants: list) -> list:
    """The cases (required, absent, schemas) that no other case contains: a case requiring more
    names, forbidding more and applying more schemas than another accepts a subset of its objects,
    and the union of the cases is unchanged without it. In first-seen order."""
    keys = [(r, f, frozenset(id(x[0]) for x in e)) for r, f, e in variants]
    out = []
    for i, (r, f, e) in enumerate(keys):
        # dropped where another holds it: a wider one, or an equal one seen first
        if not any(j != i and r2 <= r and f2 <= f and e2 <= e and (j < i or (r2, f2, e2) != (r, f, e))
                   for j, (r2, f2, e2) in enumerate(keys)):  # fmt: skip
            out.append(variants[i])
    return out


def _name_cases(schema) -> list[tuple[tuple[str, ...], tuple[str, ...]]] | None:
    """For a dependency's schema that only says which names are present, the (required, absent) name
    lists one of which must hold: ``{"required": [...]}``, ``{"not": {"required": [...]}}`` (one of
    those names absent), and ``anyOf`` (any one case of a branch) or ``allOf`` (a case of every part)
    of such; keywords side by side hold together. The object's cases split on them instead of
    intersecting the object with the schema (an intersection of object languages, searched by
    derivatives at mask time): the union of the cases is exact. Else None (also past
    ``MAX_DEPENDENCY_CASES`` cases)."""
    if not isinstance(schema, dict):
        return None
    parts: list[list] = []
    for kw, value in schema.items():  # (in the schema's order: the cases' order is the grammar's)
        if kw in ANNOTATIONS or kw not in INTERPRETED:  # the lowering ignores unknown keywords too
            continue
        if kw in ("required", "not"):
            names = value.get("required") if kw == "not" and isinstance(value, dict) else value
            if (kw == "not" and (not isinstance(value, dict) or set(value) - ANNOTATIONS != {"required"})
                    or not isinstance(names, list) or not all(isinstance(n, str) for n in names)):  # fmt: skip
                return None
            parts.append([(tuple(names), ())] if kw == "required" else [((), (n,)) for n in dict.fromkeys(names)])
        elif kw in ("anyOf", "allOf") and isinstance(value, list) and value:
            subs = [_name_cases(sub) for sub in value]
            if any(sub is None for sub in subs):
                return None
            parts += [[c for sub in subs for c in sub]] if kw == "anyOf" else subs
        else:
            return None
    if math.prod(len(p) for p in parts) > MAX_DEPENDENCY_CASES:
        return None
    out = []
    for picked in itertools.product(*parts):
        required = tuple(dict.fromkeys(n for names, _ in picked for n in names))
        absent = tuple(dict.fromkeys(n for _, names in picked for n in names))
        if not set(required) & set(absent):  # else no object: the case is left out
            out.append((required, absent))
    return out


def _by_discriminator(deps: list, path: str) -> tuple[list, list]:
    """Dependencies whose schemas only name the values one property D may take
    (``{"properties": {D: {"enum": [...]}}}``; MongoDB's index mappings: each option names the
    ``type`` values it belongs to), as cases on D instead of 2^n combinations of triggers: D absent
    (every trigger free), D equal to each named value (the triggers that do not name it absent), D
    another value (those triggers absent). The cases split every instance one way: exact.
    Returns ([(required, forbidden, extra schemas)] cases, the dependencies left)."""
    found: dict[str, list] = {}
    for dep in deps:
        trigger, names, sub, _ = dep
        if names or not isinstance(trigger, str) or not isinstance(sub, dict) or set(sub) - ANNOTATIONS != {"properties"}:
            continue
        props = sub["properties"]
        if not isinstance(props, dict) or len(props) != 1:
            continue
        (name, value_schema), = props.items()
        values = _named_values(value_schema)
        if values is not None and name != trigger:
            found.setdefault(name, []).append((dep, values))
    if not found:
        return [((), (), ())], deps
    name, group = max(found.items(), key=lambda kv: len(kv[1]))
    if len(group) < 2:
        return [((), (), ())], deps
    every = [v for _, values in group for v in values]
    every = [v for i, v in enumerate(every) if v not in every[:i]]
    triggers = [dep[0] for dep, _ in group]
    cases = [((), (name,), ())]  # D absent: every dependency here holds
    for v in every:
        off = tuple(dep[0] for dep, values in group if v not in values)
        cases.append(((name,), off, (({"properties": {name: {"const": v}}}, f"{path}/properties/{name}"),)))
    cases.append(((name,), tuple(triggers), (({"properties": {name: {"not": {"enum": every}}}}, path),)))
    left = [dep for dep in deps if all(dep is not d for d, _ in group)]
    return cases, left


def _named_values(schema) -> list | None:
    """The values a schema of ``enum``/``const`` alone (a ``type`` beside them allowed) names, or None."""
    if not isinstance(schema, dict) or set(schema) - ANNOTATIONS - {"enum", "const", "type"}:
        return None
    if "const" in schema:
        values = [schema["const"]]
    elif isinstance(schema.get("enum"), list):
        values = list(schema["enum"])
    else:
        return None
    if "type" in schema:
        return None if not all(isinstance(v, str) for v in values) or schema["type"] != "string" else values
    return values


def _settled(schema: dict, deps: list) -> tuple[list, list, list]:
    """(names always required, schemas always applied, the dependencies left to split on): a
    dependency whose trigger is required (``required``, or by a dependency already settled) always
    applies, and one whose names are all required and that imposes no schema never matters; name
    dependencies requiring the same names merge (a tuple of triggers). Real schemas often list a
    dependency per required property, or several triggers of one name: what is left is short."""
    required = {r for r in schema.get("required", []) if isinstance(r, str)}
    names, extra = [], []
    left = list(deps)
    changed = True
    while changed:
        changed = False
        for dep in list(left):
            trigger, needs, sub, sub_path = dep
            if trigger in required:
                names += needs
                required.update(needs)
                if sub is not None:
                    extra.append((sub, sub_path))
                left.remove(dep)
                changed = True
    left = [d for d in left if d[2] is not None or not set(d[1]) <= required]
    # name-only dependencies requiring the same names split once: "one of these triggers" or "none"
    groups: dict[tuple, list] = {}
    for d in left:
        if d[2] is None:
            groups.setdefault(tuple(sorted(set(d[1]))), []).append(d)
    merged = [d for d in left if d[2] is not None]
    for needs, group in groups.items():
        merged.append(group[0] if len(group) == 1 else (tuple(d[0] for d in group), list(needs), None, group[0][3]))
    return names, extra, merged


def _dependencies(schema: dict, path: str) -> list:
    """[(trigger property, names it requires, schema it imposes or None, path)]."""
    out = []
    for kw in _OBJECT_KEYWORDS:
        value = schema.get(kw)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise SchemaError(f"{kw} must be an object", f"{path}/{kw}")
        for trigger, dep in value.items():
            p = f"{path}/{kw}/{trigger}"
            if isinstance(dep, list):
                out.append((trigger, [n for n in dep if isinstance(n, str)], None, p))
            elif kw != "dependentRequired":
                out.append((trigger, [], dep, p))
            else:
                raise SchemaError("dependentRequired values must be arrays of names", p)
    return out


def _object(
    lowering, schema: dict, path: str, base: str, place, required_extra, forbidden, extra, involved
) -> Node:
    props = schema.get("properties") or {}
    pats = schema.get("patternProperties") or {}
    if not isinstance(props, dict) or not isinstance(pats, dict):
        raise SchemaError("properties/patternProperties must be objects", path)
    addl = schema.get("additionalProperties")
    if addl is None:
        addl = schema.get("unevaluatedProperties") if _no_in_place(schema) else None
        if addl is None and "unevaluatedProperties" in schema:
            lowering.relax(
                "unevaluatedProperties next to in-place applicators is not supported",
                f"{path}/unevaluatedProperties",
            )
    named = ()  # where strict closes the object: the names it speaks of still take any value
    if addl is None and lowering.closes_objects and closes_by_default(schema):
        # a complement's piece ("an object without b") speaks of few names: those of its place
        addl = False
        named = place.name_set if id(schema) in lowering.pieces else closing_names(lowering.resolver, schema, base)
    elif addl is None:
        addl = True
    required = list(
        dict.fromkeys([r for r in schema.get("required", []) if isinstance(r, str)] + list(required_extra))
    )
    names = list(dict.fromkeys(place.names + required + list(props) + list(involved)))
    pattern_nodes = {p: _pattern(lowering, p, f"{path}/patternProperties") for p in pats}
    names_schema = schema.get("propertyNames")
    key_filter = None  # a value language every key (as a JSON string) must be in
    name_lang = None  # or, for plain string schemas, a language of decoded names
    if names_schema is not None and names_schema is not True:
        if (
            isinstance(names_schema, dict)
            and set(names_schema) <= _STRING_ONLY
            and names_schema.get("type", "string") == "string"
        ):
            name_lang = lowering.string_decoded(names_schema, f"{path}/propertyNames")
        else:
            # a name is a string: meeting the string language resolves what the schema's other types
            # bring (e.g. `not: {enum}` refuses values of every type, a nonterminal the name test cannot use)
            where = f"{path}/propertyNames"
            key_filter = lowering.both(lowering.lower(names_schema, where, base, None), lowering.string({}, where),
                                       path=where, keyword="propertyNames", values=False)  # fmt: skip

    slots = []  # (member node or EMPTY, required)
    slot_names = []
    for name in names:
        key = json_literal_string(name)
        if (
            name in forbidden
            or (key_filter is not None and not matches(key_filter, json.dumps(name, ensure_ascii=False)))
            or (name_lang is not None and not matches(name_lang, name))
        ):
            value = EMPTY
        else:
            value = _value(lowering, name, props, pats, pattern_nodes, addl or name in named, path, base, place)
        if value != EMPTY:
            # (``cat``: the member stays one item of the sequences that spell it again, in any order)
            slots.append((cat(key, lowering.colon, value), name in required))
            slot_names.append(name)
        elif name in required:
            return EMPTY
    other = _other_members(lowering, names, pats, pattern_nodes, addl, key_filter, name_lang, path, base, place)
    lo = lowering.count(schema, "minProperties", 0, path)
    hi = lowering.count(schema, "maxProperties", None, path)
    lo, hi, extra = _counts_folded(lowering, lo, hi, extra)
    policy = place.policy(lowering.options.key_order, lowering.options.strict, lowering.names_runtime)
    if lowering.names_runtime and lowering.untrack and lowering.mode != lowering.NEG and not extra and lo == 0 and hi is None:
        # the matcher refuses the closing brace until these are written (``KeyOrder.matcher_required``):
        # a bag takes them as optional members, at least one member in all (no ``{}``)
        untracked = place.matcher_required(lowering.options.strict).intersection(
            n for n, (_, req) in zip(slot_names, slots, strict=True) if req)  # fmt: skip
        rest = [(m, req and n not in untracked) for n, (m, req) in zip(slot_names, slots, strict=True)] if untracked else ()
        if rest and bag_fits(sum(req for _, req in rest), 1):  # (else an order: a name passed could not come back)
            slots, policy, lo = rest, "bag", 1
            lowering.untracked += 1
    if policy == "bag" and not bag_fits(sum(req for _, req in slots), hi if hi is not None else lo):
        policy = place.ordered_policy  # this object's own names, where the place has several branches
    if policy == "bag" or (lowering.mode == lowering.NEG and (slots or lo or hi is not None)):
        # every order: to be complemented, or ("bag") with the matcher refusing a name written twice
        return _wrap(lowering, bag(lowering, slots, other, lo, hi), extra, base, place)
    if policy == "permuted":
        return _wrap(lowering, _permuted(lowering, slots, other, lo, hi), extra, base, place)
    around = policy == "around"
    body = _members(lowering, slots, other, lo, hi, around)
    rank = {n: i for i, n in enumerate(place.required_first)}
    order = sorted(range(len(slots)), key=lambda i: rank.get(slot_names[i], len(rank)))
    if around:  # required first, then the optional ones in any order (when few enough)
        first = set(place.required_names)
        fixed = [slots[i] for i in order if slot_names[i] in first]
        free = [slots[i] for i in order if slot_names[i] not in first]
        if sum(n not in first for n in place.names) <= MAX_PERMUTED:  # the place decides, not the slots
            return _wrap(lowering, alt(body, _members(lowering, fixed, other, 0, None, True, free)), extra, base, place)
    if order != sorted(order):  # the required-first order differs: accept it too
        body = alt(body, _members(lowering, [slots[i] for i in order], other, lo, hi, around))
    return _wrap(lowering, body, extra, base, place)


def _counts_folded(lowering: SchemaLowering, lo: int, hi: int | None, extra) -> tuple[int, int | None, list]:
    """(lo, hi, the other schemas): a dependency's schema that only bounds the member count
    (``{"maxProperties": 1}``) narrows the object's own bounds instead of being intersected with it."""
    kept = []
    for sub, sub_path in extra:
        if isinstance(sub, dict) and set(sub) - ANNOTATIONS <= {"minProperties", "maxProperties", "type"} and (
            sub.get("type", "object") in ("object", ["object"])
        ):
            lo = max(lo, lowering.count(sub, "minProperties", 0, sub_path))
            more = lowering.count(sub, "maxProperties", None, sub_path)
            hi = more if hi is None else hi if more is None else min(hi, more)
        else:
            kept.append((sub, sub_path))
    return lo, hi, kept


def _wrap(lowering: SchemaLowering, body: Node, extra, base: str, place) -> Node:
    node = seq(_OPEN, lowering.ws, body, lowering.ws, _CLOSE)
    lowering.intersected += len(extra) * lowering.at_mandatory
    for sub, sub_path in extra:
        node = intersect(node, lowering.lower(sub, sub_path, base, place))
    return node


def _no_in_place(schema: dict) -> bool:
    return not any(k in schema for k in ("allOf", "anyOf", "oneOf", "if", "$ref", "dependentSchemas", "not"))


def _value(lowering: SchemaLowering, name, props, pats, pattern_nodes, addl, path, base, place) -> Node:
    subs = []
    child = place.child(name)
    if name in props:
        subs.append(lowering.lower(props[name], f"{path}/properties/{_esc(name)}", base, child))
    for p, node in pattern_nodes.items():
        if node is not None and matches(node, name):
            subs.append(lowering.lower(pats[p], f"{path}/patternProperties/{_esc(p)}", base, child))
    if not subs:
        subs.append(lowering.lower(addl, f"{path}/additionalProperties", base, child))
    if len(subs) > 1 and any(has_hole(n) for n in subs):
        # a property its patterns also match, with recursion below: as one allOf schema, which
        # merges on the schemas (arrays of the same $ref items stay one context-free language)
        # before anything is intersected
        schemas = [props[name]] if name in props else []
        schemas += [pats[p] for p, node in pattern_nodes.items() if node is not None and matches(node, name)]
        key = (tuple(map(id, schemas)), base, "property-and-patterns")
        if key not in lowering.rewrites:
            lowering.rewrites[key] = {"allOf": schemas}
            lowering.keep((schemas, lowering.rewrites[key]))
        return lowering.lower(lowering.rewrites[key], f"{path}/properties/{_esc(name)}", base, child)
    return lowering.conjoin(subs)


def _other_members(lowering: SchemaLowering, names, pats, pattern_nodes, addl, key_filter, name_lang, path, base, place) -> Node:
    """One member whose name is none of ``names``, with the value its name calls for."""
    usable = {p: n for p, n in pattern_nodes.items() if n is not None}
    other_place = place.other()
    out = []
    for mask in _pattern_groups(list(usable.values()), path):
        chosen = [p for p, on in zip(usable, mask, strict=True) if on]
        if chosen:
            value = lowering.conjoin(
                [lowering.lower(pats[p], f"{path}/patternProperties/{_esc(p)}", base, other_place) for p in chosen]
            )
        else:
            value = lowering.lower(addl, f"{path}/additionalProperties", base, other_place)
        if value == EMPTY:
            continue
        # the key's conditions, each over encoded strings (encode commutes with And and Not)
        conds = [encode(usable[p] if on else Not(usable[p])) for p, on in zip(usable, mask, strict=True)]
        # names declared here are not "other"; a positive pattern only needs the names it matches
        taken = [n for n in names if all(matches(usable[p], n) for p in chosen)]
        if taken:
            conds.append(none_of(taken))
        if name_lang is not None:
            conds.append(encode(name_lang))
        key = quoted(intersect(*conds) if conds else ANY_STRING_BODY)
        if key_filter is not None:
            key = intersect(key, key_filter)
        out.append(seq(key, lowering.colon, value))
    return alt(*out)


def _pattern_groups(patterns: list[Node], path: str) -> list[tuple[bool, ...]]:
    """Which patterns an undeclared name matches: the in/out choices that some name can make.

    A name matching several patterns gets all their schemas, so each choice is its own member
    kind; of the ``2**k`` choices, only those whose chosen patterns share a name (and, for a
    non-empty choice, one the others all miss) are kept: real schemas' patterns are mostly
    disjoint (``^x-``, ``^MD5$``, ``^(cdn|Cdn)$``), which leaves about ``k + 1``. A choice whose
    emptiness is too costly to decide is kept (an empty one only costs grammar size).
    """
    out: list[tuple[bool, ...]] = []

    def shared(nodes: list[Node]) -> bool:
        try:
            return len(nodes) < 2 or not is_empty(intersect(*nodes), budget=20_000)
        except LimitError:
            return True

    def walk(i: int, mask: tuple[bool, ...], chosen: list[Node]) -> None:
        if i == len(patterns):
            if chosen:
                missed = [Not(patterns[j]) for j, on in enumerate(mask) if not on]
                if missed and not shared([*chosen, *missed]):
                    return
            out.append(mask)
            if len(out) > MAX_PATTERN_GROUPS:
                raise LimitError(
                    f"patternProperties in one object overlap in more than {MAX_PATTERN_GROUPS} ways (at {path})"
                )
            return
        if shared([*chosen, patterns[i]]):
            walk(i + 1, (*mask, True), [*chosen, patterns[i]])
        walk(i + 1, (*mask, False), chosen)

    walk(0, (), [])
    walk = None  # (a recursive closure is a reference cycle: left to the collector otherwise)
    return out


def _members(lowering: SchemaLowering, slots, other: Node, lo: int, hi: int | None, around: bool = False, free=()) -> Node:
    """The comma-separated members: slots in order (optional unless required), then the ``free``
    slots in any order; others after them, or (``around``) before or after them."""
    if lo or hi is not None:
        return _counted(lowering, slots, other, lo, hi)
    sep = lowering.sep
    tail_rest = repeat(seq(sep, other)) if other != EMPTY else EPSILON
    around = around and other != EMPTY
    # after(i): members from slot i on, when one member has already been written
    start, tail = _any_order_parts(lowering, free, tail_rest) if free else (None, tail_rest)
    after = _Suffixes([seq(sep, m) if req else optional(seq(sep, m)) for m, req in slots], tail)
    # first[i]: members from slot i on, when none has been written yet (others first: below). Only
    # the first slot and those after a run of optional ones begin a member list: the others' nodes
    # are not built (a long list of required members made every suffix, quadratic in its length)
    if start is not None:
        first = start
    else:
        first = alt(EPSILON, seq(other, tail_rest)) if other != EMPTY and not around else EPSILON
    begins = next((i for i, (_, req) in enumerate(slots) if req), len(slots) - 1)
    for i in range(begins, -1, -1):
        member, req = slots[i]
        taken = seq(member, after(i + 1))
        first = taken if req else alt(taken, first)
    return alt(first, seq(other, tail_rest, after(0))) if around else first


class _Suffixes:
    """``after(i)``: ``seq(items[i], seq(items[i + 1], ... seq(items[-1], tail)))``, the same node that
    chain of ``seq`` calls makes (``seq`` flattens a sequence argument one level, so each suffix is
    a flat copy of the next one's items), built on demand from one shared list of the flattened
    items in reverse: a suffix costs its own length, and suffixes never asked for cost nothing."""

    def __init__(self, items: list[Node], tail: Node):
        n = len(items)
        self.items, self.tail = items, tail
        rev = list(reversed(_flat(tail)))
        self.ends = [0] * (n + 1)  # ends[i]: how much of rev spells after(i)
        self.ends[n] = len(rev)
        self.empty_upto = n if tail == EMPTY else -1  # after(i) is EMPTY for every i up to it
        self.chain = False  # a lone sequence would be flattened once more: build the chain itself
        for i in range(n - 1, -1, -1):
            x = items[i]
            if self.empty_upto < 0 and x == EMPTY:
                self.empty_upto = i
            fx = _flat(x)
            if len(fx) + len(rev) == 1 and (fx[0] if fx else rev[0]).__class__ is Seq:
                self.chain = True
            rev.extend(reversed(fx))
            self.ends[i] = len(rev)
        self.rev = rev

    def __call__(self, i: int) -> Node:
        if i == len(self.items):
            return self.tail
        if i <= self.empty_upto:
            return EMPTY
        if self.chain:
            node = self.tail
            for x in reversed(self.items[i:]):
                node = seq(x, node)
            return node
        end = self.ends[i]
        flat = self.rev[end - 1 :: -1] if end else []
        return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def _flat(node: Node) -> tuple[Node, ...] | list[Node]:
    """What ``seq`` puts in place of an argument."""
    return node.items if node.__class__ is Seq else [node]


def any_order(lowering: SchemaLowering, members: list[Node]) -> Node:
    """All the members, comma-separated, in any order (up to ``MAX_PERMUTED`` members; past that in
    the given order only)."""
    if len(members) > MAX_PERMUTED:
        return seq(*[x for i, m in enumerate(members) for x in ((lowering.sep, m) if i else (m,))])
    return _permuted(lowering, [(m, True) for m in members], EMPTY)


def _permuted(lowering: SchemaLowering, slots, other: Node, lo: int = 0, hi: int | None = None) -> Node:
    """The members in any order: each slot at most once, required ones present, others anywhere;
    with ``lo``/``hi``, between that many members in all."""
    if lo or hi is not None:
        return _permuted_counted(lowering, slots, other, lo, hi)
    others = repeat(seq(lowering.sep, other)) if other != EMPTY else EPSILON
    start, after = _any_order_parts(lowering, slots, others)
    return alt(start, seq(other, after)) if other != EMPTY else start


def _permuted_counted(lowering: SchemaLowering, slots, other: Node, lo: int, hi: int | None) -> Node:
    """``_permuted`` with ``lo`` to ``hi`` members: one node per (slots used, members so far), the
    count capped at ``lo`` when there is no upper bound (past it, others repeat freely)."""
    n = len(slots)
    if hi is not None and hi < lo:
        return EMPTY
    cap = lo if hi is None else hi
    if (1 << n) * (cap + 1) > 20_000:
        raise LimitError(f"minProperties/maxProperties over {n} properties in any order is too large to count exactly")
    need = sum(1 << i for i, (_, req) in enumerate(slots) if req)
    sep = lowering.sep
    loop = repeat(seq(sep, other)) if other != EMPTY else EPSILON
    memo: dict[tuple[int, int], Node] = {}

    def after(seen: int, c: int) -> Node:
        """What may follow once c members (the slots in ``seen`` among them) were written."""
        if hi is None:
            c = min(c, lo)
        node = memo.get((seen, c))
        if node is not None:
            return node
        done = EPSILON if need & seen == need and c >= lo else EMPTY
        unused = [i for i in range(n) if not seen >> i & 1]
        if hi is None and c >= lo:  # the count no longer matters
            more = [cat(slots[i][0], after(seen | 1 << i, c)) for i in unused]
            node = seq(loop, alt(done, seq(sep, alt(*more)) if more else EMPTY))
        elif hi is not None and c >= hi:
            node = done
        else:
            more = [cat(slots[i][0], after(seen | 1 << i, c + 1)) for i in unused]
            if other != EMPTY:
                more.append(cat(other, after(seen, c + 1)))
            node = alt(done, seq(sep, alt(*more)) if more else EMPTY)
        memo[(seen, c)] = node
        return node

    first = [cat(member, after(1 << i, 1)) for i, (member, _) in enumerate(slots)]
    if other != EMPTY:
        first.append(cat(other, after(0, 1)))
    empty = EPSILON if not need and lo == 0 else EMPTY
    return alt(empty, *first) if hi is None or hi > 0 else empty


def _any_order_parts(lowering: SchemaLowering, slots, others: Node) -> tuple[Node, Node]:
    """(members in any order when none was written yet, what follows once one was written).

    ``after(seen)`` is what may follow once a member was written and the slots in ``seen`` (a
    bitmask) were used: ``others``, then the end (when every required slot is in ``seen``) or a
    comma and an unused slot. One node per subset: ``n * 2**(n-1)`` member edges in all. A member
    written first that is not a slot (an other) is the caller's: it continues with ``after(0)``.
    """
    n = len(slots)
    need = sum(1 << i for i, (_, req) in enumerate(slots) if req)
    sep = lowering.sep
    memo: dict[int, Node] = {}

    def after(seen: int) -> Node:
        node = memo.get(seen)
        if node is None:
            nxt = [cat(slots[i][0], after(seen | 1 << i)) for i in range(n) if not seen >> i & 1]
            more = seq(sep, alt(*nxt)) if nxt else EMPTY
            node = memo[seen] = seq(others, alt(EPSILON if need & seen == need else EMPTY, more))
        return node

    first = [cat(member, after(1 << i)) for i, (member, _) in enumerate(slots)]
    rest = after(0)
    after = None  # (a recursive closure is a reference cycle, its memo with it: left to the collector otherwise)
    return alt(EPSILON if not need else EMPTY, *first), rest


def _counted(lowering: SchemaLowering, slots, other: Node, lo: int, hi: int | None) -> Node:
    """Members with their count in [lo, hi]: a walk over (slot, members so far)."""
    n = len(slots)
    cap = max(lo, 1) if hi is None else hi
    if hi is not None and hi < lo:
        return EMPTY
    if n * (cap + 1) > 20_000:
        raise LimitError(f"minProperties/maxProperties over {n} properties is too large to count exactly")
    memo: dict[tuple[int, int], Node] = {}

    def go(i: int, c: int) -> Node:
        if (i, c) in memo:
            return memo[(i, c)]
        if i == n:
            need = max(lo - c, 0)
            room = None if hi is None else hi - c
            if other == EMPTY:
                r = EPSILON if need == 0 else EMPTY
            elif c == 0:
                rest = repeat(
                    seq(lowering.sep, other), max(need - 1, 0), None if room is None else max(room - 1, 0)
                )
                r = alt(EPSILON if need == 0 else EMPTY, seq(other, rest) if room != 0 else EMPTY)
            else:
                r = repeat(seq(lowering.sep, other), need, room) if room is None or room >= need else EMPTY
        else:
            member, req = slots[i]
            nxt = min(c + 1, cap) if hi is None else c + 1
            take = seq(lowering.sep if c else EPSILON, member, go(i + 1, nxt)) if hi is None or c < hi else EMPTY
            r = take if req else alt(take, go(i + 1, c))
        memo[(i, c)] = r
        return r

    return go(0, 0)


@lru_cache(maxsize=4096)
def pattern_language(pattern: str) -> Node:
    """The names a ``patternProperties`` pattern matches (search semantics, as the lowering reads it);
    GrammarError when it cannot be read."""
    return parse_regex(pattern, search=True)


def _pattern(lowering: SchemaLowering, pattern: str, path: str):
    try:
        return pattern_language(pattern)
    except GrammarError as e:
        lowering.relax(f"patternProperties pattern cannot be enforced exactly: {e}", f"{path}/{_esc(pattern)}")
        return None


def _esc(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")
