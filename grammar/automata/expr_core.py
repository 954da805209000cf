"""The expression core of ExprPool in compiled code: hash-consed nodes, smart constructors, derivatives.

Everything lives in one int64 array, the *arena* (one argument per call keeps numba's dispatch at
a fraction of a microsecond): a header, then one region per node column, the open-addressing
hash table that interns nodes, the derivative memo and the children of unions and intersections.

Each node is a record of NW words (its columns side by side, so reading a node touches one or two
cache lines): kind, a0, a1, a2 (CAT: head, tail; REP: item, min, max or -1; NOT: item; OR/AND:
offset and count of their sorted children; BYTES: nothing, its set is ``first``), first (four
64-bit words: the bytes a derivative may be non-empty for; a BYTES node's own set), nullable,
has_bool (contains AND/NOT), counter (the largest ``rep_span`` inside: bytes past which ``clamp``
changes a repeat), min_len (a lower bound
on the length of its strings) and live (the emptiness memo: unknown, live, empty).

Every function that may add a node returns an id >= 0 or a negative status: FULL (a region is
full: the caller grows the arena and calls again; interning makes the retry return the same ids),
LIMIT (``max_exprs`` reached) or DEEP (a derivative with over MAX_DEPTH parts pending). Semantics are those of the
pure-Python constructors they replace, rule for rule (see ``expr_pool``).
"""

from __future__ import annotations

import heapq
import platform
import time

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

K_EMPTY, K_EPS, K_BYTES, K_CAT, K_OR, K_AND, K_NOT, K_REP, K_REC = range(9)
# K_REC: a language defined by itself (``make_rec``), a0 its body, in which each reference to it follows
# at least one byte: its derivative is its body's, and every walk of the expression DAG stops at it
INF = -1
NEVER = 1 << 40
FULL, LIMIT, DEEP = -2, -3, -4
LAZY = 8 << 20  # arenas of this many bytes or more leave their unused regions unwritten (``_layout``)
MAX_DEPTH = 1 << 22  # pending derivatives on one derivative's stack
ALL_I = -1  # all 64 bits of a word, as an int64
# Explicit signatures for the node constructors that everything calls with constant arguments: numba
# otherwise compiles one copy per combination of literal arguments at the call sites (15 of _add,
# 14 of _hash, 13 each of _make and _same, each linked into its callers). With a signature a literal
# argument converts to int64 / bool and one copy serves: a cold process's JIT 79 -> 57 s on 2 cores
# with _push, _sorted_unique and _guide too (benchmarks/cold_jit.py), masks and compiles as fast
# (benchmarks/compile_ab.py; results/cold-jit-s60.txt).
_ARENA, _INT, _BOOL = types.int64[::1], types.int64, types.boolean
_SIG_HASH = [(_ARENA, *(_INT,) * 8)]  # (a, kind, a0, a1, a2, f0, f1, f2, f3)
_SIG_SAME = [(_ARENA, *(_INT,) * 9)]  # (a, e, kind, a0, a1, a2, f0, f1, f2, f3)
_SIG_MAKE = [(_ARENA, *(_INT,) * 8, _BOOL, _BOOL, _INT, _INT)]  # + nullable, has_bool, counter, min_len
_SIG_BYTES = [(_ARENA, *(_INT,) * 4)]  # (a, f0, f1, f2, f3)
_SIG_ITEMS = [(_ARENA, _ARENA, _INT)]  # (a, items, n)
_SIG_PUSH = [(_ARENA, _INT, _INT)]
_SIG_SORTED = [(_ARENA, _INT)]
_SIG_GUIDE = [(_ARENA, _INT, _BOOL, _INT)]  # (a, x, by_parts, depth)
_GOLD = 0x9E3779B97F4A7C15 - (1 << 64)  # odd multipliers, as int64 (wrapping arithmetic)
_MUL = 0xBF58476D1CE4E5B9 - (1 << 64)

# header slots
H_N, H_NCAP, H_HCAP, H_KLEN, H_KCAP, H_MCAP, H_MCOUNT, H_MAX, H_WORK = range(9)
O_KIND, O_A0, O_A1, O_A2, O_FIRST, O_NULL, O_BOOL, O_COUNTER, O_MINLEN, O_LIVE, O_HT, O_MK, O_MV, O_KIDS = range(
    10, 24
)
HEADER = 24
NW = 13  # words per node record: kind, a0, a1, a2, first (4), nullable, has_bool, counter, min_len, live
_FIELDS = ((O_KIND, 0), (O_A0, 1), (O_A1, 2), (O_A2, 3), (O_FIRST, 4), (O_NULL, 8), (O_BOOL, 9), (O_COUNTER, 10),
           (O_MINLEN, 11), (O_LIVE, 12))  # fmt: skip
LIVE_UNKNOWN, LIVE_YES, LIVE_NO = 0, 1, 2  # the emptiness memo column
SEARCH = -16  # live(): -16 - x asks the caller to search x


def words(mask: int) -> np.ndarray:
    """A 256-bit set (a Python int) as the arena's four int64 words, low word first."""
    return np.frombuffer(mask.to_bytes(32, "little"), dtype=np.int64).copy()


def new_arena(node_cap: int = 256, kids_cap: int = 1024, max_exprs: int = 2_000_000) -> np.ndarray:
    """An arena holding EMPTY (id 0) and EPS (id 1)."""
    a = _layout(node_cap, kids_cap, max_exprs)
    _init(a)
    return a


def grow(a: np.ndarray) -> np.ndarray:
    """A copy of the arena with twice the room in each region over half full (in all of them if none
    is: the call that ran out needs more than that region's rest). The node records, their hash
    table and the derivative memo are sized together (``_layout``), so a full memo doubles them all."""
    return _grow(a)


@numba.njit(cache=True)
def _layout(node_cap, kids_cap, max_exprs):
    """An empty arena with room for node_cap nodes and kids_cap children (hash tables sized to them)."""
    hcap = 1
    while hcap < 2 * node_cap:
        hcap *= 2
    mcap = 2 * hcap
    # An arena under LAZY bytes is zeroed whole here, where it is made or grown: its pages would
    # otherwise fault in one by one inside later masks, as they derive. A larger one (a pool of
    # hundreds of thousands of expressions) has only its header and the two tables' keys (-1: empty)
    # written: a node's record is written whole when it is added (``_add``), memo values and
    # children before they are read, and pages never written are never faulted in (growing a 400 MB
    # arena wrote every page of regions mostly unused: 98k page faults, 0.27 s inside one mask).
    a = np.empty(HEADER + NW * node_cap + hcap + 2 * mcap + kids_cap, dtype=np.int64)
    if a.nbytes < LAZY:
        a[:] = 0
    else:
        a[:HEADER] = 0
    base = HEADER
    for slot, field in _FIELDS:
        a[slot] = base + field
    off = base + NW * node_cap
    a[O_HT] = off
    a[O_MK] = off + hcap
    a[O_MV] = off + hcap + mcap
    a[O_KIDS] = off + hcap + 2 * mcap
    a[H_NCAP], a[H_HCAP], a[H_KCAP], a[H_MCAP], a[H_MAX] = node_cap, hcap, kids_cap, mcap, max_exprs
    a[a[O_HT] : a[O_HT] + hcap] = -1
    a[a[O_MK] : a[O_MK] + mcap] = -1
    return a


@numba.njit(cache=True)
def _grow(a):
    """grow() (compiled: a search grows the arena it works in and goes on)."""
    ncap, kcap = a[H_NCAP], a[H_KCAP]
    nodes = 2 * a[H_N] > ncap or 2 * a[H_MCOUNT] > a[H_MCAP]
    kids = 2 * a[H_KLEN] > kcap
    if not (nodes or kids):
        nodes = kids = True
    b = _layout(2 * ncap if nodes else ncap, 2 * kcap if kids else kcap, a[H_MAX])
    _copy(a, b)
    return b


@numba.njit(cache=True)
def _init(a):
    _add(a, K_EMPTY, 0, 0, 0, 0, 0, 0, 0, False, False, 0, NEVER)
    _add(a, K_EPS, 0, 0, 0, 0, 0, 0, 0, True, False, 0, 0)


@numba.njit(cache=True)
def _copy(a, b):
    n = a[H_N]
    b[b[O_KIND] : b[O_KIND] + NW * n] = a[a[O_KIND] : a[O_KIND] + NW * n]  # the records, contiguous
    kl = a[H_KLEN]
    b[b[O_KIDS] : b[O_KIDS] + kl] = a[a[O_KIDS] : a[O_KIDS] + kl]
    b[H_N], b[H_KLEN], b[H_WORK] = n, kl, a[H_WORK]
    if b[H_HCAP] == a[H_HCAP]:  # same table size: the same slots
        b[b[O_HT] : b[O_HT] + b[H_HCAP]] = a[a[O_HT] : a[O_HT] + a[H_HCAP]]
    else:
        for e in range(n):
            _ht_insert(b, e)
    mk, mv, mcap = a[O_MK], a[O_MV], a[H_MCAP]
    if b[H_MCAP] == mcap:
        b[b[O_MK] : b[O_MK] + mcap] = a[mk : mk + mcap]
        b[b[O_MV] : b[O_MV] + mcap] = a[mv : mv + mcap]
        b[H_MCOUNT] = a[H_MCOUNT]
    else:
        for i in range(mcap):
            k = a[mk + i]
            if k >= 0:
                _memo_put(b, k, a[mv + i])


# ---------------------------------------------------------------------------------------- hashing
@numba.njit(cache=True, inline="always")
def _mix(h, x):
    h ^= x + _GOLD + (h << 6) + (h >> 2)
    return h * _MUL


@numba.njit(_SIG_HASH, cache=True)
def _hash(a, kind, a0, a1, a2, f0, f1, f2, f3):
    h = _mix(np.int64(kind), a2)
    if kind == K_BYTES:
        h = _mix(_mix(_mix(_mix(h, f0), f1), f2), f3)
    elif kind == K_OR or kind == K_AND:
        kids = a[O_KIDS]
        for i in range(a1):
            h = _mix(h, a[kids + a0 + i])
    else:
        h = _mix(_mix(h, a0), a1)
    return h


@numba.njit(cache=True)
def _node_hash(a, e):
    f = a[O_FIRST] + NW * e
    return _hash(a, a[a[O_KIND] + NW * e], a[a[O_A0] + NW * e], a[a[O_A1] + NW * e], a[a[O_A2] + NW * e],
                 a[f], a[f + 1], a[f + 2], a[f + 3])  # fmt: skip


@numba.njit(cache=True)
def _ht_insert(a, e):
    ht, mask = a[O_HT], a[H_HCAP] - 1
    i = _node_hash(a, e) & mask
    while a[ht + i] >= 0:
        i = (i + 1) & mask
    a[ht + i] = e


@numba.njit(_SIG_SAME, cache=True)
def _same(a, e, kind, a0, a1, a2, f0, f1, f2, f3):
    """Whether node e is (kind, args); for OR/AND, a0/a1 locate the candidate's children in kids."""
    if a[a[O_KIND] + NW * e] != kind:
        return False
    if kind == K_BYTES:
        f = a[O_FIRST] + NW * e
        return a[f] == f0 and a[f + 1] == f1 and a[f + 2] == f2 and a[f + 3] == f3
    if kind == K_OR or kind == K_AND:
        if a[a[O_A1] + NW * e] != a1:
            return False
        kids, o = a[O_KIDS], a[a[O_A0] + NW * e]
        for i in range(a1):
            if a[kids + o + i] != a[kids + a0 + i]:
                return False
        return True
    return a[a[O_A0] + NW * e] == a0 and a[a[O_A1] + NW * e] == a1 and a[a[O_A2] + NW * e] == a2


@numba.njit(_SIG_MAKE, cache=True)
def _add(a, kind, a0, a1, a2, f0, f1, f2, f3, nullable, has_bool, counter, min_len):
    e = a[H_N]
    a[a[O_KIND] + NW * e], a[a[O_A0] + NW * e], a[a[O_A1] + NW * e], a[a[O_A2] + NW * e] = kind, a0, a1, a2
    f = a[O_FIRST] + NW * e
    a[f], a[f + 1], a[f + 2], a[f + 3] = f0, f1, f2, f3
    a[a[O_NULL] + NW * e], a[a[O_BOOL] + NW * e] = nullable, has_bool
    a[a[O_COUNTER] + NW * e], a[a[O_MINLEN] + NW * e] = counter, min_len
    a[a[O_LIVE] + NW * e] = LIVE_UNKNOWN  # (a large arena's records are not zeroed beforehand: _layout)
    a[H_N] = e + 1
    _ht_insert(a, e)
    return e


@numba.njit(_SIG_MAKE, cache=True)
def _make(a, kind, a0, a1, a2, f0, f1, f2, f3, nullable, has_bool, counter, min_len):
    """The id of (kind, args), added if new (OR/AND: children at kids[a0 : a0 + a1], already there)."""
    ht, mask = a[O_HT], a[H_HCAP] - 1
    i = _hash(a, kind, a0, a1, a2, f0, f1, f2, f3) & mask
    while True:
        e = a[ht + i]
        if e < 0:
            break
        if _same(a, e, kind, a0, a1, a2, f0, f1, f2, f3):
            return e
        i = (i + 1) & mask
    n = a[H_N]
    if n >= a[H_MAX]:
        return LIMIT
    if n >= a[H_NCAP] or 2 * (n + 1) > a[H_HCAP]:
        return FULL
    if kind == K_OR or kind == K_AND:
        a[H_KLEN] = a0 + a1  # keep the candidate's children: they become the node's
    return _add(a, kind, a0, a1, a2, f0, f1, f2, f3, nullable, has_bool, counter, min_len)


# ---------------------------------------------------------------------------------------- columns
@numba.njit(cache=True, inline="always")
def kind_of(a, e):
    return a[a[O_KIND] + NW * e]


@numba.njit(cache=True, inline="always")
def _null(a, e):
    return a[a[O_NULL] + NW * e] != 0


@numba.njit(cache=True, inline="always")
def _hasb(a, e):
    return a[a[O_BOOL] + NW * e] != 0


@numba.njit(cache=True, inline="always")
def _first_has(a, e, b):
    w = a[a[O_FIRST] + NW * e + (b >> 6)]
    return (w >> (b & 63)) & 1 != 0


# ---------------------------------------------------------------------------------------- constructors
@numba.njit(_SIG_BYTES, cache=True)
def make_bytes(a, f0, f1, f2, f3):
    if f0 == 0 and f1 == 0 and f2 == 0 and f3 == 0:
        return 0
    return _make(a, K_BYTES, 0, 0, 0, f0, f1, f2, f3, False, False, 0, 1)


@numba.njit(cache=True)
def _cat2(a, x, y):
    """cat(x, y) for x that is not a concatenation, or for y EMPTY or EPS."""
    if x == 0 or y == 0:
        return 0
    if x == 1:
        return y
    if y == 1:
        return x
    fx = a[O_FIRST] + NW * x
    if _null(a, x):
        fy = a[O_FIRST] + NW * y
        f0, f1, f2, f3 = a[fx] | a[fy], a[fx + 1] | a[fy + 1], a[fx + 2] | a[fy + 2], a[fx + 3] | a[fy + 3]
    else:
        f0, f1, f2, f3 = a[fx], a[fx + 1], a[fx + 2], a[fx + 3]
    ml = min(a[a[O_MINLEN] + NW * x] + a[a[O_MINLEN] + NW * y], NEVER)
    nullable = _null(a, x) and _null(a, y)
    counter = max(a[a[O_COUNTER] + NW * x], a[a[O_COUNTER] + NW * y])
    return _make(a, K_CAT, x, y, 0, f0, f1, f2, f3, nullable, _hasb(a, x) or _hasb(a, y), counter,
                 0 if nullable else ml)  # fmt: skip


@numba.njit(cache=True)
def make_cat(a, x, y):
    if kind_of(a, x) != K_CAT or y <= 1:  # (EMPTY and EPS are not concatenations)
        return _cat2(a, x, y)
    # right-nest: (h1 (h2 ... t)) y = h1 (h2 (... (t y)))
    heads = []
    while kind_of(a, x) == K_CAT:
        heads.append(a[a[O_A0] + NW * x])
        x = a[a[O_A1] + NW * x]
    r = _cat2(a, x, y)
    for i in range(len(heads) - 1, -1, -1):
        if r < 0:
            return r
        r = _cat2(a, heads[i], r)
    return r


@numba.njit(cache=True)
def make_not(a, x):
    if x < 0:
        return x
    if kind_of(a, x) == K_NOT:
        return a[a[O_A0] + NW * x]
    return _make(a, K_NOT, x, 0, 0, -1, -1, -1, -1, not _null(a, x), True, a[a[O_COUNTER] + NW * x],
                 1 if _null(a, x) else 0)  # fmt: skip


@numba.njit(cache=True)
def make_rec(a, f0, f1, f2, f3, min_len):
    """A new K_REC node (never shared: each is its own language) whose body ``set_rec_body`` gives
    once it is interned (the body refers to the node); the bytes it may start with and its shortest
    length are given here, as constructors read them while the body is built. Or FULL / LIMIT."""
    n = a[H_N]
    if n >= a[H_MAX]:
        return LIMIT
    if n >= a[H_NCAP] or 2 * (n + 1) > a[H_HCAP]:
        return FULL
    e = _add(a, K_REC, -1, 0, 0, f0, f1, f2, f3, False, False, 0, min_len)
    a[a[O_LIVE] + NW * e] = LIVE_YES
    return e


@numba.njit(cache=True)
def set_rec_body(a, e, body):
    """Give the K_REC node e its body (once, before anything derives e)."""
    a[a[O_A0] + NW * e] = body


@numba.njit(cache=True, inline="always")
def rep_span(lo, hi, min_len):
    """The bytes a string must exceed for the counters of x{lo,hi} to tell it apart (x at least
    ``min_len`` bytes an iteration, a non-empty one at least 1): hi iterations, or with no upper bound
    the bytes that enter the last mandatory one; ``clamp`` changes x{lo,hi} only past this limit
    (the node's ``counter`` is the largest span inside it)."""
    m = max(min_len, 1)
    n, extra = (hi, 0) if hi != INF else (lo - 1, 1)
    if n < 0:
        return 0
    if n > 0 and m > NEVER // n:
        return NEVER
    return n * m + extra


@numba.njit(cache=True)
def make_rep(a, x, lo, hi):
    if x < 0:
        return x
    if hi == 0 or x == 1:
        return 1
    if x == 0:
        return 1 if lo == 0 else 0
    if _null(a, x):
        lo = 0
    if lo == 1 and hi == 1:
        return x
    # (y{0|1,})* = y*
    while kind_of(a, x) == K_REP and lo == 0 and hi == INF and a[a[O_A1] + NW * x] <= 1 and a[a[O_A2] + NW * x] == INF:
        x = a[a[O_A0] + NW * x]
    f = a[O_FIRST] + NW * x
    nullable = lo == 0 or _null(a, x)
    counter = max(a[a[O_COUNTER] + NW * x], rep_span(lo, hi, a[a[O_MINLEN] + NW * x]))
    ml = 0
    if not nullable:
        mlx = a[a[O_MINLEN] + NW * x]
        ml = NEVER if mlx > NEVER // lo else min(lo * mlx, NEVER)
    return _make(a, K_REP, x, lo, hi, a[f], a[f + 1], a[f + 2], a[f + 3], nullable, _hasb(a, x), counter, ml)


@numba.njit(_SIG_SORTED, cache=True)
def _sorted_unique(xs, n):
    """xs[:n] sorted and deduplicated, in place (the caller's scratch): a view of xs."""
    if n > 32:
        xs[:n] = np.sort(xs[:n])
    else:  # insertion sort: no allocation for the short lists most unions have
        for i in range(1, n):
            v = xs[i]
            j = i - 1
            while j >= 0 and xs[j] > v:
                xs[j + 1] = xs[j]
                j -= 1
            xs[j + 1] = v
    m = 0
    for i in range(n):
        if m == 0 or xs[i] != xs[m - 1]:
            xs[m] = xs[i]
            m += 1
    return xs[:m]


@numba.njit(cache=True)
def _push_kids(a, kids):
    """Write a candidate's children after the used part of kids: (offset, count), or (-1, 0) if full."""
    n = len(kids)
    start = a[H_KLEN]
    if start + n > a[H_KCAP]:
        return -1
    base = a[O_KIDS] + start
    for i in range(n):
        a[base + i] = kids[i]
    return start


@numba.njit(_SIG_ITEMS, cache=True)
def make_or(a, items, n):
    """The union of items[:n] (ids >= 0): flattened, byte sets merged, sorted, deduplicated."""
    flat = np.empty(16, np.int64)
    nf = 0
    m0 = m1 = m2 = m3 = 0
    for i in range(n):
        e = items[i]
        k = kind_of(a, e)
        if k == K_OR:
            o, c, kids = a[a[O_A0] + NW * e], a[a[O_A1] + NW * e], a[O_KIDS]
            for j in range(c):
                x = a[kids + o + j]
                if kind_of(a, x) == K_BYTES:
                    f = a[O_FIRST] + NW * x
                    m0, m1, m2, m3 = m0 | a[f], m1 | a[f + 1], m2 | a[f + 2], m3 | a[f + 3]
                else:
                    if nf == len(flat):
                        flat = np.concatenate((flat, np.empty(len(flat), np.int64)))
                    flat[nf] = x
                    nf += 1
        elif k == K_BYTES:
            f = a[O_FIRST] + NW * e
            m0, m1, m2, m3 = m0 | a[f], m1 | a[f + 1], m2 | a[f + 2], m3 | a[f + 3]
        elif k != K_EMPTY:
            if nf == len(flat):
                flat = np.concatenate((flat, np.empty(len(flat), np.int64)))
            flat[nf] = e
            nf += 1
    if m0 != 0 or m1 != 0 or m2 != 0 or m3 != 0:
        b = make_bytes(a, m0, m1, m2, m3)
        if b < 0:
            return b
        if nf == len(flat):
            flat = np.concatenate((flat, np.empty(len(flat), np.int64)))
        flat[nf] = b
        nf += 1
    if nf == 0:
        return 0
    kids = _sorted_unique(flat, nf)
    if len(kids) == 1:
        return kids[0]
    nullable, has_bool, counter, ml = False, False, 0, NEVER
    f0 = f1 = f2 = f3 = 0
    for x in kids:
        nullable |= _null(a, x)
        has_bool |= _hasb(a, x)
        counter = max(counter, a[a[O_COUNTER] + NW * x])
        ml = min(ml, a[a[O_MINLEN] + NW * x])
        f = a[O_FIRST] + NW * x
        f0, f1, f2, f3 = f0 | a[f], f1 | a[f + 1], f2 | a[f + 2], f3 | a[f + 3]
    start = _push_kids(a, kids)
    if start < 0:
        return FULL
    return _make(a, K_OR, start, len(kids), 0, f0, f1, f2, f3, nullable, has_bool, counter, 0 if nullable else ml)


@numba.njit(cache=True)
def _covers(a, c, kids):
    """Whether c is one of kids, or a union with one of them (kids sorted)."""
    if _in_sorted(kids, c):
        return True
    if kind_of(a, c) == K_OR:
        o, n, base = a[a[O_A0] + NW * c], a[a[O_A1] + NW * c], a[O_KIDS]
        for j in range(n):
            if _in_sorted(kids, a[base + o + j]):
                return True
    return False


@numba.njit(cache=True)
def _in_sorted(xs, v):
    i = np.searchsorted(xs, v)
    return i < len(xs) and xs[i] == v


@numba.njit(_SIG_ITEMS, cache=True)
def make_and(a, items, n):
    """The intersection of items[:n] (ids >= 0), simplified as ExprPool.and_."""
    flat = np.empty(max(n, 4) * 2, np.int64)
    nf = 0
    for i in range(n):
        e = items[i]
        k = kind_of(a, e)
        if k == K_AND:
            o, c, base = a[a[O_A0] + NW * e], a[a[O_A1] + NW * e], a[O_KIDS]
            for j in range(c):
                if nf == len(flat):
                    flat = np.concatenate((flat, np.empty(len(flat), np.int64)))
                flat[nf] = a[base + o + j]
                nf += 1
        elif e == 0:
            return 0
        elif not (k == K_NOT and a[a[O_A0] + NW * e] == 0):  # drop "everything"
            if nf == len(flat):
                flat = np.concatenate((flat, np.empty(len(flat), np.int64)))
            flat[nf] = e
            nf += 1
    if nf == 0:
        return make_not(a, 0)
    kids = _sorted_unique(flat, nf)
    if _in_sorted(kids, 1):
        for x in kids:
            if not _null(a, x):
                return 0
        return 1
    for x in kids:
        if kind_of(a, x) == K_NOT and _covers(a, a[a[O_A0] + NW * x], kids):
            return 0
    m0 = m1 = m2 = m3 = ALL_I
    nb = 0
    for x in kids:
        if kind_of(a, x) == K_BYTES:
            f = a[O_FIRST] + NW * x
            m0, m1, m2, m3 = m0 & a[f], m1 & a[f + 1], m2 & a[f + 2], m3 & a[f + 3]
            nb += 1
    if nb:
        if m0 == 0 and m1 == 0 and m2 == 0 and m3 == 0:
            return 0
        b = make_bytes(a, m0, m1, m2, m3)
        if b < 0:
            return b
        rest = np.empty(len(kids) - nb + 1, np.int64)
        j = 0
        for x in kids:
            if kind_of(a, x) != K_BYTES:
                rest[j] = x
                j += 1
        rest[j] = b
        kids = _sorted_unique(rest, j + 1)
    if len(kids) == 1:
        return kids[0]
    nullable, counter, ml = True, 0, 0
    f0 = f1 = f2 = f3 = ALL_I
    for x in kids:
        nullable &= _null(a, x)
        counter = max(counter, a[a[O_COUNTER] + NW * x])
        ml = max(ml, a[a[O_MINLEN] + NW * x])
        f = a[O_FIRST] + NW * x
        f0, f1, f2, f3 = f0 & a[f], f1 & a[f + 1], f2 & a[f + 2], f3 & a[f + 3]
    start = _push_kids(a, kids)
    if start < 0:
        return FULL
    return _make(a, K_AND, start, len(kids), 0, f0, f1, f2, f3, nullable, True, counter, 0 if nullable else ml)



# ---------------------------------------------------------------------------------------- derivatives
@numba.njit(cache=True)
def _memo_get(a, key):
    mk, mask = a[O_MK], a[H_MCAP] - 1
    i = (key * _GOLD >> 17) & mask
    while True:
        k = a[mk + i]
        if k == key:
            return a[a[O_MV] + i]
        if k < 0:
            return -1
        i = (i + 1) & mask


@numba.njit(cache=True)
def _memo_put(a, key, v):
    mk, mask = a[O_MK], a[H_MCAP] - 1
    i = (key * _GOLD >> 17) & mask
    while a[mk + i] >= 0 and a[mk + i] != key:
        i = (i + 1) & mask
    if a[mk + i] < 0:
        a[H_MCOUNT] += 1
    a[mk + i] = key
    a[a[O_MV] + i] = v


@numba.njit(cache=True, inline="always")
def _memo_room(a):
    """Whether the memo takes one more entry (past three quarters full: FULL, grow first)."""
    return 4 * (a[H_MCOUNT] + 1) <= 3 * a[H_MCAP]


@numba.njit(cache=True, inline="always")
def _known(a, x, b):
    """deriv(x, b) if known (0 when b cannot start x), else -1."""
    if not _first_has(a, x, b):
        return 0
    return _memo_get(a, x * 256 + b)


@numba.njit(cache=True)
def deriv(a, e, b):
    """The derivative of e by byte b (memoised), or a negative status.

    Post-order with an explicit stack (numba's cached code cannot recurse): a node is derived once
    the derivatives it is made of are known; MAX_DEPTH bounds the stack.
    """
    r = _known(a, e, b)
    if r >= 0:
        return r
    stack = np.empty(64, np.int64)
    stack[0] = e
    top = 1
    while top:
        x = stack[top - 1]
        if _known(a, x, b) >= 0:
            top -= 1
            continue
        mark = top
        k = kind_of(a, x)
        a0 = a[a[O_A0] + NW * x]
        if k == K_CAT:
            h, y = a0, a[a[O_A1] + NW * x]
            while True:
                if _known(a, h, b) < 0:
                    stack, top = _push(stack, top, h)
                if not _null(a, h):
                    break
                if kind_of(a, y) != K_CAT or not _first_has(a, y, b):
                    if _known(a, y, b) < 0:
                        stack, top = _push(stack, top, y)
                    break
                h, y = a[a[O_A0] + NW * y], a[a[O_A1] + NW * y]
        elif k == K_OR or k == K_AND:
            base = a[O_KIDS] + a0
            for j in range(a[a[O_A1] + NW * x]):
                c = a[base + j]
                if _known(a, c, b) < 0:
                    stack, top = _push(stack, top, c)
        elif k == K_NOT or k == K_REP or k == K_REC:
            if _known(a, a0, b) < 0:
                stack, top = _push(stack, top, a0)
        if top > mark:
            if top > MAX_DEPTH:
                return DEEP
            continue
        if not _memo_room(a):
            return FULL
        r = _derive_one(a, x, b)
        if r < 0:
            return r
        _memo_put(a, x * 256 + b, r)
        a[H_WORK] += 1
        top -= 1
    return _known(a, e, b)


@numba.njit(_SIG_PUSH, cache=True)
def _push(stack, top, x):
    if top == len(stack):
        stack = np.concatenate((stack, np.empty(len(stack), np.int64)))
    stack[top] = x
    return stack, top + 1


@numba.njit(cache=True)
def _derive_one(a, e, b):
    """deriv(e, b) when the derivatives of e's parts are known."""
    k = kind_of(a, e)
    a0 = a[a[O_A0] + NW * e]
    if k == K_BYTES:
        return 1
    if k == K_CAT:
        parts = np.empty(8, np.int64)
        n = 0
        x, y = a0, a[a[O_A1] + NW * e]
        while True:
            d = make_cat(a, _known(a, x, b), y)
            if d < 0:
                return d
            parts, n = _push(parts, n, d)
            if not _null(a, x):
                break
            if kind_of(a, y) != K_CAT or not _first_has(a, y, b):
                parts, n = _push(parts, n, _known(a, y, b))
                break
            x, y = a[a[O_A0] + NW * y], a[a[O_A1] + NW * y]
        return parts[0] if n == 1 else make_or(a, parts, n)
    if k == K_OR or k == K_AND:
        c = a[a[O_A1] + NW * e]
        ds = np.empty(c, np.int64)
        n = 0
        base = a[O_KIDS] + a0
        for j in range(c):
            x = a[base + j]
            if k == K_OR and not _first_has(a, x, b):
                continue
            ds[n] = _known(a, x, b)
            n += 1
        return make_or(a, ds, n) if k == K_OR else make_and(a, ds, n)
    if k == K_NOT:
        return make_not(a, _known(a, a0, b))
    if k == K_REP:
        lo, hi = a[a[O_A1] + NW * e], a[a[O_A2] + NW * e]
        rest = make_rep(a, a0, max(lo - 1, 0), INF if hi == INF else hi - 1)
        if rest < 0:
            return rest
        return make_cat(a, _known(a, a0, b), rest)
    if k == K_REC:
        return _known(a, a0, b)
    return 0


@numba.njit(cache=True)
def byte_partition(a, roots):
    """The bytes 0..255 partitioned by membership in every byte set reachable from roots (the BYTES
    nodes, each once): (int32 [256], each byte's class; int64 [classes], each class's first byte),
    classes numbered in the order of their first byte. Each set splits the classes found so far in
    two, in byte order, so the numbering holds."""
    cls = np.zeros(256, np.int32)
    split = np.empty((256, 2), np.int32)
    n = 1
    for x in reachable_bytes(a, roots):
        f = a[O_FIRST] + NW * x
        split[:n] = -1
        m = 0
        for b in range(256):
            inside = (a[f + (b >> 6)] >> (b & 63)) & 1
            k = split[cls[b], inside]
            if k < 0:
                k = split[cls[b], inside] = m
                m += 1
            cls[b] = k
        n = m
    reps = np.empty(n, np.int64)
    m = 0
    for b in range(256):
        if cls[b] == m:
            reps[m] = b
            m += 1
    return cls, reps


@numba.njit(cache=True)
def reachable_bytes(a, roots):
    """The BYTES nodes reachable from roots (each once)."""
    seen = np.zeros(a[H_N], np.uint8)
    stack = list(roots)
    out = []
    kids = a[O_KIDS]
    while len(stack):
        x = stack.pop()
        if seen[x]:
            continue
        seen[x] = 1
        k = kind_of(a, x)
        if k == K_BYTES:
            out.append(x)
        elif k == K_CAT:
            stack.append(a[a[O_A0] + NW * x])
            stack.append(a[a[O_A1] + NW * x])
        elif k == K_OR or k == K_AND:
            o = kids + a[a[O_A0] + NW * x]
            for j in range(a[a[O_A1] + NW * x]):
                stack.append(a[o + j])
        elif k == K_NOT or k == K_REP or k == K_REC:
            stack.append(a[a[O_A0] + NW * x])
    return np.array(out, dtype=np.int64) if len(out) else np.zeros(0, np.int64)


# ---------------------------------------------------------------------------------------- emptiness
@numba.njit(cache=True, inline="always")
def _live_known(a, x):
    """1 / 0 when x's liveness is known (structurally or memoised), else -1."""
    if x == 0:
        return 0
    if not _hasb(a, x) or _null(a, x):
        return 1
    v = a[a[O_LIVE] + NW * x]
    return 1 if v == LIVE_YES else 0 if v == LIVE_NO else -1


@numba.njit(cache=True)
def _set_chain(a, x, stop, v):
    """Memoise v for the concatenation x and the concatenations down its chain before stop."""
    while True:
        a[a[O_LIVE] + NW * x] = v
        t = a[a[O_A1] + NW * x]
        if t == stop or kind_of(a, t) != K_CAT or not _hasb(a, t) or _null(a, t) or _live_known(a, t) >= 0:
            return
        x = t


@numba.njit(cache=True)
def live(a, e):
    """Whether e's language is non-empty, decided structurally (Emptiness's rules), memoised in the
    live column: 1 or 0, or SEARCH - x when it rests on an intersection or complement x that only a
    search can decide (the caller searches it, records the answer in the column and asks again).
    Concatenations need every part live, unions one branch (parts and branches are decided in order
    and stop at the first that settles it)."""
    v = _live_known(a, e)
    if v >= 0:
        return v
    stack = np.empty(32, np.int64)
    stack[0] = e
    top = 1
    while top:
        x = stack[top - 1]
        if _live_known(a, x) >= 0:
            top -= 1
            continue
        k = kind_of(a, x)
        need = -1
        if k == K_CAT:
            dead = -1  # the part found empty
            h, t = a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]
            tail = t  # the tail of the last concatenation walked
            while True:
                if _hasb(a, h):
                    vh = _live_known(a, h)
                    if vh == 0:
                        dead = h
                        break
                    if vh < 0 and need < 0:
                        need = h
                if not _hasb(a, t) or _null(a, t):
                    break
                vt = _live_known(a, t)
                if vt == 0:
                    dead = t
                    break
                if vt == 1:
                    break
                if kind_of(a, t) != K_CAT:
                    if need < 0:
                        need = t
                    break
                h, t = a[a[O_A0] + NW * t], a[a[O_A1] + NW * t]
                tail = t
            if dead >= 0:  # every concatenation walked contains it
                _set_chain(a, x, tail, LIVE_NO)
                top -= 1
                continue
            if need < 0:
                _set_chain(a, x, tail, LIVE_YES)
                top -= 1
                continue
        elif k == K_OR:
            base, n = a[O_KIDS] + a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]
            found = False
            for j in range(n):
                v = _live_known(a, a[base + j])
                if v == 1:
                    found = True
                    break
                if v < 0 and need < 0:
                    need = a[base + j]
            if found:
                a[a[O_LIVE] + NW * x] = LIVE_YES
                top -= 1
                continue
            if need < 0:
                a[a[O_LIVE] + NW * x] = LIVE_NO
                top -= 1
                continue
        elif k == K_REP:
            v = _live_known(a, a[a[O_A0] + NW * x])
            if v >= 0:
                a[a[O_LIVE] + NW * x] = LIVE_YES if v == 1 else LIVE_NO
                top -= 1
                continue
            need = a[a[O_A0] + NW * x]
        elif k == K_NOT:
            f = a[O_FIRST] + NW * a[a[O_A0] + NW * x]
            if a[f] != -1 or a[f + 1] != -1 or a[f + 2] != -1 or a[f + 3] != -1:
                a[a[O_LIVE] + NW * x] = LIVE_YES  # some byte leaves the item: that byte then anything
                top -= 1
                continue
            return SEARCH - x
        else:
            return SEARCH - x
        if top == len(stack):
            stack = np.concatenate((stack, np.empty(top, np.int64)))
        stack[top] = need
        top += 1
    return _live_known(a, e)


# ---------------------------------------------------------------------------------------- byte classes
@numba.njit(cache=True)
def head_masks(a, e, max_heads, out):
    """e's head byte sets (DerivClasses's rule: the BYTES a derivative tests b against) into
    out[:, 0:4], distinct; returns their count, or -1 past max_heads (or a union or intersection
    with more than max_heads parts). A node met again is skipped (past the first few): its heads are
    in out already, and the expressions are DAGs whose shared parts (an intersection of big unions:
    a oneOf's branches against each other) made the walk visit them once per path."""
    n = 0
    stack = np.empty(32, np.int64)
    stack[0] = e
    top = 1
    pops = 0
    seen = {np.int64(-1)}
    while top:
        top -= 1
        x = stack[top]
        pops += 1
        if pops > 16:  # small walks (most) build no set
            if x in seen:
                continue
            seen.add(x)
        k = kind_of(a, x)
        if k == K_BYTES:
            f = a[O_FIRST] + NW * x
            dup = False
            for i in range(n):
                if out[i, 0] == a[f] and out[i, 1] == a[f + 1] and out[i, 2] == a[f + 2] and out[i, 3] == a[f + 3]:
                    dup = True
                    break
            if not dup:
                if n == max_heads:
                    return -1
                out[n, 0], out[n, 1], out[n, 2], out[n, 3] = a[f], a[f + 1], a[f + 2], a[f + 3]
                n += 1
            continue
        if k == K_CAT:  # every part up to the first non-nullable one
            h, t = a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]
            while True:
                stack, top = _push(stack, top, h)
                if not _null(a, h):
                    break
                if kind_of(a, t) != K_CAT:
                    stack, top = _push(stack, top, t)
                    break
                h, t = a[a[O_A0] + NW * t], a[a[O_A1] + NW * t]
        elif k == K_OR or k == K_AND:
            c = a[a[O_A1] + NW * x]
            if c > max_heads:
                return -1
            base = a[O_KIDS] + a[a[O_A0] + NW * x]
            for j in range(c):
                stack, top = _push(stack, top, a[base + j])
        elif k == K_NOT or k == K_REP or k == K_REC:
            stack, top = _push(stack, top, a[a[O_A0] + NW * x])
    return n


@numba.njit(cache=True)
def partition(a, e, within, max_heads, groups):
    """The bytes of ``within`` (four words) grouped so that bytes of a group give e one derivative,
    into groups[:, 0:4] (as DerivClasses.partition: split by each head set in turn); returns the
    count, or -1 when e has too many heads to track (the caller takes single bytes)."""
    heads = np.empty((max_heads, 4), np.int64)
    nh = head_masks(a, e, max_heads, heads)
    if nh < 0:
        return -1
    heads_ids = np.empty(0, np.int64)
    return _split_by(a, heads_ids, heads[:nh], within, groups)


@numba.njit(cache=True)
def _split(a, byte_nodes, within, groups):
    """within split by the sets of the BYTES nodes byte_nodes, into groups; returns the count."""
    return _split_by(a, byte_nodes, np.empty((0, 4), np.int64), within, groups)


@numba.njit(cache=True)
def _split_by(a, byte_nodes, masks, within, groups):
    """within split in turn by each set (the BYTES nodes' sets, then the rows of masks)."""
    n = 0
    if within[0] != 0 or within[1] != 0 or within[2] != 0 or within[3] != 0:
        groups[0, :] = within
        n = 1
    m4 = np.empty(4, np.int64)
    tmp = np.empty((256, 4), np.int64)
    for i in range(len(byte_nodes) + len(masks)):
        if i < len(byte_nodes):
            f = a[O_FIRST] + NW * byte_nodes[i]
            m4[0], m4[1], m4[2], m4[3] = a[f], a[f + 1], a[f + 2], a[f + 3]
        else:
            m4[:] = masks[i - len(byte_nodes)]
        m = 0  # split into tmp in order (inside, then the rest), as DerivClasses did in Python
        for j in range(n):
            i0, i1 = groups[j, 0] & m4[0], groups[j, 1] & m4[1]
            i2, i3 = groups[j, 2] & m4[2], groups[j, 3] & m4[3]
            empty = i0 == 0 and i1 == 0 and i2 == 0 and i3 == 0
            same = i0 == groups[j, 0] and i1 == groups[j, 1] and i2 == groups[j, 2] and i3 == groups[j, 3]
            if not empty and not same:
                tmp[m, 0], tmp[m, 1], tmp[m, 2], tmp[m, 3] = i0, i1, i2, i3
                tmp[m + 1, 0], tmp[m + 1, 1] = groups[j, 0] ^ i0, groups[j, 1] ^ i1
                tmp[m + 1, 2], tmp[m + 1, 3] = groups[j, 2] ^ i2, groups[j, 3] ^ i3
                m += 2
            else:
                tmp[m, :] = groups[j, :]
                m += 1
        groups[:m, :] = tmp[:m, :]
        n = m
    return n


# ---------------------------------------------------------------------------------------- searches
BUDGET, TIMEOUT = -5, -6  # search(): more states than the budget; past the deadline
# A clock compiled code can read: the CPU's time-stamp counter (constant-rate on x86-64). Elsewhere
# LLVM's cycle counter may trap in user mode, so searches there are bounded by states only.
HAS_CYCLES = platform.machine().lower() in ("x86_64", "amd64")
_rate: list[float] = []


@intrinsic
def _cycles(typingctx):
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")  # fmt: skip
        return builder.call(fn, [])

    return types.int64(), codegen


@numba.njit(cache=True)
def cycles_now():
    return _cycles()


def deadline_cycles(seconds_left: float | None) -> int:
    """The cycle count ``seconds_left`` from now (-1: no deadline, or no clock here)."""
    if seconds_left is None or not HAS_CYCLES:
        return -1
    if not _rate:  # cycles per second, measured once per process (2 ms)
        c0, t0 = cycles_now(), time.perf_counter()
        time.sleep(0.002)
        c1, t1 = cycles_now(), time.perf_counter()
        _rate.append(max((c1 - c0) / (t1 - t0), 1e6))
    return cycles_now() + int(max(seconds_left, 0.0) * _rate[0])


@numba.njit(cache=True)
def _peek(a, y):
    """live(y) within a search: 1 / 0, or -1 when only deriving y further tells (an intersection or
    complement not decided yet, here or inside y)."""
    k = kind_of(a, y)
    if k == K_AND:
        return _live_known(a, y)
    if k == K_NOT:
        f = a[O_FIRST] + NW * a[a[O_A0] + NW * y]
        if a[f] != -1 or a[f + 1] != -1 or a[f + 2] != -1 or a[f + 3] != -1:
            return 1
        return _live_known(a, y)
    r = live(a, y)
    return r if r >= 0 else -1


@numba.njit(_SIG_GUIDE, cache=True)
def _guide(a, x, by_parts, depth):
    """The search's order: min_len (greedy), or with ``by_parts`` twice the sum of an intersection's
    parts' min_len plus the state's depth (weighted A*). Each part must be finished, and the parts
    are often about different things (the rest of a document beside what each branch of a ``oneOf``
    excludes): by their largest bound alone, every state that advances a part other than the
    largest looks no better than the last, and a greedy search can wander through additional
    properties for ever; the depth makes such wandering cost. Either order is exact: an exhausted
    search still tries every class of every state reached."""
    if not by_parts:
        return a[a[O_MINLEN] + NW * x]
    if kind_of(a, x) != K_AND:
        return 2 * a[a[O_MINLEN] + NW * x] + depth
    base, n = a[O_KIDS] + a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]
    s = 0
    for j in range(n):
        s += a[a[O_MINLEN] + NW * a[base + j]]
    return 2 * s + depth


@numba.njit(cache=True)
def _bytes_to_try(a, x, reps, max_heads, groups, store, n_store):
    """Append to store one byte per derivative class of x among the bytes it can start with (and
    ``reps``, the bytes of the global classes), lowest first; returns (store, its new length)."""
    f = a[O_FIRST] + NW * x
    within = np.empty(4, np.int64)
    for w in range(4):
        within[w] = a[f + w] & reps[w]
    n = partition(a, x, within, max_heads, groups)
    start = n_store
    if n < 0:  # too many heads: one byte per global class
        for b in range(256):
            if (within[b >> 6] >> (b & 63)) & 1:
                store, n_store = _push(store, n_store, b)
        return store, n_store
    for j in range(n):
        for b in range(256):
            if (groups[j, b >> 6] >> (b & 63)) & 1:
                store, n_store = _push(store, n_store, b)
                break
    store[start:n_store] = np.sort(store[start:n_store])
    return store, n_store


@numba.njit(cache=True)
def search(a, e, budget, reps, has_reps, max_heads, deadline, by_parts):
    """Whether e (an intersection or complement) is non-empty: best-first over its derivatives, in the
    order of ``_guide`` (``by_parts``: which one), until a state known live; every class of
    every state reached is tried, so an exhausted search proves emptiness (Emptiness._search's
    rules). Memoises the answer for the states on the way; 1 / 0, BUDGET past ``budget`` states,
    TIMEOUT past ``deadline`` (cycles_now's clock; -1: none), or a status of the derivatives other than
    FULL; with the arena, which the search grows when it is full (the caller keeps the one returned).
    """
    groups = np.empty((256, 4), np.int64)
    if not has_reps:  # no global classes (a search while a schema is lowered): e's own byte classes,
        # which every derivative of e respects (its byte sets are unions and intersections of e's)
        n = _split(a, reachable_bytes(a, np.array([e], np.int64)), np.full(4, -1, np.int64), groups)
        reps = np.zeros(4, np.int64)
        for j in range(n):
            for b in range(256):
                if (groups[j, b >> 6] >> (b & 63)) & 1:
                    reps[b >> 6] |= np.int64(1) << np.int64(b & 63)
                    break
    parent = {e: np.int64(-1)}
    # (guide, order, state, resume index, start of its byte list in store or -1, the list's length,
    # the state's depth)
    heap = [(_guide(a, e, by_parts, 0), np.int64(0), e, np.int64(0), np.int64(-1), np.int64(0), np.int64(0))]
    store = np.empty(256, np.int64)
    n_store = 0
    while len(heap):
        h, _, x, i, start, count, g = heapq.heappop(heap)
        if start < 0:
            start = n_store
            store, n_store = _bytes_to_try(a, x, reps, max_heads, groups, store, n_store)
            count = n_store - start
        for k in range(i, count):
            y = deriv(a, x, store[start + k])
            while y == FULL:  # grow here and go on: a restart would walk every state again
                a = _grow(a)
                y = deriv(a, x, store[start + k])
            if y < 0:
                return y, a
            if y == 0 or y in parent:
                continue
            parent[y] = x
            r = _peek(a, y)
            if r == 1 or (r < 0 and _null(a, y)):
                while y != -1:  # the path to it is live
                    a[a[O_LIVE] + NW * y] = LIVE_YES
                    y = parent[y]
                return 1, a
            if r < 0:
                if len(parent) > budget:
                    return BUDGET, a
                if deadline >= 0 and not len(parent) & 255 and _cycles() > deadline:
                    return TIMEOUT, a
                my = _guide(a, y, by_parts, g + 1)
                heapq.heappush(heap, (my, np.int64(-len(parent)), y, np.int64(0), np.int64(-1), np.int64(0), g + 1))
                if my < h and k + 1 < count:  # progress: follow y, resume x later
                    heapq.heappush(heap, (h, np.int64(len(parent)), x, np.int64(k + 1), start, count, g))
                    break
    for x in parent:
        a[a[O_LIVE] + NW * x] = LIVE_NO
    return 0, a


# ---------------------------------------------------------------------------------------- DFA rows
@numba.njit(cache=True)
def deriv_classes(a, e, reps, class_of, max_heads, groups, uniq, index):
    """A DFA row of e: for every global byte class c (``class_of``: byte -> class; ``reps``: one byte
    per class, four words), its derivative uniq[index[c]] (0 where e cannot take the class). Bytes of
    one derivative class of e are derived once. Returns the number of distinct derivatives (uniq
    starts with 0, the dead one), or a status (FULL: grow and call again)."""
    f = a[O_FIRST] + NW * e
    within = np.empty(4, np.int64)
    for w in range(4):
        within[w] = a[f + w] & reps[w]
    n = partition(a, e, within, max_heads, groups)
    if n < 0:  # too many heads to track: every class on its own
        n = 0
        for b in range(256):
            if (within[b >> 6] >> (b & 63)) & 1:
                groups[n, :] = 0
                groups[n, b >> 6] = np.int64(1) << np.int64(b & 63)
                n += 1
    index[:] = 0
    uniq[0] = 0
    k = 1
    for j in range(n):
        first = -1
        for b in range(256):
            if (groups[j, b >> 6] >> (b & 63)) & 1:
                first = b
                break
        if first < 0:
            continue
        d = deriv(a, e, first)
        if d < 0:
            return d
        slot = 0
        if d != 0:
            slot = -1
            for t in range(1, k):
                if uniq[t] == d:
                    slot = t
                    break
            if slot < 0:
                uniq[k] = d
                slot = k
                k += 1
        for b in range(first, 256):
            if (groups[j, b >> 6] >> (b & 63)) & 1:
                index[class_of[b]] = slot
    return k


# ---------------------------------------------------------------------------------------- whole ASTs
# ExprPool.intern's program: one instruction per new AST node, children before parents, each
# ``op, n, args[n]``; an argument r >= 0 is an expression id, r < 0 the result of instruction -r-1.
OP_CHARS, OP_BYTES, OP_SEQ, OP_ALT, OP_AND, OP_REP, OP_NOT = range(7)
FACTOR_MIN = 4  # unions of this many items or more are left-factored (or_factored)
FACTOR_DEPTH = 200  # ... down to this many shared heads


@numba.njit(cache=True, inline="always")
def _ref(out, r):
    return r if r >= 0 else out[-r - 1]


@numba.njit(cache=True)
def intern_prog(a, prog, out, at):
    """Run an intern program (above) from where ``at`` says (the next instruction's offset in prog,
    its index): out[k] = the expression of instruction k. Returns the number of instructions, or a
    constructor's status (FULL: grow the arena and call again with the same ``at``, which then
    resumes at the instruction that found no room; interning makes its partial work found again,
    and the instructions done before keep their ids in the grown arena)."""
    i = at[0]
    k = at[1]
    scratch = np.empty(16, np.int64)
    while i < len(prog):
        op, n = prog[i], prog[i + 1]
        p = i + 2
        if n > len(scratch):
            scratch = np.empty(2 * n, np.int64)
        r = 0
        if op == OP_CHARS:  # the ASCII byte set, or'ed with the id of the wider characters' sequences
            r = make_bytes(a, prog[p], prog[p + 1], prog[p + 2], prog[p + 3])
            wide = prog[p + 4]
            if r >= 0 and wide >= 0:
                if r == 0:
                    r = wide
                else:
                    scratch[0], scratch[1] = r, wide
                    r = make_or(a, scratch, 2)
        elif op == OP_BYTES:
            r = make_bytes(a, prog[p], prog[p + 1], prog[p + 2], prog[p + 3])
        elif op == OP_SEQ:  # right-nested, built from the end
            r = 1
            for j in range(n - 1, -1, -1):
                r = make_cat(a, _ref(out, prog[p + j]), r)
                if r < 0:
                    break
        elif op == OP_ALT or op == OP_AND:
            for j in range(n):
                scratch[j] = _ref(out, prog[p + j])
            if op == OP_AND:
                r = make_and(a, scratch, n)
            elif n == 1:
                r = scratch[0]
            elif n >= FACTOR_MIN:
                r = or_factored(a, scratch, n)
            else:
                r = make_or(a, scratch, n)
        elif op == OP_REP:
            r = make_rep(a, _ref(out, prog[p]), prog[p + 1], prog[p + 2])
        elif op == OP_NOT:  # within valid UTF-8: any_string and not item
            r = make_not(a, _ref(out, prog[p]))
            if r >= 0:
                scratch[0], scratch[1] = prog[p + 1], r
                r = make_and(a, scratch, 2)
        if r < 0:
            return r
        out[k] = r
        k += 1
        i = p + n
        at[0], at[1] = i, k
    return k


@numba.njit(cache=True)
def or_factored(a, items, n):
    """The union of items[:n], left-factored: ``ab|ac`` -> ``a(b|c)`` (same language; a derivative
    of a big alternation of literals, an enum, then touches one branch per byte, not every word).
    The items' chains of heads (right-nested concatenations) go into a trie, at most FACTOR_DEPTH
    heads deep; each trie node is then the union of what ends there and its children's head
    followed by their union, built from the leaves up.

    A trie node that one item alone has reached keeps that item's rest of chain unexpanded (``rest``:
    the concatenation whose head the node is), and is expanded one head further when another item
    reaches it. Fully expanded, such a path of single children gives back the item's own chain (the
    concatenations are interned), so its value is the chain's tail as it is: the union is the same,
    but the work is the heads items share, not every head of every item (alternatives that are
    whole object bodies are hundreds of heads long and share a few)."""
    cap = 2 * n + 16
    t_head = np.empty(cap, np.int64)
    first_child = np.full(cap, -1, np.int64)
    next_sib = np.empty(cap, np.int64)
    first_leaf = np.full(cap, -1, np.int64)
    rest = np.full(cap, -1, np.int64)  # >= 0: the node is unexpanded, reached by item owner[node] alone
    owner = np.empty(cap, np.int64)
    next_leaf = np.empty(n, np.int64)
    leaf = np.empty(n, np.int64)
    t_head[0] = -1
    nt = 1
    child = {(np.int64(-1), np.int64(-1)): np.int64(-1)}
    for i in range(n):
        x = items[i]
        v = 0
        depth = 0
        while kind_of(a, x) == K_CAT and depth <= FACTOR_DEPTH:
            h = a[a[O_A0] + NW * x]
            key = (np.int64(v), h)
            if key in child:
                c = child[key]
                if rest[c] >= 0:  # a second item here: the first one's chain goes one head further
                    if nt == cap:
                        cap *= 2
                        t_head, first_child, next_sib = _resized(t_head, cap, 0), _resized(first_child, cap, -1), _resized(next_sib, cap, 0)
                        first_leaf, rest = _resized(first_leaf, cap, -1), _resized(rest, cap, -1)
                        owner = _resized(owner, cap, 0)
                    j, y = owner[c], a[a[O_A1] + NW * rest[c]]
                    rest[c] = -1
                    # (past FACTOR_DEPTH too: no later item goes that deep, and an unexpanded node's
                    # value is the chain, as a leaf would be)
                    if kind_of(a, y) == K_CAT:
                        g = a[a[O_A0] + NW * y]
                        t_head[nt], rest[nt], owner[nt] = g, y, j
                        next_sib[nt] = first_child[c]
                        first_child[c] = nt
                        child[(np.int64(c), g)] = nt
                        nt += 1
                    else:
                        leaf[j] = y
                        next_leaf[j] = first_leaf[c]
                        first_leaf[c] = j
            else:
                if nt == cap:
                    cap *= 2
                    t_head, first_child, next_sib = _resized(t_head, cap, 0), _resized(first_child, cap, -1), _resized(next_sib, cap, 0)
                    first_leaf, rest = _resized(first_leaf, cap, -1), _resized(rest, cap, -1)
                    owner = _resized(owner, cap, 0)
                c = nt
                nt += 1
                t_head[c], rest[c], owner[c] = h, x, i
                next_sib[c] = first_child[v]
                first_child[v] = c
                child[key] = c
                x = -1  # the item stays in the unexpanded node
                break
            v = c
            x = a[a[O_A1] + NW * x]
            depth += 1
        if x >= 0:
            leaf[i] = x
            next_leaf[i] = first_leaf[v]
            first_leaf[v] = i
    value = np.empty(nt, np.int64)
    parts = np.empty(16, np.int64)
    for v in range(nt - 1, -1, -1):  # a child's index is larger than its parent's
        if rest[v] >= 0:
            value[v] = a[a[O_A1] + NW * rest[v]]
            continue
        m = 0
        j = first_leaf[v]
        while j >= 0:
            parts, m = _push(parts, m, leaf[j])
            j = next_leaf[j]
        c = first_child[v]
        while c >= 0:
            r = make_cat(a, t_head[c], value[c])
            if r < 0:
                return r
            parts, m = _push(parts, m, r)
            c = next_sib[c]
        r = parts[0] if m == 1 else make_or(a, parts, m)
        if r < 0:
            return r
        value[v] = r
    return value[0]


@numba.njit(cache=True)
def _resized(xs, cap, fill):
    ys = np.full(cap, fill, np.int64)
    ys[: len(xs)] = xs
    return ys


# ---------------------------------------------------------------------------------------- counter clamping
CLAMP_KEY = 1 << 40  # derivative memo keys of clamp results: CLAMP_KEY + x * CLAMP_LIMITS + limit
BOUND_KEY = 1 << 41  # ... and of completion bounds: BOUND_KEY + x
CLAMP_LIMITS = 1 << 16  # limits clamp takes (past them ExprPool.clamp leaves e as it is)


@numba.njit(cache=True)
def completion_bound(a, e):
    """ExprPool.completion_bound for e free of AND/NOT (the caller checks): an upper bound of the bytes
    of the shortest completion from any point of e, memoised in the derivative memo; or FULL."""
    r = _memo_get(a, BOUND_KEY + e)
    if r >= 0:
        return r
    stack, top = _push(np.empty(64, np.int64), 0, e)
    while top:
        x = stack[top - 1]
        if _memo_get(a, BOUND_KEY + x) >= 0:
            top -= 1
            continue
        k = kind_of(a, x)
        mark = top
        if k == K_CAT or k == K_OR or k == K_REP:
            n, base = 1, a[O_A0] + NW * x  # a0 (and a1 next to it): a repeat's item, a concatenation's parts
            if k == K_CAT:
                n = 2
            elif k == K_OR:
                n, base = a[a[O_A1] + NW * x], a[O_KIDS] + a[a[O_A0] + NW * x]
            for j in range(n):
                y = a[base + j]
                if _memo_get(a, BOUND_KEY + y) < 0:
                    stack, top = _push(stack, top, y)
        if top > mark:
            continue
        if not _memo_room(a):
            return FULL
        v = 0
        if k == K_BYTES:
            v = 1
        elif k == K_REC:  # its completions nest without bound
            v = NEVER
        elif k == K_CAT:
            h, t = a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]
            v = max(_memo_get(a, BOUND_KEY + h) + a[a[O_MINLEN] + NW * t], _memo_get(a, BOUND_KEY + t))
        elif k == K_OR:
            base = a[O_KIDS] + a[a[O_A0] + NW * x]
            for j in range(a[a[O_A1] + NW * x]):
                v = max(v, _memo_get(a, BOUND_KEY + a[base + j]))
        elif k == K_REP:
            y, lo = a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]
            ml = a[a[O_MINLEN] + NW * y]
            v = max(lo * ml, _memo_get(a, BOUND_KEY + y) + max(lo - 1, 0) * ml)
        _memo_put(a, BOUND_KEY + x, min(v, NEVER))
        top -= 1
    return _memo_get(a, BOUND_KEY + e)


@numba.njit(cache=True)
def _length_free(a, x, limit, units):
    """ExprPool._length_free for the intersection x: (A, X) or (-1, -1); (FULL, FULL) when the memo
    is full."""
    if a[a[O_A1] + NW * x] != 2 or len(units) == 0:
        return -1, -1
    base = a[O_KIDS] + a[a[O_A0] + NW * x]
    for i in range(2):
        r, other = a[base + i], a[base + 1 - i]
        if kind_of(a, r) != K_REP or _hasb(a, other):
            continue
        item, lo, hi = a[a[O_A0] + NW * r], a[a[O_A1] + NW * r], a[a[O_A2] + NW * r]
        if lo != 0 or not _in_sorted(units, item):
            continue
        bound = completion_bound(a, other)
        if bound < 0:
            return FULL, FULL
        if hi == INF or hi >= limit + bound:
            return other, item
    return -1, -1


@numba.njit(cache=True, inline="always")
def _clamped(a, y, limit):
    """y clamped: y itself when its counters are within limit, else its memoised result (-1: not yet)."""
    if a[a[O_COUNTER] + NW * y] <= limit:
        return y
    return _memo_get(a, CLAMP_KEY + y * CLAMP_LIMITS + limit)


@numba.njit(cache=True)
def clamp(a, e, limit, units):
    """ExprPool.clamp (0 < limit < CLAMP_LIMITS; ``units`` the sorted character units): post-order
    over the nodes whose counters exceed limit, outside AND/NOT except a length-free intersection's
    A, memoised in the derivative memo per (node, limit); the id, or a negative status."""
    r = _clamped(a, e, limit)
    if r >= 0:
        return r
    stack, top = _push(np.empty(64, np.int64), 0, e)
    parts = np.empty(16, np.int64)
    while top:
        x = stack[top - 1]
        if _clamped(a, x, limit) >= 0:
            top -= 1
            continue
        k = kind_of(a, x)
        mark = top
        free, unit = -1, -1
        if k == K_AND:
            free, unit = _length_free(a, x, limit, units)
            if free == FULL:
                return FULL
            if free >= 0 and _clamped(a, free, limit) < 0:
                stack, top = _push(stack, top, free)
        elif k == K_REP:
            if _clamped(a, a[a[O_A0] + NW * x], limit) < 0:
                stack, top = _push(stack, top, a[a[O_A0] + NW * x])
        elif k == K_CAT:
            for y in (a[a[O_A0] + NW * x], a[a[O_A1] + NW * x]):
                if _clamped(a, y, limit) < 0:
                    stack, top = _push(stack, top, y)
        elif k == K_OR:
            base = a[O_KIDS] + a[a[O_A0] + NW * x]
            for j in range(a[a[O_A1] + NW * x]):
                if _clamped(a, a[base + j], limit) < 0:
                    stack, top = _push(stack, top, a[base + j])
        if top > mark:
            if top > MAX_DEPTH:
                return DEEP
            continue
        if not _memo_room(a):
            return FULL
        r = x
        if k == K_CAT:
            r = make_cat(a, _clamped(a, a[a[O_A0] + NW * x], limit), _clamped(a, a[a[O_A1] + NW * x], limit))
        elif k == K_OR:
            n = a[a[O_A1] + NW * x]
            base = a[O_KIDS] + a[a[O_A0] + NW * x]
            if len(parts) < n:
                parts = np.empty(2 * n, np.int64)
            for j in range(n):
                parts[j] = _clamped(a, a[base + j], limit)
            r = make_or(a, parts, n)
        elif k == K_REP:
            # within limit - 1 bytes at most ceil(limit / m) - 1 iterations of m bytes complete: past
            # that, an upper bound cannot bind and a lower bound is ceil(limit / m) as well as more
            lo, hi = a[a[O_A1] + NW * x], a[a[O_A2] + NW * x]
            item = _clamped(a, a[a[O_A0] + NW * x], limit)
            m = max(a[a[O_MINLEN] + NW * item], 1)
            if rep_span(lo, hi, m) > limit:
                hi = INF
                if rep_span(lo, INF, m) > limit:
                    lo = (limit - 1) // m + 1
            r = make_rep(a, item, lo, hi)
        elif k == K_AND and free >= 0:
            star = make_rep(a, unit, 0, INF)
            if star < 0:
                return star
            parts[0], parts[1] = _clamped(a, free, limit), star
            r = make_and(a, parts, 2)
        if r < 0:
            return r
        _memo_put(a, CLAMP_KEY + x * CLAMP_LIMITS + limit, r)
        top -= 1
    return _clamped(a, e, limit)
