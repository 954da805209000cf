"""Objects as bags of members: every order of the members, for languages that get complemented.

In ``NEG`` mode (``schema_lowering``, "Complements") an object language must hold every spelling of
every object the schema accepts, whatever the order of its members. A bag does: members of any kind
in any order, each required name's member at least once, the number of members within
[minProperties, maxProperties]. It also holds objects that repeat a name (JSON leaves their meaning
open), which is more than the schema's objects and so only makes the complement smaller. Past a
state budget a bag forgets the member count, then the required names beyond what it can track:
again only more, never less.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from guided.grammar.regex_ast import EMPTY, EPSILON, Node, alt, cat, literal, repeat, seq

if TYPE_CHECKING:  # the lowering calls these helpers with itself
    from guided.schema.lowering import SchemaLowering


__all__ = ["bag", "value_bag", "MAX_TRACKED_REQUIRED", "MAX_BAG_STATES"]

MAX_TRACKED_REQUIRED = 8
MAX_BAG_STATES = 4096


def bag(lowering: SchemaLowering, slots: list[tuple[Node, bool]], other: Node, lo: int, hi: int | None) -> Node:
    """The members between the braces: ``slots`` (one member per declared name, and whether it is
    required) and ``other`` (one member of any other name), comma-separated, in any order."""
    required = [m for m, req in slots if req][:MAX_TRACKED_REQUIRED]
    optional = [m for m, req in slots if not req or m not in required]
    if hi is not None and hi < lo:
        return EMPTY
    if (1 << len(required)) * ((hi if hi is not None else lo) + 1) > MAX_BAG_STATES:
        lo, hi = 0, None  # forget the count: a larger language
    n, full = len(required), (1 << len(required)) - 1
    sep = lowering.sep

    def generic(seen: int) -> Node:
        """A member that leaves ``seen`` as it is: optional, other, or a required one seen before
        (so the member's name alone picks the way: a deterministic automaton, cheap to complement)."""
        return alt(*optional, other, *(required[i] for i in range(n) if seen >> i & 1))

    def choices(seen: int, nxt) -> Node:
        """One member, then what follows it (``nxt(seen after it)``)."""
        taken = [cat(required[i], nxt(seen | 1 << i)) for i in range(n) if not seen >> i & 1]
        return alt(cat(generic(seen), nxt(seen)), *taken)

    # once the count no longer matters: any members, each unseen required name taken at some point
    free: dict[int, Node] = {}
    for seen in range(full, -1, -1):  # supersets first
        # (the separator's own items stay in the sequence, where a grammar with holes cuts terminals at it)
        taken = [seq(sep, cat(required[i], free[seen | 1 << i])) for i in range(n) if not seen >> i & 1]
        free[seen] = seq(repeat(seq(sep, generic(seen))), alt(EPSILON if seen == full else EMPTY, *taken))
    if hi is None and lo <= 1:
        start = choices(0, lambda s: free[s])
        return alt(EPSILON if n == 0 and lo == 0 else EMPTY, start)
    # counted: after[c][seen] is what may follow once c members were written
    cap = hi if hi is not None else lo
    if cap == 0:
        return EPSILON if n == 0 else EMPTY
    after: list[dict[int, Node]] = [{} for _ in range(cap + 1)]
    for seen in range(full + 1):
        after[cap][seen] = free[seen] if hi is None else (EPSILON if seen == full else EMPTY)
    for c in range(cap - 1, 0, -1):
        for seen in range(full + 1):
            end = EPSILON if seen == full and c >= lo else EMPTY
            after[c][seen] = alt(end, seq(sep, choices(seen, lambda s, c=c: after[c + 1][s])))
    start = choices(0, lambda s: after[1][s])
    return alt(EPSILON if n == 0 and lo == 0 else EMPTY, start)


def value_bag(lowering: SchemaLowering, members: list[Node]) -> Node:
    """An object spelled out by a schema (``const``/``enum``) in every order: at least
    ``len(members)`` members, each one of them (repeated names make the larger language)."""
    body = EPSILON
    if members:
        one = alt(*members)
        body = seq(one, repeat(seq(lowering.sep, one), len(members) - 1, None))
    return seq(literal("{"), lowering.ws, body, lowering.ws, literal("}"))
