"""Slice forms: which expressions a vocabulary slice serves, read off the interned expression.

A state ``X{lo,hi} rest`` (or a union with such a live branch), X a character class the pool knows
(``ExprPool.char_class``), allows every token made of at most hi X-characters whatever ``rest`` is;
``slice_candidate`` finds (X, hi) so the token side can use the precomputed ``tokens.slices.Slice``.

So do three other forms, each of which every X-string begins:
- ``x x{lo,hi} rest`` (at most hi + 1 characters), x of the class X: a string of at least one
  character once the derivative split off its first;
- ``C rest`` where C was interned from a ``regex_ast.Cofinite`` union: an object's other keys spelled
  as a trie of the declared names, all but finitely many X-strings;
- ``(Y1{lo,} & ... & ~F1 & ...) rest``, X within every Yi and every Fi finite (the same keys spelled
  with complements): after any X-string, the Yi still take every X-string and the Fi exclude
  finitely many, so infinitely many strings remain.
"""

from __future__ import annotations

from guided.grammar.automata.expr_pool import (
    INF,
    K_AND,
    K_CAT,
    K_NOT,
    K_OR,
    K_REC,
    K_REP,
    ExprPool,
    class_size,
)

__all__ = ["slice_candidate", "wider"]

def slice_candidate(pool: ExprPool, e: int) -> tuple[tuple, int] | None:
    """(character class key, max repeats or INF) when e is ``X{lo,hi} rest``, or a union with such a
    live branch, or such a union followed by more, nested (a member name due in an open object: a
    declared name or any other, then the rest of it): every token of at most hi X-characters is then
    allowed (see Slice)."""
    memo = pool.__dict__.setdefault("_slice_memo", {})
    if e in memo:
        return memo[e]
    best = memo[e] = _branch_form(pool, e, _UNION_DEPTH)
    return best


_UNION_DEPTH = 4  # unions (and unions followed by more) looked into, nested


def _branch_form(pool: ExprPool, e: int, depth: int):
    """e's form, or the widest form of a live branch of the union e is or begins with (``(A | B) rest``
    allows what ``A rest`` and ``B rest`` allow; rest is live wherever the whole is)."""
    best = _slice_form(pool, e)
    if best is not None or not depth:
        return best
    k = pool.kind[e]
    union = e if k == K_OR else pool.args[e][0] if k == K_CAT else -1
    if union < 0 or pool.kind[union] != K_OR:
        return None
    for x in pool.args[union]:
        c = _branch_form(pool, x, depth - 1)
        if c is not None and (best is None or wider(c[1], best[1])) and pool.is_live(x):
            best = c
    return best


def _slice_form(pool: ExprPool, e: int):
    """The form of e alone (no union of forms): memoised per expression, since the branches of a
    union recur in the unions of its derivatives (most calls come from ``slice_candidate``'s loop)."""
    memo = pool.__dict__.setdefault("_form_memo", {})
    r = memo.get(e, False)
    if r is False:
        r = memo[e] = _form_of(pool, e)
    return r


def _form_of(pool: ExprPool, e: int):
    k = pool.kind[e]
    if k == K_CAT:
        e, tail = pool.args[e]
        k = pool.kind[e]
        got = _one_then_repeat(pool, e, tail)
        if got is not None:
            return got
    body = pool.cofinite.get(e)
    if body is not None:  # every string of the body's class begins one of e's (regex_ast.Cofinite)
        return _slice_form(pool, body)
    if k == K_AND:
        return _intersection_form(pool, e)
    if k != K_REP:
        return None
    x, _, hi = pool.args[e]
    cx = _class_of_item(pool, x)
    return None if cx is None else (pool.char_class[cx], hi)


def _one_then_repeat(pool: ExprPool, x: int, tail: int):
    """(X, hi + 1) for ``x x{lo,hi} rest``, x of the character class X (a string of at least one
    character, once the derivative split off its first), else None."""
    kt = pool.kind[tail]
    rep = pool.args[tail][0] if kt == K_CAT else tail if kt == K_REP else -1
    if rep < 0 or pool.kind[rep] != K_REP or pool.args[rep][0] != x:  # (the same item: no class search)
        return None
    cx = _class_of_item(pool, x)
    hi = pool.args[rep][2]
    return None if cx is None else (pool.char_class[cx], INF if hi == INF else hi + 1)


def _class_of_item(pool: ExprPool, x: int) -> int | None:
    """The character class (its node) whose strings a repeat of x takes: x itself, or the widest
    class within the union x ((X|other){lo,hi}: X-strings are still allowed); None if neither."""
    if x in pool.char_class:
        return x
    return pool.widest_class_in(x) if pool.kind[x] == K_OR else None


def _intersection_form(pool: ExprPool, e: int):
    """(X, INF) for ``Y1{lo,} & ... & ~F1 & ...`` with X within every Yi and every Fi finite, else None."""
    items, classes = [], set()
    for part in pool.args[e]:
        k = pool.kind[part]
        if k == K_NOT:
            if not _finite(pool, pool.args[part]):
                return None
            continue
        if k != K_REP or pool.args[part][2] != INF:
            return None
        x = pool.args[part][0]
        cx = _class_of_item(pool, x)
        if cx is None:
            return None
        items.append(x)
        classes.add(cx)
    for cx in sorted(classes, key=lambda c: class_size(pool.char_class[c])):  # the narrowest within every item
        if all(x == cx or (pool.kind[x] == K_OR and pool.class_within(cx, x)) for x in items):
            return pool.char_class[cx], INF
    return None


def _finite(pool: ExprPool, e: int) -> bool:
    """Whether e's language is finite, read off its structure: no unbounded repeat, no complement
    or intersection (memoised)."""
    memo = pool.__dict__.setdefault("_finite_memo", {})
    if e in memo:
        return memo[e]
    k = pool.kind[e]
    if pool.has_bool[e] or k == K_REC:  # (a recursive language nests without bound)
        r = False
    elif k == K_REP:
        r = pool.args[e][2] != INF and _finite(pool, pool.args[e][0])
    elif k == K_CAT or k == K_OR:
        r = all(_finite(pool, x) for x in pool.args[e])
    else:
        r = True  # bytes, the empty string, nothing
    memo[e] = r
    return r


def wider(a: int, b: int) -> bool:
    return b != INF and (a == INF or a > b)
