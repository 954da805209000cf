"""AnyValue: the languages of schema-free JSON values (``true``, ``{}``, open ``additionalProperties``).

By default a schema-free value is the nonterminal ``any`` (a ``Hole`` in the regex AST): scalars, or
an array or object of ``any`` values, nesting without bound. Where no other nonterminal is left, the
compiler makes it a ``Recursive`` leaf of one regex (``compiler._with_value_leaves``), else a rule
of the context-free grammar. Its array and object branches are what
the lowering builds for ``{"type": "array"}`` and ``{"type": "object"}`` (open), so those schemas
share them. ``bounded(d)`` is the regular language of values nesting at most ``d`` arrays/objects
deep: the explicit ``any_depth`` option, and the fallback where a schema-free value sits under an
intersection or complement, which a context-free grammar cannot express. ``excluding`` computes
``not`` of schema-free values exactly where the excluded language leaves whole kinds (arrays,
objects) alone or removes them entirely.

Two such languages per lowering run: ``any`` (every spelling: exponents, ``1.0``, ``-0``) and
``any_p``, the same values with numbers spelled without exponent only (``PLAIN_NUMBER``).
A complement is taken within ``any_p``: the language being excluded then only needs every
exponent-free spelling of its values for the complement to be exact on values (see
``schema_lowering``, "Complements").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from guided.errors import LimitError
from guided.grammar.languages import is_empty
from guided.grammar.regex_ast import (
    Alt,
    Node,
    Not,
    alt,
    any_string,
    intersect,
    literal,
    optional,
    repeat,
    seq,
)
from guided.schema.arrays import array_node
from guided.schema.key_order import KeyOrder
from guided.schema.numbers import JSON_NUMBER, PLAIN_NUMBER
from guided.schema.objects import object_node
from guided.schema.recursion import Hole, has_hole
from guided.schema.strings import json_string

if TYPE_CHECKING:  # the lowering calls these helpers with itself
    from guided.schema.lowering import SchemaLowering


__all__ = ["AnyValue", "ANY", "ANY_PLAIN", "ANY_NAMES", "FALLBACK_ANY_DEPTH"]

ANY = "any"
ANY_PLAIN = "any_p"
ANY_NAMES = frozenset({ANY, ANY_PLAIN})
FALLBACK_ANY_DEPTH = 10
_PROBE_BUDGET = 20_000


# (options key, plain, the lowering state the value's array and object read) -> (kinds, their union,
# whether building them handed out the plain value's nonterminal)
_KINDS: dict[tuple, tuple[tuple[Node, Node, Node], Node, bool]] = {}
_KINDS_MAX = 256


class AnyValue:
    """The schema-free value languages of one lowering run (``lowering``: its ``SchemaLowering``)."""

    def __init__(self, lowering: SchemaLowering, plain: bool = False):
        self.lowering = lowering
        self.plain = plain
        self.hole = Hole(ANY_PLAIN if plain else ANY)
        self.sibling: AnyValue | None = None  # the other one of the run (kinds that mean the same)
        self._bounded: dict[int, Node] = {}
        self._kinds: tuple[Node, Node, Node] | None = None
        self._body: Node | None = None  # their union (``body``)
        depth = lowering.options.any_depth
        self.fallback_depth = FALLBACK_ANY_DEPTH if depth is None else depth

    def kinds(self) -> tuple[Node, Node, Node]:
        """(scalars, arrays of ``any``, objects of ``any``).

        The same nodes for every lowering whose options and state the schema-free array and object
        read are the same (``_KINDS``): one compile built them again and again (with the walks that
        compared the new nodes to the old ones: ~7% of a median compile)."""
        if self._kinds is None:
            lowering = self.lowering
            key = (lowering.options.values(), self.plain, lowering.closes_objects, lowering.negations, lowering.literal,
                   lowering.names_runtime, bool(lowering.unique_runtime), lowering.probing, lowering.unrolling)  # fmt: skip
            hit = _KINDS.get(key)
            if hit is None:
                place, base = KeyOrder(lowering.resolver, []), lowering.resolver.root_base
                used = lowering.plain_used
                with lowering.in_mode(lowering.PLAIN if self.plain else lowering.FREE):
                    arr = array_node(lowering, {}, "#", base, place)
                    obj = object_node(lowering, {"additionalProperties": True}, "#", base, place)
                kinds = (self.scalars(), arr, obj)
                hit = kinds, alt(*kinds), lowering.plain_used and not used
                if len(_KINDS) < _KINDS_MAX:
                    _KINDS[key] = hit
            self._kinds, self._body = hit[0], hit[1]
            lowering.plain_used |= hit[2]  # (what building them would have noted)
        return self._kinds

    def scalars(self) -> Node:
        number = PLAIN_NUMBER if self.plain else JSON_NUMBER
        return alt(literal("null"), literal("true"), literal("false"), number, json_string())

    def body(self) -> Node:
        """The body of the ``any`` nonterminal (one node per ``_KINDS`` entry)."""
        self.kinds()
        return self._body

    def bounded(self, d: int) -> Node:
        """Every JSON value nesting at most ``d`` arrays/objects deep (a regular language)."""
        node = self._bounded.get(d)
        if node is None:
            lowering = self.lowering
            scalars = self.scalars()
            if d == 0:
                node = scalars
            else:
                inner = self.bounded(d - 1)
                arr = seq(
                    literal("["), lowering.ws, optional(seq(inner, repeat(seq(lowering.sep, inner)))), lowering.ws, literal("]")
                )
                member = seq(json_string(), lowering.colon, inner)
                obj = seq(
                    literal("{"),
                    lowering.ws,
                    optional(seq(member, repeat(seq(lowering.sep, member)))),
                    lowering.ws,
                    literal("}"),
                )
                node = alt(scalars, arr, obj)
            self._bounded[d] = node
        return node

    def excluding(self, excluded: list[Node]) -> Node:
        """Every JSON value in none of the ``excluded`` languages (``not``), exact where each excluded
        part is regular or a whole kind; other parts stay intersections for ``meet`` to resolve."""
        scalars, arr, obj = self.kinds()
        whole = {k: k for k in (arr, obj, self.hole)}
        if self.sibling is not None:  # the other run's whole kinds are the same values
            _, s_arr, s_obj = self.sibling.kinds()
            whole.update({s_arr: arr, s_obj: obj, self.sibling.hole: self.hole})
        regular: list[Node] = []
        gone: list[Node] = []
        for x in excluded:
            for part in _alternatives(x):
                if part in whole:
                    gone.append(whole[part])
                elif has_hole(part):
                    return intersect(self.hole, *(Not(e) for e in excluded))
                else:
                    regular.append(part)
        if self.hole in gone:
            return alt()
        rest = Not(alt(*regular)) if regular else None
        out = [intersect(scalars, rest) if rest is not None else scalars]
        for opener, kind in (("[", arr), ("{", obj)):
            if kind in gone:
                continue
            if rest is None or _misses(regular, opener):
                out.append(kind)
            else:
                out.append(intersect(kind, rest))
        return alt(*out)


def _alternatives(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Alt):
        return tuple(p for item in node.items for p in _alternatives(item))
    return (node,)


def _misses(regular: list[Node], opener: str) -> bool:
    """Whether no string of the regular languages starts with ``opener``."""
    try:
        return is_empty(intersect(alt(*regular), seq(literal(opener), any_string())), _PROBE_BUDGET)
    except LimitError:
        return False
