"""Where holes (recursive references, unbounded schema-free values) meet intersections.

A context-free grammar has no intersection or complement, so the lowering avoids them where it can
and resolves them where it cannot:

* ``distributed`` rewrites a schema whose own keywords must be intersected with a recursive
  ``$ref`` target or with ``anyOf``/``oneOf`` branches into one merged schema (``$ref`` target
  inlined, or the sibling keywords merged into every branch) via ``schema_merge.merge``, which
  only succeeds when the merge is exact;
* ``disjoint_upper`` proves ``oneOf`` branches disjoint on over-approximations (holes replaced by
  every string, or by the first level of their body), so exclusivity holds without a complement;
* ``meet_one`` is the last resort: a schema-free value under an intersection nests at most
  ``any_depth`` (or ``FALLBACK_ANY_DEPTH``) deep, with a warning; a recursive reference there is a
  ``SchemaError`` naming the keyword and pointer, or with ``lenient`` is relaxed to any JSON value
  (as deep), with a warning.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from guided.errors import LimitError, SchemaError
from guided.grammar import ExprPool
from guided.grammar.regex_ast import Node, alt, any_string, intersect, literal, seq
from guided.schema.any_value import ANY_NAMES
from guided.schema.merge import merge
from guided.schema.recursion import Hole, fill_holes, has_hole, hole_names

if TYPE_CHECKING:  # the lowering calls these helpers with itself
    from guided.schema.lowering import SchemaLowering


__all__ = ["Unresolved", "meet_one", "holes_meet", "distributed", "disjoint_upper", "upper"]

# Disjointness proofs are bounded by work, never by time, so that a schema's grammar does not depend
# on the machine's load (nor does the disk cache's content). Work: derivatives computed plus
# expressions interned, both counted by the proof's own pool.
_BUDGET = 1_000  # states per emptiness search: proofs that need more are not worth their time
_PROOF_WORK = 150_000  # per oneOf, checked before each pair (one pair's search adds ~60k at most)
_LOWERING_PROOF_WORK = 1_500_000  # per lowering, over all its proofs
_MAX_BRANCHES = 16
_INTERSECTION = (
    "an intersection (allOf, $ref siblings, dependentSchemas, contains, uniqueItems, propertyNames)"
)


class Unresolved(Exception):
    """An intersection over holes met while trying a rewritten schema (the rewrite is dropped)."""


def meet_one(lowering: SchemaLowering, node: Node, path: str | None, keyword: str | None) -> Node:
    """A hole-free replacement for one intersection/complement with holes below."""
    if lowering.probing:
        raise Unresolved
    names = hole_names(node)
    depth = lowering.anys.fallback_depth
    kw = keyword or _INTERSECTION
    for name in sorted(names - ANY_NAMES):
        lowering.relax(
            f"a recursive reference to {lowering.rule_paths[name]} sits under {kw}, which a context-free grammar "
            f"cannot express exactly (relaxed: any JSON value nesting <= {depth} deep there)",
            path or lowering.rule_paths[name],
        )
    if names & ANY_NAMES:
        lowering.warn(f"a schema-free value under {kw} nests at most {depth} arrays/objects deep", path or "#")
    fill = lowering.any_value(depth)  # every hole alike: one memo per (mode, depth) in the scope
    return fill_holes(node, lambda h: fill, key=("any", lowering.mode, depth))


def holes_meet(lowering: SchemaLowering, parts: list[Node]) -> bool:
    """Whether conjoining these parts would intersect a language that has holes."""
    any_ = lowering.any_value()
    live = [p for p in parts if p != any_]
    return len(live) > 1 and any(has_hole(p) for p in live)


def distributed(lowering: SchemaLowering, schema: dict, base: str) -> dict | None:
    """The schema rewritten without an intersection of its own keywords with a ``$ref`` target or
    with ``anyOf``/``oneOf`` branches, when a merge makes that exact; else None."""
    if "$ref" in schema and not lowering.old_draft:
        target = _resolved(lowering, schema["$ref"], base)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return merge([rest, target]) if isinstance(target, dict) else None
    for kw in ("anyOf", "oneOf"):
        subs = schema.get(kw)
        if not isinstance(subs, list) or not subs or len(subs) > _MAX_BRANCHES:
            continue
        rest = {k: v for k, v in schema.items() if k != kw}
        merged = []
        for sub in subs:
            if isinstance(sub, dict) and set(sub) == {"$ref"}:
                sub = _resolved(lowering, sub["$ref"], base)
            m = merge([rest, sub]) if isinstance(sub, dict) else None
            if m is None:
                return None
            merged.append(m)
        return {kw: merged}
    return None


def _resolved(lowering: SchemaLowering, ref, base: str):
    if not isinstance(ref, str):
        return None
    try:
        target, tbase, _ = lowering.resolver.resolve(ref, base, "#")
    except SchemaError:
        return None
    return target if tbase == base else None


def upper(lowering: SchemaLowering, node: Node) -> Node:
    """A hole-free superset of the node's language: holes become every string, except the first
    level of a defined nonterminal and the kinds of a schema-free value."""

    def top(h: Hole) -> Node:
        if h.name in ANY_NAMES:
            return alt(
                lowering.any_kinds(h.name)[0], seq(literal("["), any_string()), seq(literal("{"), any_string())
            )
        body = lowering.rules.get(h.name)
        return any_string() if body is None else fill_holes(body, lambda _: any_string())

    return fill_holes(node, top)


def disjoint_upper(lowering: SchemaLowering, nodes: list[Node]) -> bool:
    """Whether the languages (some with holes) are pairwise disjoint, proved on ``upper`` bounds.

    Each bound is built when its first pair is tried: most proofs fail on their first pair, and a
    bound can be large (the first level of a big definition)."""
    if not any(has_hole(n) for n in nodes) or len(nodes) > _MAX_BRANCHES:
        return False
    if lowering.proof_work >= _LOWERING_PROOF_WORK:
        return False
    bounds: dict[int, Node] = {}
    pool = ExprPool()
    start = pool._work + len(pool)
    try:
        for i, j in itertools.combinations(range(len(nodes)), 2):
            if pool._work + len(pool) - start > _PROOF_WORK:  # the pairs so far spent the proof's work
                return False
            for k in (i, j):
                if k not in bounds:
                    bounds[k] = upper(lowering, nodes[k])
            if pool.is_live(pool.intern(intersect(bounds[i], bounds[j])), _BUDGET):
                return False
        return True
    except LimitError:  # a search past its states
        return False
    finally:
        lowering.proof_work += pool._work + len(pool) - start
