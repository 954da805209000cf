"""KeyOrder: the orders in which properties are accepted at one place in the instance.

At one place in an instance several schemas may apply at once (``allOf``, ``anyOf``, ``$ref``,
``if``/``then``, ...); their ``properties`` are merged in document order, then names that are only
``required`` (``names``). Which orders are accepted depends on the place alone, never on the one
schema being lowered there, so intersections and complements (``allOf``, ``oneOf``, ``not``)
compare like with like. Two policies (``SchemaOptions.key_order``):

* "declared" (default): the declared order, and one alternative, ``required_first``; properties
  no schema there names come after the named ones, in any order among themselves.
* "any": when at most ``MAX_PERMUTED`` names are declared at the place (``minProperties``/
  ``maxProperties`` counted along), any order of them, each at most once, required
  ones present (a permutation automaton: its state is the set of names seen, so it costs
  ``n * 2**(n-1)`` member edges: 192 for 6 names), with other properties anywhere between them.
  Past that bound, and at any count where undeclared names come in (the matcher tracks the names
  written there anyway: ``admits_undeclared``), when the matcher checks member names
  (``compile_json_schema``) and at most ``MAX_TRACKED_REQUIRED`` names must be present ("bag"): any
  order in linear size, the grammar taking members with repeats (``object_bags.bag``) and the
  matcher refusing a name written twice (``unique_runtime``). At a place every value must meet
  every schema of (``mark_mandatory``) with members not counted, the required names are the
  matcher's too (``KeyOrder.matcher_required``: it refuses the closing brace until each is
  written), so the bag tracks none of them (no ``2**r`` states) and takes any number of them, in
  any order. Below a schema-free or recursive
  value the permutation's subsets are rules of the context-free grammar: the bag made Kubernetes
  schemas compile in about 60% of the time, with unchanged masks at the median. Otherwise
  ("around"): the declared order, or the required names first (in ``required`` order) and then
  the others in any order when at most ``MAX_PERMUTED`` remain (else in declared order); other
  properties before or after the declared ones. Where members are counted: the "declared" policy.
  The bound trades orders for compile time (each name more doubles the automaton, and a schema-free
  or recursive value below puts it into the context-free grammar as one rule per set of names
  seen). Every order in linear size (one small permutation automaton per
  group of names, intersected) needs an intersection: none in a context-free grammar, and for
  regular objects its emptiness checks cost more than the automaton saves.

``order_instance`` rewrites an instance's objects into the declared order: how harnesses serialize
instances that their author wrote in another order. An ordering mismatch can only make the compiled
grammar reject a valid instance, never accept an invalid one.
"""

from __future__ import annotations

import re

from guided.schema.facts import disjoint
from guided.schema.keywords import ANNOTATIONS, takes_all
from guided.schema.object_bags import MAX_BAG_STATES, MAX_TRACKED_REQUIRED
from guided.schema.resolver import SchemaResolver

__all__ = ["KeyOrder", "order_instance", "root_place", "has_bag", "repeats_names", "closing_names", "closes_by_default", "mark_mandatory",
           "MAX_PERMUTED"]

MAX_PERMUTED = 6
MAX_BAG_WALK = 4_000  # places a walk (has_bag, repeats_names) visits before it answers yes
_COUNTING = ("minProperties", "maxProperties")

_IN_PLACE = ("allOf", "anyOf", "oneOf")
_ORDER_KEYS = frozenset(
    {"properties", "required", "patternProperties", "additionalProperties", "items", "prefixItems",
     "additionalItems", "contains", "minProperties", "maxProperties", "propertyNames", "dependentRequired",
     "dependentSchemas", "dependencies"}
)  # fmt: skip  (what the policy reads: places with equal keys get equal policies)
_IN_PLACE_ONE = ("not", "if", "then", "else")
_BRANCHING = ("anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies", "dependentRequired")


class KeyOrder:
    """The schemas (with their base URIs) that apply at one place of an instance."""

    # every value the instance has here must meet every schema here (``mark_mandatory``); a class
    # default, so that places made before the walk, or unpickled from an older cache, read False
    mandatory = False
    mandatory_places: tuple = ()  # on the root: the places ``mark_mandatory`` marked below it

    def __init__(self, resolver: SchemaResolver, schemas):
        self.resolver = resolver
        self.schemas: list[tuple[dict, str]] = []
        # ids of the schemas here that ``strict`` leaves open (``closes_here``): branches of a
        # ``oneOf`` that needs exclusivity, where the lowering keeps the literal meaning, and the
        # schemas below them
        self.literal: set[int] = set()
        seen: set[int] = set()
        for schema, base, literal in map(_entry, schemas):
            self._close(schema, base, seen, 0, literal)
        self._names: list[str] | None = None
        self._name_set: frozenset[str] | None = None
        self._bag: bool | None = None
        self._open: bool | None = None
        self._patterned: tuple[bool, bool] | None = None  # (propertyNames here, patternProperties here)
        self._children: dict[str, KeyOrder] = {}
        self._required: frozenset[str] | None = None  # matcher_required, once asked
        # what the order here and below depends on: the schemas with ordering keywords
        self.key = tuple(id(s) for s, _ in self.schemas if not _ORDER_KEYS.isdisjoint(s))

    def _close(self, schema, base: str, seen: set[int], depth: int, literal: bool) -> None:
        if not isinstance(schema, dict) or depth > 64:
            return
        base = self.resolver.base_of.get(id(schema), base)
        if id(schema) in seen:  # met again: only a first meeting as literal walks it once more
            if not literal or id(schema) in self.literal:
                return
        else:
            seen.add(id(schema))
            self.schemas.append((schema, base))
        if literal:
            self.literal.add(id(schema))
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                try:
                    target, tbase, _ = self.resolver.resolve(value, base, "#")
                except Exception:  # reported where the schema is lowered
                    continue
                self._close(target, tbase, seen, depth + 1, literal)
            elif key in _IN_PLACE and isinstance(value, list):
                exclusive = literal or key == "oneOf" and exclusive_branches(schema, self.resolver, base)
                for sub in value:
                    self._close(sub, base, seen, depth + 1, exclusive)
            elif key in _IN_PLACE_ONE:
                self._close(value, base, seen, depth + 1, literal)
            elif key in ("dependentSchemas", "dependencies") and isinstance(value, dict):
                for sub in value.values():
                    self._close(sub, base, seen, depth + 1, literal)

    def closes_here(self, schema: dict, strict: bool) -> bool:
        """Whether ``strict`` closes this schema's objects at this place (``closes_by_default``,
        not left literal)."""
        return strict and closes_by_default(schema) and id(schema) not in self.literal

    @property
    def names(self) -> list[str]:
        if self._names is None:
            names = dict.fromkeys(_merged_order([s.get("properties") for s, _ in self.schemas]))
            for schema, _ in self.schemas:
                req = schema.get("required")
                if isinstance(req, list):
                    names.update(dict.fromkeys(r for r in req if isinstance(r, str)))
            for schema, _ in self.schemas:
                names.update(dict.fromkeys(_dependency_names(schema)))
            self._names = list(names)
        return self._names

    @property
    def name_set(self) -> frozenset[str]:
        if self._name_set is None:
            self._name_set = frozenset(self.names)
        return self._name_set

    def policy(self, key_order: str, strict: bool, bags: bool = True) -> str:
        """How members are ordered here: "permuted" (any order), "bag" (any order, a name's
        repeats refused by the matcher; only with ``bags``, when the matcher checks names),
        "around" (declared order, other properties before or after them) or "declared" (declared
        order, others last); see the module docstring. Every caller passes the same ``strict`` as
        the lowering: the grammar and the matcher's name checks must agree on the policy."""
        if key_order != "any":
            return "declared"
        if len(self.names) <= MAX_PERMUTED:
            # where undeclared names come in, the matcher tracks the names written anyway: a bag
            # is n members in the grammar where the permutation is n * 2**(n-1), each a rule of
            # the context-free grammar when a value below recurses or is schema-free
            open_bag = bags and self.admits_undeclared(strict) and self.bag_exact
            return "bag" if open_bag else "permuted"
        if bags and self.bag_exact:
            return "bag"
        return self.ordered_policy

    @property
    def ordered_policy(self) -> str:
        """The policy past the permutation bound where no bag is: "declared" where members are
        counted, else "around"."""
        return "declared" if any(k in schema for schema, _ in self.schemas for k in _COUNTING) else "around"

    def names_open(self, strict: bool) -> bool:
        """Whether every undeclared name is accepted here whatever was written before: no
        ``propertyNames``, ``patternProperties`` only with schemas any value fits, and no schema here
        closes its objects (``additionalProperties``/``unevaluatedProperties`` unset, true or ``{}``,
        and not ``strict``). Then a fresh name always fits."""
        if self._open is None:
            self._open = not any("propertyNames" in s for s, _ in self.schemas) and all(
                s.get(kw, True) in (True, {}) for s, _ in self.schemas
                for kw in ("additionalProperties", "unevaluatedProperties")
            ) and all(takes_all(p) for p in self._pattern_schemas())  # fmt: skip
        return self._open and not any(self.closes_here(s, strict) for s, _ in self.schemas)

    def others_open(self, strict: bool) -> bool:
        """Whether names that no pattern matches and no schema declares are accepted here whatever was
        written before, whatever the patterns do: no ``propertyNames``, object ``enum`` or ``const``,
        and every schema here leaves its objects open (``additionalProperties`` and
        ``unevaluatedProperties`` unset, true, ``{}`` or annotations only, not closed by ``strict``)."""
        return bool(self.schemas) and not any(
            k in s for s, _ in self.schemas for k in ("propertyNames", "enum", "const")
        ) and not any(self.closes_here(s, strict) or not all(
            takes_all(s.get(kw, True)) for kw in ("additionalProperties", "unevaluatedProperties")
        ) for s, _ in self.schemas)  # fmt: skip

    def patterns(self) -> list[str]:
        """The ``patternProperties`` patterns of the schemas here."""
        return [p for s, _ in self.schemas if isinstance(s.get("patternProperties"), dict) for p in s["patternProperties"]]

    def admits_undeclared(self, strict: bool) -> bool:
        """Whether an object here may take names no schema here declares (then one may be written
        twice unless the matcher refuses it): no schemas (a schema-free value), or some schema with
        ``patternProperties`` or not closing its objects (``additionalProperties`` /
        ``unevaluatedProperties`` other than false; unset is false where ``strict`` closes the
        schema here, ``closes_here``). An over-
        approximation where branches apply: a check more costs time, never exactness."""
        if not self.schemas:
            return True
        for s, _ in self.schemas:
            if isinstance(s.get("patternProperties"), dict) and s["patternProperties"]:
                return True
            closing = s.get("additionalProperties", s.get("unevaluatedProperties"))
            if closing is None and not self.closes_here(s, strict) or closing not in (None, False):
                return True
        return False

    def checks_names(self, key_order: str, strict: bool) -> bool:
        """Whether the matcher tracks the names written in an object here (``unique_runtime``):
        where the grammar may repeat one, a "bag" place or one taking undeclared names, or where it
        makes sure the required ones are written (``matcher_required``)."""
        return (self.admits_undeclared(strict) or self.policy(key_order, strict) == "bag"
                or key_order == "any" and bool(self.matcher_required(strict)))  # fmt: skip

    def names_alike(self, strict: bool) -> bool:
        """Whether every name not declared here fits as well as any other: no ``propertyNames``, no
        ``enum`` or ``const`` (whose objects spell out their names), and no ``patternProperties``
        unless every undeclared name fits anyway (``names_open``). Then one fresh name stands for
        all of them."""
        if self._patterned is None:  # read on every mask of a bag object: once per place
            self._patterned = (any("propertyNames" in s or "enum" in s or "const" in s for s, _ in self.schemas),
                               any(True for _ in self._pattern_schemas()))  # fmt: skip
        names, patterns = self._patterned
        return not names and (not patterns or self.names_open(strict))

    def _pattern_schemas(self):
        for s, _ in self.schemas:
            if isinstance(s.get("patternProperties"), dict):
                yield from s["patternProperties"].values()

    @property
    def conjunctive(self) -> bool:
        """Whether every schema here applies to every object here (no ``anyOf``, ``oneOf``,
        conditionals or dependencies): then the names a bag accepts are the same at every member."""
        return not any(k in s for s, _ in self.schemas for k in _BRANCHING)

    @property
    def bag_exact(self) -> bool:
        """Whether the "bag" policy is exact here: the bag tracks every name that must be present
        (``required``, dependencies) and the member count without forgetting any (where branches
        apply, ``anyOf`` and the like, each object lowered here is checked for its own names and
        takes ``ordered_policy`` past the bound). Under a ``oneOf`` too: exclusivity writes each
        branch beside the others' refusals as schemas that merge into it (``lowering._exclusive``),
        so bags are not intersected with complemented ones there."""
        if self._bag is None:
            self._bag = self._bag_exact()
        return self._bag

    def _bag_exact(self) -> bool:
        tracked = set(self.required_names)
        cap = 0
        for schema, _ in self.schemas:
            tracked.update(_dependency_names(schema))
            for kw in _COUNTING:
                if isinstance(schema.get(kw), int) and not isinstance(schema.get(kw), bool):
                    cap = max(cap, schema[kw])
        if not self.conjunctive:  # one branch's names at a time: each object lowered here checks its own
            return True
        return bag_fits(len(tracked), cap)

    @property
    def counted(self) -> bool:
        """Whether some schema here counts members (``minProperties``/``maxProperties``)."""
        return any(k in schema for schema, _ in self.schemas for k in _COUNTING)

    def matcher_required(self, strict: bool) -> frozenset[str]:
        """The names the matcher makes sure an object here holds before it closes (the closing
        brace is refused until each is written), so that the grammar need not track them: every
        name some schema here requires, at a ``mandatory`` place whose members are not counted (a
        count reached with a required name missing would leave the generation no way on) and where
        ``key_order="any"`` takes every order without a permutation automaton (more than
        ``MAX_PERMUTED`` names, or undeclared ones: a "bag"); else none. There the lowering builds a
        bag that takes those names as optional members (``objects``), whatever ``policy`` says (which
        counts them: past ``MAX_TRACKED_REQUIRED`` it keeps an order), unless the compile lowers
        again without (``SchemaLowering.untrack``): the matcher's checks hold for either grammar."""
        if self._required is None:
            ok = self.mandatory and not self.counted and (len(self.names) > MAX_PERMUTED or self.admits_undeclared(strict))
            self._required = frozenset(self.required_names) if ok else frozenset()
        return self._required

    @property
    def required_names(self) -> list[str]:
        """The names some schema here requires, in ``required`` order."""
        req: dict[str, None] = {}
        for schema, _ in self.schemas:
            r = schema.get("required")
            if isinstance(r, list):
                req.update(dict.fromkeys(x for x in r if isinstance(x, str)))
        return list(req)

    @property
    def required_first(self) -> list[str]:
        """The second accepted order: names some schema here requires (in ``required`` order), then
        the others in declared order. Datasets and hand-written instances often follow ``required``
        where ``properties`` was sorted by name."""
        req = self.required_names
        return req + [n for n in self.names if n not in set(req)]

    @staticmethod
    def at(resolver: SchemaResolver, schemas: list) -> KeyOrder:
        """The place of these (schema, base) pairs, made once per resolver: a big schema reaches the
        same places along many paths, and each made anew closed over its $refs and applicators."""
        schemas = [_entry(e) for e in schemas]
        key = tuple((id(s), b, literal) for s, b, literal in schemas)
        place = resolver.places.get(key)
        if place is None:  # the place's closed schema list keeps the key's schemas (and ids) alive
            place = resolver.places[key] = KeyOrder(resolver, schemas)
        return place

    def child(self, name: str) -> KeyOrder:
        place = self._children.get(name)
        if place is None:
            place = self._children[name] = self._child(name)
        return place

    def _child(self, name: str) -> KeyOrder:
        out = []
        for schema, base in self.schemas:
            literal = id(schema) in self.literal
            props = schema.get("properties")
            hit = False
            if isinstance(props, dict) and name in props:
                out.append((props[name], base, literal))
                hit = True
            pats = schema.get("patternProperties")
            if isinstance(pats, dict):
                for pattern, sub in pats.items():
                    if _search(pattern, name):
                        out.append((sub, base, literal))
                        hit = True
            if not hit and isinstance(schema.get("additionalProperties"), dict):
                out.append((schema["additionalProperties"], base, literal))
        return KeyOrder.at(self.resolver, out)

    def other(self) -> KeyOrder:
        """The place of a property no schema here names."""
        out = []
        for schema, base in self.schemas:
            literal = id(schema) in self.literal
            for sub in (
                (schema.get("patternProperties") or {}).values()
                if isinstance(schema.get("patternProperties"), dict)
                else ()
            ):
                out.append((sub, base, literal))
            if isinstance(schema.get("additionalProperties"), dict):
                out.append((schema["additionalProperties"], base, literal))
        return KeyOrder.at(self.resolver, out)

    def item(self, index: int | None = None) -> KeyOrder:
        """The place of array element ``index`` (None: any element past the prefixes)."""
        out = []
        for schema, base in self.schemas:
            literal = id(schema) in self.literal
            prefix = schema.get("prefixItems")
            items = schema.get("items")
            if isinstance(items, list):  # draft-07 tuple form
                prefix, items = items, schema.get("additionalItems")
            if isinstance(prefix, list) and index is not None and index < len(prefix):
                out.append((prefix[index], base, literal))
            elif isinstance(items, dict):
                out.append((items, base, literal))
            if isinstance(schema.get("contains"), dict):
                out.append((schema["contains"], base, literal))
        return KeyOrder.at(self.resolver, out)


def _entry(entry: tuple) -> tuple:
    """(schema, base, literal) of a place's entry given as (schema, base) or in full."""
    return entry if len(entry) == 3 else (*entry, False)


def exclusive_branches(schema: dict, resolver: SchemaResolver, base: str) -> bool:
    """Whether this schema's ``oneOf`` branches may need exclusivity (not proved disjoint on the
    schemas alone; the lowering, which knows more, proves no more pairs apart than this leaves
    out): the lowering keeps their literal meaning under ``strict`` then, and the places say so."""
    subs = schema.get("oneOf")
    if not isinstance(subs, list) or len(subs) < 2:
        return False
    key = (id(subs), base)  # asked for every place the schema is in, and by the lowering: once per resolver
    got = resolver.exclusive.get(key)
    if got is None:
        got = resolver.exclusive[key] = not disjoint(subs, resolver, base)
    return got


def bag_fits(tracked: int, cap: int) -> bool:
    """Whether a bag tracks ``tracked`` required names and counts to ``cap`` without forgetting."""
    return tracked <= MAX_TRACKED_REQUIRED and (1 << tracked) * (cap + 1) <= MAX_BAG_STATES


_DESCRIBES_OBJECTS = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
     "maxProperties", "dependentRequired", "dependentSchemas", "dependencies"}
)  # fmt: skip


def closes_by_default(schema: dict) -> bool:
    """Whether ``strict`` closes this schema's objects where it leaves ``additionalProperties``
    unset: a schema that describes objects (``type`` object, or a keyword of objects) and lists
    no values (an ``enum``/``const`` gives its objects whole). Other schemas (``{}``, a ``not``,
    string keywords) leave objects to the schemas beside them."""
    if "enum" in schema or "const" in schema:
        return False
    t = schema.get("type")
    return t == "object" or isinstance(t, list) and "object" in t or not _DESCRIBES_OBJECTS.isdisjoint(schema)


def closing_names(resolver: SchemaResolver, schema: dict, base: str) -> frozenset[str]:
    """The names an object ``strict`` closes (``closes_by_default``) still takes, with any value:
    those the schema and the schemas in place below it speak of (properties, required names,
    dependencies; through ``$ref``, ``allOf``, ``anyOf``, ``oneOf``, ``if``/``then``/``else``,
    ``not``). So closing never refuses a name the schema requires, and a schema that leaves its
    names to its branches keeps theirs; a branch's own names do not open its siblings."""
    return KeyOrder.at(resolver, [(schema, base)]).name_set


def _dependency_names(schema: dict):
    """The names a schema's dependencies mention: triggers, and the names they require."""
    for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
        deps = schema.get(kw)
        if isinstance(deps, dict):
            for trigger, dep in deps.items():
                yield trigger
                if isinstance(dep, list):
                    yield from (n for n in dep if isinstance(n, str))


def root_place(schema, registry: dict | None = None, resolver: SchemaResolver | None = None) -> KeyOrder:
    """The place of a schema's instance root: in ``resolver`` when given (one built over this schema
    and registry; places are made once per resolver), else in a resolver of its own."""
    if resolver is None:
        resolver = SchemaResolver(schema if isinstance(schema, dict) else {}, registry)
    return KeyOrder.at(resolver, [(schema, resolver.root_base)])


def has_bag(root: KeyOrder, strict: bool) -> bool:
    """Whether some place below ``root`` has the "bag" policy of ``key_order="any"`` (the matcher
    then refuses repeated names there). Walks the places (declared names, any other name, tuple
    indexes, any other index)."""
    def follow(place):
        width = max((len(_prefix(s)) for s, _ in place.schemas), default=0)
        return [n for n in [*map(place.child, place.names), place.other(), *map(place.item, range(width + 1))]
                if n.schemas]  # fmt: skip

    return _reaches(root, lambda place: place.policy("any", strict) == "bag" or bool(place.matcher_required(strict)),
                    follow)  # fmt: skip


def _branches(schema: dict) -> bool:
    """Whether some of ``schema`` applies to some of its objects only (``_BRANCHING``), but for property
    dependencies that only require names (``dependentRequired``, array-valued ``dependencies``): they
    add no schema to the place, and the names it requires stay required of every object."""
    for k in _BRANCHING:
        if k in schema:
            value = schema[k]
            if k == "dependentRequired" or k == "dependencies" and isinstance(value, dict) and all(
                    isinstance(v, list) for v in value.values()):  # fmt: skip
                continue
            return True
    return False


def mark_mandatory(root: KeyOrder, old_draft: bool = False) -> None:
    """Mark the places below ``root`` where every value the instance has must meet every schema of
    the place (``KeyOrder.mandatory``): those whose every way from the root passes only conjunctive
    places (no ``anyOf``, ``oneOf``, ``not``, conditionals or dependencies but those that only
    require names, no ``enum`` or ``const``)
    along edges that apply all their schemas: a declared name's value; an undeclared one's only
    where no pattern speaks of names (``other`` joins the patterns' schemas, which apply to some
    names only); an item's only where no ``contains`` is (which ``item`` joins). A place reached
    along another way is not mandatory, nor any below it (a place is one object per set of schemas:
    several ways may reach it). Before draft 2019-09 (``old_draft``), where a ``$ref`` has siblings
    (which those drafts ignore, while the place lists them) nothing there or below is marked. Past
    ``MAX_BAG_WALK`` places nothing is marked."""
    order, seen, edges = [root], {id(root)}, []  # edges: (parent, child, whether the child is met whole)
    i = 0
    while i < len(order):
        if len(order) > MAX_BAG_WALK:
            return
        place = order[i]
        i += 1
        schemas = [s for s, _ in place.schemas]
        patterned = any(s.get("patternProperties") or "unevaluatedProperties" in s for s in schemas)
        contains = any("contains" in s for s in schemas)
        width = max((len(_prefix(s)) for s in schemas), default=0)
        kids = [(place.child(n), True) for n in place.names] + [(place.other(), not patterned)]
        kids += [(place.item(k), not contains) for k in range(width + 1)]
        for kid, whole in kids:
            if not kid.schemas:
                continue
            edges.append((place, kid, whole))
            if id(kid) not in seen:
                seen.add(id(kid))
                order.append(kid)
    below: dict[int, list] = {}
    unsafe = [p for p in order if any(
        _branches(s) or "enum" in s or "const" in s or old_draft and "$ref" in s and not set(s) - ANNOTATIONS <= {"$ref"}
        for s, _ in p.schemas)]  # fmt: skip
    for parent, kid, whole in edges:
        below.setdefault(id(parent), []).append(kid)
        if not whole:
            unsafe.append(kid)
    off: set[int] = set()
    while unsafe:
        place = unsafe.pop()
        if id(place) not in off:
            off.add(id(place))
            unsafe += below.get(id(place), ())
    for place in order:
        if id(place) not in off:
            place.mandatory = True
            place.key = (*place.key, -1)  # the lowering keeps apart what it builds at other places
            place._required = None  # (read again with the mark)
    root.mandatory_places = tuple(p for p in order if id(p) not in off)


def repeats_names(root: KeyOrder, key_order: str, strict: bool) -> bool:
    """Whether an object of the instances may repeat a name in the grammar (``KeyOrder.checks_names``
    somewhere below ``root``: the matcher then refuses the repeat). Walks the places an instance can
    reach (by ``type``, ``const``, ``enum``)."""
    def follow(place):
        nxt = list(map(place.child, place.names)) if _may_hold(place, "object", dict) else []
        if _may_hold(place, "array", list):  # (undeclared names: answered by checks_names)
            width = max((len(_prefix(s)) for s, _ in place.schemas), default=0)
            nxt += map(place.item, range(width + 1))
        return nxt

    return _reaches(root, lambda place: _may_hold(place, "object", dict) and place.checks_names(key_order, strict),
                    follow)  # fmt: skip


def _reaches(root: KeyOrder, found, follow) -> bool:
    """Whether ``found`` holds at some place reached from ``root`` through ``follow``; past
    ``MAX_BAG_WALK`` places it answers yes (the cautious answer for both callers)."""
    todo, seen = [root], {id(root)}
    while todo:
        place = todo.pop()
        if found(place) or len(seen) > MAX_BAG_WALK:
            return True
        for n in follow(place):
            if id(n) not in seen:
                seen.add(id(n))
                todo.append(n)
    return False


def _may_hold(place: KeyOrder, kind: str, cls: type) -> bool:
    """Whether an instance may have a value of JSON type ``kind`` (Python ``cls``) here: no schema
    here restricts ``type``, ``const`` or ``enum`` to others (where branches apply, any may)."""
    if not place.conjunctive:
        return True
    for s, _ in place.schemas:
        t = s.get("type")
        if isinstance(t, str) and t != kind or isinstance(t, list) and kind not in t:
            return False
        if "const" in s and not isinstance(s["const"], cls):
            return False
        if isinstance(s.get("enum"), list) and not any(isinstance(v, cls) for v in s["enum"]):
            return False
    return True


def _prefix(schema: dict) -> list:
    items = schema.get("items")
    if isinstance(items, list):
        return items
    return schema["prefixItems"] if isinstance(schema.get("prefixItems"), list) else []


def _merged_order(lists) -> list[str]:
    """The names of several ``properties`` in one order that keeps each one's own order wherever
    they agree: a name not seen yet goes right after the previous name of its own list (names
    before the list's first known one go right before it; a list with no known name is appended).
    Branches of ``anyOf``/``oneOf`` then each keep their declared order at the shared place."""
    merged: list[str] = []
    for props in lists:
        if not isinstance(props, dict):
            continue
        at, pending = None, []
        for name in props:
            if name in merged:
                i = merged.index(name)
                if at is None:
                    merged[i:i] = pending
                    i += len(pending)
                at = i if at is None else max(at, i)
            elif at is None:
                pending.append(name)
            else:
                at += 1
                merged.insert(at, name)
        if at is None:
            merged += pending
    return merged


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except (re.error, RecursionError):
        return False


def order_instance(schema, instance, registry: dict | None = None):
    """The instance with every object's keys in the compiler's generation order."""
    resolver = SchemaResolver(schema if isinstance(schema, dict) else {}, registry)
    return _order(KeyOrder(resolver, [(schema, resolver.root_base)]), instance)


def _order(place: KeyOrder, value):
    if isinstance(value, dict):
        names = [n for n in place.names if n in value]
        rest = [k for k in value if k not in set(names)]
        return {k: _order(place.child(k), value[k]) for k in names + rest}
    if isinstance(value, list):
        return [_order(place.item(i), v) for i, v in enumerate(value)]
    return value
