"""ExprPool: hash-consed byte-level regular expressions with Brzozowski derivatives.

Every expression is an int id; structurally equal expressions (after simplification: flattened,
sorted, deduplicated unions and intersections, right-nested concatenation, merged byte sets) share
an id, so derivatives modulo these identities are finitely many and a derivative is a DFA state.
Counted repeats keep their counters (``r{0,100000}`` costs one state per position actually reached),
and intersection and complement are derivative-native, which makes ``allOf``/``not``/``oneOf`` exact
without product constructions up front.

Kinds: EMPTY (no string), EPS (empty string), BYTES (one byte of a 256-bit set), CAT (a then b),
OR / AND (sorted tuple of ids), NOT (complement over all byte strings: callers intersect with valid
UTF-8, see ``intern``), REP (item, min, max or -1 for unbounded).
"""

from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np

from guided.errors import GrammarError, LimitError
from guided.grammar.automata.emptiness import Emptiness, min_length
from guided.grammar.automata.utf8 import utf8_sequences
from guided.grammar.automata.work_bound import WorkBound
from guided.grammar.regex_ast import Alt, And, ByteSet, Chars, Node, Not, Repeat, Seq, any_string

__all__ = ["ExprPool", "EMPTY_ID", "EPS_ID", "intern_common"]

EMPTY_ID, EPS_ID = 0, 1
K_EMPTY, K_EPS, K_BYTES, K_CAT, K_OR, K_AND, K_NOT, K_REP = range(8)
INF = -1
ALL_BYTES = (1 << 256) - 1


_common: ExprPool | None = None  # what ExprPool.with_common copies; replaced, never modified
_common_lock = threading.Lock()


def intern_common(nodes) -> None:
    """Add AST nodes to the expressions every ``ExprPool.with_common()`` pool starts with.

    For languages nearly every grammar of a front end contains (JSON strings, numbers, whitespace
    around punctuation): a compile then copies their expressions (same ids, found by structural
    equality in ``intern``) instead of building them again. The languages are unchanged; only which
    ids the expressions get. Thread-safe: the shared pool is replaced by an extended copy.
    """
    global _common
    with _common_lock:
        pool = ExprPool() if _common is None else _common.fork()
        for node in nodes:
            pool.intern(node)
        _common = pool


class ExprPool:
    """Interned expressions; ``deriv(e, byte)`` and ``nullable[e]`` define the lazy DFA."""

    def __init__(self, max_exprs: int = 2_000_000):
        self.max_exprs = max_exprs
        self.kind: list[int] = []
        self.args: list = []
        self.nullable: list[bool] = []
        self.has_bool: list[bool] = []  # contains AND/NOT: emptiness is not syntactic
        self.first: list[int] = []  # 256-bit mask: bytes whose derivative may be non-empty
        self.counter: list[int] = []  # largest finite repeat bound inside (clamping is a no-op below it)
        self.min_len: list[int] = []  # a lower bound on the length of e's strings (guides emptiness searches)
        self.char_class: dict[int, tuple] = {}  # ids that match exactly one character -> class key
        self._or_index: dict[int, dict] = {}  # big unions: byte -> children that can start with it
        self._ids: dict = {}
        self._interned: dict[Node, int] = {}  # AST node (structural equality) -> its expression
        self._wide: dict[tuple, int] = {}  # codepoint ranges >= 0x80 -> their UTF-8 expression
        self._deriv: dict[tuple[int, int], int] = {}
        self.emptiness = Emptiness(self)
        self.bound = WorkBound()  # deadline of the lazy work in progress (masks, accepts)
        self._work = 0
        self.reps: list[int] | None = None  # one byte per global byte class, set by the DFA
        self._make(K_EMPTY, None, False, False)
        self._make(K_EPS, None, True, False)

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def with_common(cls) -> ExprPool:
        """A new pool that starts with the process's common expressions (see ``intern_common``)."""
        common = _common
        return cls() if common is None else common.fork()

    def __getstate__(self):
        """Everything but the AST memo (rebuilt as nodes are interned again) and the thread-local bound:
        an on-disk grammar cache loads a pool without building any AST node."""
        state = dict(self.__dict__)
        state["_interned"] = {}
        del state["bound"]
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self.bound = WorkBound()

    def fork(self) -> ExprPool:
        """A new pool holding this pool's expressions under the same ids, with its interning memos
        but none of the caches of lazy work (derivatives, emptiness, classes)."""
        new = ExprPool(self.max_exprs)
        for name in ("kind", "args", "nullable", "has_bool", "first", "counter", "min_len"):
            setattr(new, name, list(getattr(self, name)))
        new.char_class = dict(self.char_class)
        new._ids = dict(self._ids)
        new._interned = dict(self._interned)
        new._wide = dict(self._wide)
        return new

    def _make(self, kind: int, args, nullable: bool, has_bool: bool) -> int:
        key = (kind, args)
        i = self._ids.get(key)
        if i is None:
            i = len(self.kind)
            if i >= self.max_exprs:
                raise LimitError(f"regex automaton exceeded {self.max_exprs} expressions")
            self._ids[key] = i
            self.kind.append(kind)
            self.args.append(args)
            self.nullable.append(nullable)
            self.has_bool.append(has_bool)
            self.first.append(self._first(kind, args))
            self.counter.append(self._counter(kind, args))
            self.min_len.append(min_length(self.min_len, kind, args, nullable))
        return i

    def _counter(self, kind: int, args) -> int:
        if kind in (K_CAT, K_OR, K_AND):
            return max(self.counter[x] for x in args)
        if kind == K_NOT:
            return self.counter[args]
        if kind == K_REP:
            return max(self.counter[args[0]], args[1], args[2])
        return 0

    def _first(self, kind: int, args) -> int:
        if kind == K_BYTES:
            return args
        if kind == K_CAT:
            a, b = args
            return self.first[a] | self.first[b] if self.nullable[a] else self.first[a]
        if kind == K_OR:
            m = 0
            for x in args:
                m |= self.first[x]
            return m
        if kind == K_AND:
            m = ALL_BYTES
            for x in args:
                m &= self.first[x]
            return m
        if kind == K_NOT:
            return ALL_BYTES
        if kind == K_REP:
            return self.first[args[0]]
        return 0

    # ------------------------------------------------------------------ smart constructors
    def bytes_(self, mask: int) -> int:
        return self._make(K_BYTES, mask, False, False) if mask else EMPTY_ID

    def cat(self, a: int, b: int) -> int:
        if a == EMPTY_ID or b == EMPTY_ID:
            return EMPTY_ID
        if a == EPS_ID:
            return b
        if b == EPS_ID:
            return a
        if self.kind[a] != K_CAT:
            return self._cat2(a, b)
        # Right-nest: (x y) b = x (y b). a is itself right-nested, so this walks a's chain of heads and
        # rebuilds it in front of b, iteratively (a long concatenation must not cost stack depth).
        heads = []
        while self.kind[a] == K_CAT:
            x, a = self.args[a]
            heads.append(x)
        r = self._cat2(a, b)
        for x in reversed(heads):
            r = self._cat2(x, r)
        return r

    def _cat2(self, a: int, b: int) -> int:
        """cat(a, b) for a that is not a concatenation."""
        if a == EMPTY_ID or b == EMPTY_ID:
            return EMPTY_ID
        if a == EPS_ID:
            return b
        if b == EPS_ID:
            return a
        return self._make(
            K_CAT, (a, b), self.nullable[a] and self.nullable[b], self.has_bool[a] or self.has_bool[b]
        )

    def cat_all(self, items) -> int:
        out = EPS_ID
        for e in reversed(list(items)):
            out = self.cat(e, out)
        return out

    def or_(self, items) -> int:
        flat: set[int] = set()
        mask = 0
        for e in items:
            k = self.kind[e]
            if k == K_OR:
                for x in self.args[e]:
                    if self.kind[x] == K_BYTES:
                        mask |= self.args[x]
                    else:
                        flat.add(x)
            elif k == K_BYTES:
                mask |= self.args[e]
            elif k != K_EMPTY:
                flat.add(e)
        if mask:
            flat.add(self.bytes_(mask))
        if not flat:
            return EMPTY_ID
        if len(flat) == 1:
            return flat.pop()
        t = tuple(sorted(flat))
        return self._make(K_OR, t, any(self.nullable[x] for x in t), any(self.has_bool[x] for x in t))

    def and_(self, items) -> int:
        flat: set[int] = set()
        for e in items:
            if self.kind[e] == K_AND:
                flat.update(self.args[e])
            elif e == EMPTY_ID:
                return EMPTY_ID
            elif not (self.kind[e] == K_NOT and self.args[e] == EMPTY_ID):  # drop "everything"
                flat.add(e)
        if not flat:
            return self.not_(EMPTY_ID)
        if EPS_ID in flat:
            return EPS_ID if all(self.nullable[x] for x in flat) else EMPTY_ID
        if any(self.kind[x] == K_NOT and self._covers(self.args[x], flat) for x in flat):
            return EMPTY_ID  # x and not (x or ...)
        masks = [self.args[x] for x in flat if self.kind[x] == K_BYTES]
        if masks:
            m = masks[0]
            for x in masks[1:]:
                m &= x
            flat = {x for x in flat if self.kind[x] != K_BYTES}
            if not m:
                return EMPTY_ID
            flat.add(self.bytes_(m))
        if len(flat) == 1:
            return flat.pop()
        t = tuple(sorted(flat))
        return self._make(K_AND, t, all(self.nullable[x] for x in t), True)

    def _covers(self, c: int, flat: set[int]) -> bool:
        """Whether c contains a member of flat syntactically (c is one, or a union with one)."""
        return c in flat or (self.kind[c] == K_OR and any(y in flat for y in self.args[c]))

    def or_factored(self, items, depth: int = 0) -> int:
        """The union, left-factored: ``ab|ac`` -> ``a(b|c)``. Same language; a derivative of a big
        alternation of literals (an enum) then touches one branch per byte, not every word."""
        if depth > 200:  # a very long shared prefix: stop factoring (recursion depth)
            return self.or_(items)
        groups: dict[int, list[int]] = {}
        parts = []
        for e in dict.fromkeys(items):  # distinct, in order
            if self.kind[e] == K_CAT:
                head, tail = self.args[e]
                groups.setdefault(head, []).append(tail)
            else:
                parts.append(e)
        for h, tails in groups.items():
            parts.append(self.cat(h, tails[0] if len(tails) == 1 else self.or_factored(tails, depth + 1)))
        return self.or_(parts)

    def not_(self, a: int) -> int:
        if self.kind[a] == K_NOT:
            return self.args[a]
        return self._make(K_NOT, a, not self.nullable[a], True)

    def rep(self, a: int, lo: int, hi: int) -> int:
        if hi == 0 or a == EPS_ID:
            return EPS_ID
        if a == EMPTY_ID:
            return EPS_ID if lo == 0 else EMPTY_ID
        if self.nullable[a]:
            lo = 0
        if lo == 1 and hi == 1:
            return a
        if self.kind[a] == K_REP and lo == 0 and hi == INF:
            x, lo2, hi2 = self.args[a]
            if lo2 <= 1 and hi2 == INF:  # (x{0|1,})* = x*
                return self.rep(x, 0, INF)
        return self._make(K_REP, (a, lo, hi), lo == 0 or self.nullable[a], self.has_bool[a])

    # ------------------------------------------------------------------ derivatives
    def deriv(self, e: int, b: int) -> int:
        """The derivative of e by byte b (memoized)."""
        if not (self.first[e] >> b) & 1:
            return EMPTY_ID
        key = (e, b)
        r = self._deriv.get(key)
        if r is None:
            self._work += 1
            if not self._work & 1023:
                self.bound.check()
            try:
                r = self._deriv_uncached(e, b)
            except RecursionError:
                raise LimitError(
                    "regex nesting too deep: computing a derivative exceeded Python's recursion limit"
                ) from None
            self._deriv[key] = r
        return r

    def _deriv_uncached(self, e: int, b: int) -> int:
        k, a = self.kind[e], self.args[e]
        if k == K_BYTES:
            return EPS_ID if (a >> b) & 1 else EMPTY_ID
        if k == K_CAT:
            # d(x y) = d(x) y | d(y) when x is nullable: follow the chain of nullable heads iteratively
            # (one union of every step; or_ flattens, so this is the same id as the nested unions).
            parts = []
            while True:
                x, y = a
                parts.append(self.cat(self.deriv(x, b), y))
                if not self.nullable[x]:
                    break
                if self.kind[y] != K_CAT or not (self.first[y] >> b) & 1:
                    parts.append(self.deriv(y, b))
                    break
                a = self.args[y]
            return parts[0] if len(parts) == 1 else self.or_(parts)
        if k == K_OR:
            if len(a) > 8:
                a = self._or_children(e).get(b, ())
            return self.or_([self.deriv(x, b) for x in a])
        if k == K_AND:
            return self.and_([self.deriv(x, b) for x in a])
        if k == K_NOT:
            return self.not_(self.deriv(a, b))
        if k == K_REP:
            x, lo, hi = a
            rest = self.rep(x, max(lo - 1, 0), INF if hi == INF else hi - 1)
            return self.cat(self.deriv(x, b), rest)
        return EMPTY_ID

    def _or_children(self, e: int) -> dict[int, tuple[int, ...]]:
        index = self._or_index.get(e)
        if index is None:
            lists: dict[int, list[int]] = {}
            for x in self.args[e]:
                m = self.first[x]
                while m:
                    low = m & -m
                    lists.setdefault(low.bit_length() - 1, []).append(x)
                    m ^= low
            # tuples of ints, not lists: the collector stops tracking them (and then the dict), so
            # a server's cached grammars do not add these to every full collection's walk
            index = self._or_index[e] = {b: tuple(xs) for b, xs in lists.items()}
        return index

    # ------------------------------------------------------------------ counter clamping
    def clamp(self, e: int, limit: int) -> int:
        """e with repeat counters above ``limit`` clamped (outside AND/NOT).

        A non-nullable item consumes a byte per iteration, so within ``limit - 1`` bytes counters past
        ``limit`` cannot be told apart: the clamped expression allows exactly the same tokens.
        """
        if self.counter[e] <= limit:
            return e
        memo = self.__dict__.setdefault("_clamp_memo", {})
        r = memo.get(e)
        if r is not None:
            return r
        counter = self.counter

        def done(x: int) -> int:
            return x if counter[x] <= limit else memo[x]

        # Post-order over the sub-expressions that need clamping, with an explicit stack (long
        # concatenation chains and deep nesting must not cost Python stack depth).
        stack = [e]
        while stack:
            x = stack[-1]
            if x in memo:
                stack.pop()
                continue
            k, a = self.kind[x], self.args[x]
            kids = a if k in (K_CAT, K_OR) else (a[0],) if k == K_REP else ()
            pending = [y for y in kids if counter[y] > limit and y not in memo]
            if pending:
                stack.extend(reversed(pending))
                continue
            stack.pop()
            if k == K_CAT:
                r = self.cat(done(a[0]), done(a[1]))
            elif k == K_OR:
                r = self.or_([done(y) for y in a])
            elif k == K_REP:
                y, lo, hi = a
                if lo > limit:
                    lo, hi = limit, INF
                elif hi > limit:
                    hi = INF
                r = self.rep(done(y), lo, hi)
            else:
                r = x
            memo[x] = r
        return memo[e]

    # ------------------------------------------------------------------ emptiness
    def is_live(self, e: int, budget: int = 200_000) -> bool:
        """Whether some byte string leads from e to acceptance (e's language is non-empty).

        Decided structurally; only intersections/complements are searched, each on its own
        derivatives (see Emptiness), with at most ``budget`` states per search (LimitError past it).
        """
        return self.emptiness.is_live(e, budget)

    def classes_of(self, e: int):
        cache = getattr(self, "_cls_cache", None)
        if cache is None:
            cache = self._cls_cache = {}
        r = cache.get(e)
        if r is None:
            r = byte_classes(self.byte_masks(e))
            cache[e] = r
        return r

    def byte_masks(self, *roots: int) -> set[int]:
        """All byte sets occurring in the expressions (one walk: shared sub-expressions once)."""
        out: set[int] = set()
        seen: set[int] = set()
        stack = list(roots)
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            k, a = self.kind[x], self.args[x]
            if k == K_BYTES:
                out.add(a)
            elif k in (K_CAT, K_OR, K_AND):
                stack.extend(a)
            elif k == K_NOT:
                stack.append(a)
            elif k == K_REP:
                stack.append(a[0])
        return out

    # ------------------------------------------------------------------ from the AST
    def intern(self, node: Node) -> int:
        """The expression of an AST node, over bytes (UTF-8 for Chars; Not within valid UTF-8).

        Memoized for the pool's lifetime by structural equality (nodes are hashable with a cached
        hash): the terminals of a grammar share most of their subtrees (JSON strings, numbers, the
        schema-free value), often as equal copies rather than the same objects, and each is
        interned once.
        """
        memo = self._interned
        r = memo.get(node)
        if r is not None:
            return r
        # This call's nodes by identity (the tree keeps them alive), so a node equal to one interned
        # before is compared structurally once, not at every use. Post-order with an explicit
        # stack: children left to right, each shared subtree once; the AST's nesting depth costs no
        # Python stack.
        done: dict[int, int] = {}
        stack: list[tuple[Node, bool]] = [(node, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in done:
                continue
            if expanded:
                r = done[id(n)] = self._intern_one(n, done)
                memo[n] = r
                continue
            r = memo.get(n)
            if r is not None:
                done[id(n)] = r
                continue
            stack.append((n, True))
            if isinstance(n, (Seq, Alt, And)):
                stack.extend((x, False) for x in reversed(n.items) if id(x) not in done)
            elif isinstance(n, (Repeat, Not)):
                stack.append((n.item, False))
        return done[id(node)]

    def _intern_one(self, n: Node, done: dict[int, int]) -> int:
        """The expression of one node whose children are interned already (``done``, by id)."""
        if isinstance(n, Chars):
            return self._chars(n.ranges)
        if isinstance(n, ByteSet):
            r = self.bytes_(_mask(n.ranges))
            if r != EMPTY_ID:
                self.char_class.setdefault(r, ("bytes", tuple(n.ranges)))
            return r
        if isinstance(n, Seq):
            return self.cat_all([done[id(x)] for x in n.items])
        if isinstance(n, Alt):
            items = [done[id(x)] for x in n.items]
            return self.or_factored(items) if len(items) >= 4 else self.or_(items)
        if isinstance(n, Repeat):
            return self.rep(done[id(n.item)], n.min, INF if n.max is None else n.max)
        if isinstance(n, And):
            return self.and_([done[id(x)] for x in n.items])
        if isinstance(n, Not):
            return self.and_([self.intern(any_string()), self.not_(done[id(n.item)])])
        raise GrammarError(f"not a regex AST node: {n!r}")

    def _chars(self, ranges) -> int:
        """One character of the codepoint ranges: a byte set for the ASCII part, or'ed with the
        UTF-8 sequences of the rest. The rest is memoized per pool (classes like ``[^"\\]`` or a
        negated key character differ in ASCII only) and its byte sequences per process."""
        narrow, wide = _split_ascii(ranges)
        parts = [self.bytes_(narrow)] if narrow else []
        if wide:
            w = self._wide.get(wide)
            if w is None:
                seqs = _wide_sequences(wide)
                w = self._wide[wide] = self.or_([self.cat_all([self.bytes_(m) for m in q]) for q in seqs])
            parts.append(w)
        r = self.or_(parts) if len(parts) != 1 else parts[0]
        if r != EMPTY_ID:
            self.char_class.setdefault(r, ("chars", tuple(ranges)))
        return r


def _split_ascii(ranges) -> tuple[int, tuple]:
    """(mask of the ASCII codepoints in ranges, the ranges at or above 0x80)."""
    narrow, wide = 0, []
    for lo, hi in ranges:
        if lo < 0x80:
            top = min(hi, 0x7F)
            narrow |= ((1 << (top - lo + 1)) - 1) << lo
        if hi >= 0x80:
            wide.append((max(lo, 0x80), hi))
    return narrow, tuple(wide)


@lru_cache(maxsize=4096)
def _wide_sequences(wide: tuple) -> tuple[tuple[int, ...], ...]:
    """The UTF-8 byte-set sequences (each byte range as a 256-bit mask) of codepoint ranges >= 0x80."""
    return tuple(tuple(_mask(((a, b),)) for a, b in q) for lo, hi in wide for q in utf8_sequences(lo, hi))


def _mask(ranges) -> int:
    m = 0
    for lo, hi in ranges:
        m |= ((1 << (hi - lo + 1)) - 1) << lo
    return m


def byte_classes(masks) -> tuple[list[int], list[int]]:
    """Partition bytes 0..255 by membership in the given sets: (class of each byte, one byte per class)."""
    sig: dict[bytes, int] = {}
    cls = [0] * 256
    reps: list[int] = []
    for b, key in enumerate(_membership_rows(masks)):
        c = sig.get(key)
        if c is None:
            c = sig[key] = len(reps)
            reps.append(b)
        cls[b] = c
    return cls, reps


def _membership_rows(masks) -> list[bytes]:
    """Per byte 0..255, its membership in each set as packed bits (equal rows: equal membership)."""
    mlist = list(masks)
    if not mlist:
        return [b""] * 256
    raw = np.frombuffer(b"".join(m.to_bytes(32, "little") for m in mlist), dtype=np.uint8)
    bits = np.unpackbits(raw.reshape(len(mlist), 32), axis=1, bitorder="little")  # [sets, 256]
    rows = np.packbits(bits.T, axis=1)  # [256, ceil(sets / 8)]
    return [row.tobytes() for row in rows]
