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
import weakref
from functools import lru_cache

import numpy as np

from guided.errors import GrammarError, LimitError
from guided.grammar.automata import expr_core as core
from guided.grammar.automata.derivative_classes import MAX_HEADS
from guided.grammar.automata.emptiness import Emptiness
from guided.grammar.automata.utf8 import utf8_sequences
from guided.grammar.automata.work_bound import WorkBound
from guided.grammar.regex_ast import (
    Alt,
    And,
    ByteSet,
    Chars,
    Cofinite,
    Let,
    Node,
    Not,
    Recursive,
    Repeat,
    Seq,
    TrieLeft,
    any_string,
)

__all__ = ["ExprPool", "EMPTY_ID", "EPS_ID", "intern_common", "class_size"]

EMPTY_ID, EPS_ID = 0, 1
K_EMPTY, K_EPS, K_BYTES, K_CAT, K_OR, K_AND, K_NOT, K_REP, K_REC = range(9)
INF = -1
ALL_BYTES = (1 << 256) - 1


_common: ExprPool | None = None  # what ExprPool.with_common copies; replaced, never modified
# per-expression memos kept in a pool's __dict__ (here and by ``slice_forms``): a fork copies them (a
# copied answer about a character class stays true: the fork's new classes could only widen it); and
# ``_intern_trie``'s parts, (function, argument) -> expression, which hold as ``_interned`` does
_MEMOS = ("_slice_memo", "_form_memo", "_class_in_memo", "_finite_memo", "_trie_parts")
_common_lock = threading.Lock()


def intern_common(nodes, char_units=(), trie_parts=()) -> None:
    """Add AST nodes to the expressions every ``ExprPool.with_common()`` pool starts with.

    For languages nearly every grammar of a front end contains (JSON strings, numbers, whitespace
    around punctuation): a compile then copies their expressions (same ids, found by structural
    equality in ``intern``) instead of building them again. The languages are unchanged; only which
    ids the expressions get. Thread-safe: the shared pool is replaced by an extended copy.

    ``char_units``: nodes X that count characters, for ``clamp``: the front end promises that in any
    intersection of ``X{lo,hi}`` with other parts, those parts' strings are sequences of X (JSON
    Schema's ``maxLength`` beside a ``pattern``, both over the same encoded characters).
    Each char unit's widest character class (``widest_class_in``: a search over every class the
    pool knows) is found here once, and every fork starts knowing it.

    ``trie_parts``: pairs ``(f, x)`` of a ``TrieLeft``'s ``char`` or ``other`` function and an
    argument, whose node ``f(x)`` most trie nodes need: every fork starts knowing its expression.
    """
    global _common
    with _common_lock:
        pool = ExprPool() if _common is None else _common.fork()
        for node in nodes:
            pool.intern(node)
        parts = pool.__dict__.setdefault("_trie_parts", {})
        for f, x in trie_parts:
            parts[(f, x)] = pool.intern(f(x))
        pool.char_units = tuple(sorted({*pool.char_units, *(pool.intern(x) for x in char_units)}))
        for x in pool.char_units:
            pool.widest_class_in(x)
        _common = pool


def class_size(key: tuple) -> int:
    """How many characters (or bytes) a ``char_class`` key holds."""
    return sum(hi - lo + 1 for lo, hi in key[1])


class ExprPool:
    """Interned expressions; ``deriv(e, byte)`` and ``nullable[e]`` define the lazy DFA.

    The nodes, their interning table and the derivative memo live in compiled code
    (``expr_core``, one int64 arena); the columns below read it: ``kind[e]``, ``args[e]`` (BYTES:
    its 256-bit set; CAT: (head, tail); OR/AND: sorted children; NOT: the item; REP: (item, min,
    max or -1)), ``nullable``, ``has_bool`` (contains AND/NOT: emptiness is not syntactic),
    ``first`` (256-bit set of the bytes whose derivative may be non-empty), ``counter`` (largest
    finite repeat bound inside: clamping is a no-op below it) and ``min_len`` (a lower bound on the
    length of e's strings, guiding emptiness searches).
    """

    spent = False  # True once max_exprs was reached: no new expression fits (set where it is raised)

    def __init__(self, max_exprs: int = 2_000_000):
        self.max_exprs = max_exprs
        self.arena = core.new_arena(max_exprs=max_exprs)
        self.char_class: dict[int, tuple] = {}  # ids that match exactly one character -> class key
        self._interned: dict[Node, int] = {}  # AST node (structural equality) -> its expression
        self._wide: dict[tuple, int] = {}  # codepoint ranges >= 0x80 -> their UTF-8 expression
        self.reps: list[int] | None = None  # one byte per global byte class, set by the DFA
        self.char_units: tuple[int, ...] = ()  # see intern_common
        # expressions interned from a ``Cofinite`` union -> its body's (a repeat naming the class of
        # which every string begins one of the union's: ``slice_forms`` reads it)
        self.cofinite: dict[int, int] = {}
        self._setup()

    def _setup(self) -> None:
        """What is not pickled: the columns, the lock, the bound, the emptiness memo. They refer to the
        pool weakly: a pool (and the grammar holding it) is then free of reference cycles, and is freed
        as soon as it is dropped, without a pass of the cyclic garbage collector."""
        self._lock = threading.Lock()
        me = weakref.proxy(self)
        self.kind = _Column(me, core.O_KIND)
        self.nullable = _Column(me, core.O_NULL, bool)
        self.has_bool = _Column(me, core.O_BOOL, bool)
        self.counter = _Column(me, core.O_COUNTER)
        self.min_len = _Column(me, core.O_MINLEN)
        self.args = _Args(me)
        self.first = _First(me)
        self.emptiness = Emptiness(me)
        self.bound = WorkBound()  # deadline of the lazy work in progress (masks, accepts)
        self._checked = int(self.arena[core.H_WORK])  # derivatives counted at the last bound check

    def __len__(self) -> int:
        return int(self.arena[core.H_N])

    @property
    def _work(self) -> int:
        """Derivatives computed so far (memo misses)."""
        return int(self.arena[core.H_WORK])

    @classmethod
    def with_common(cls) -> ExprPool:
        """A new pool that starts with the process's common expressions (see ``intern_common``)."""
        common = _common
        return cls() if common is None else common.fork()

    _TRANSIENT = ("_lock", "kind", "nullable", "has_bool", "counter", "min_len", "args", "first", "emptiness",
                  "bound", "_checked", "_units", "_cls_cache", "spent", "_trie_parts")  # fmt: skip

    def __getstate__(self):
        """The arena and the Python-side tables, without the AST memo (rebuilt as nodes are interned
        again) and what ``_setup`` makes: an on-disk grammar cache loads a pool without building
        any AST node. The emptiness memo is lazy work: a loaded pool decides it again."""
        state = {k: v for k, v in self.__dict__.items() if k not in self._TRANSIENT}
        state["_interned"] = {}
        state["arena"] = _arena_copy(self.arena)  # its unused regions are unwritten memory: zeros instead
        return state

    def __setstate__(self, state) -> None:
        self.char_units = ()
        self.__dict__.update(state)
        self._setup()

    def fork(self) -> ExprPool:
        """A new pool holding this pool's expressions under the same ids, with its interning memos."""
        new = ExprPool.__new__(ExprPool)
        new.max_exprs = self.max_exprs
        new.arena = _arena_fork(self.arena)
        new.char_class = dict(self.char_class)
        new.cofinite = dict(self.cofinite)
        new._interned = dict(self._interned)
        new._wide = dict(self._wide)
        new.reps = None
        new.char_units = self.char_units
        for name in _MEMOS:  # answers about expressions, which the fork holds under the same ids
            if name in self.__dict__:
                new.__dict__[name] = dict(self.__dict__[name])
        new._setup()
        return new

    def _run(self, fn, *args) -> int:
        """fn(arena, *args) for a constructor or a derivative: grows the arena and calls again while
        a region is full (interning makes the retry give the same ids)."""
        with self._lock:
            while True:
                r = fn(self.arena, *args)
                if r >= 0:
                    return r
                self._grow_or_raise(r)

    def call(self, fn, *args) -> int:
        """fn(arena, *args) once under the arena's lock, its status (negative) left to the caller, the
        work bound checked as ``deriv`` checks it."""
        with self._lock:
            r = fn(self.arena, *args)
        if int(self.arena[core.H_WORK]) - self._checked >= 1024:
            self._checked = int(self.arena[core.H_WORK])
            self.bound.check()
        return r

    # ------------------------------------------------------------------ character classes
    def class_within(self, cx: int, x: int) -> bool:
        """Whether the character class cx (an expression of ``char_class``) is contained in the union x
        (flattened by or_)."""
        children = set(self.args[x])
        bytes_mask = sum(self.args[y] for y in children if self.kind[y] == K_BYTES)
        parts = self.args[cx] if self.kind[cx] == K_OR else (cx,)
        return all((self.args[y] & ~bytes_mask) == 0 if self.kind[y] == K_BYTES else y in children for y in parts)

    def widest_class_in(self, x: int) -> int | None:
        """The widest character class (its expression, of ``char_class``) whose language is contained
        in the union x (memoised: a search over every class the pool knows)."""
        memo = self.__dict__.setdefault("_class_in_memo", {})
        if x in memo:
            return memo[x]
        best, size = None, -1
        for cx, key in self.char_class.items() if self.kind[x] == K_OR else ():
            n = class_size(key)
            if n > size and self.class_within(cx, x):
                best, size = cx, n
        memo[x] = best
        return best

    def try_hold(self) -> bool:
        """Take the arena for compiled code that adds to it outside ``_run`` (a mask walk's lexer
        steps), if no other thread has it: True when taken (then ``let_go`` after)."""
        return self._lock.acquire(blocking=False)

    def let_go(self) -> None:
        self._lock.release()

    def _grow_or_raise(self, status: int) -> None:
        """After a compiled call answered ``status`` (< 0): grow the arena (FULL) or raise the limit."""
        if status == core.FULL:
            self.arena = core.grow(self.arena)
        elif status == core.LIMIT:
            self.spent = True  # no room for a new expression: the grammar is spent (AutomatonQueries.spent)
            raise LimitError(f"regex automaton exceeded {self.max_exprs} expressions")
        else:
            raise LimitError(f"regex nesting too deep: a derivative exceeded {core.MAX_DEPTH} pending parts")

    # ------------------------------------------------------------------ smart constructors
    def bytes_(self, mask: int) -> int:
        return self._run(core.make_bytes, *core.words(mask).tolist()) if mask else EMPTY_ID

    def cat(self, a: int, b: int) -> int:
        if a == EMPTY_ID or b == EMPTY_ID:
            return EMPTY_ID
        if a == EPS_ID:
            return b
        if b == EPS_ID:
            return a
        return self._run(core.make_cat, a, b)

    def cat_all(self, items) -> int:
        out = EPS_ID
        for e in reversed(list(items)):
            out = self.cat(e, out)
        return out

    def or_(self, items) -> int:
        xs = np.fromiter(items, dtype=np.int64)
        if len(xs) == 1:
            return int(xs[0])
        return self._run(core.make_or, xs, len(xs))

    def and_(self, items) -> int:
        xs = np.fromiter(items, dtype=np.int64)
        return self._run(core.make_and, xs, len(xs))

    def not_(self, a: int) -> int:
        return self._run(core.make_not, a)

    def rep(self, a: int, lo: int, hi: int) -> int:
        return self._run(core.make_rep, a, lo, hi)

    # ------------------------------------------------------------------ derivatives
    def deriv(self, e: int, b: int) -> int:
        """The derivative of e by byte b (memoized)."""
        r = self._run(core.deriv, e, b)
        if int(self.arena[core.H_WORK]) - self._checked >= 1024:
            self._checked = int(self.arena[core.H_WORK])
            self.bound.check()
        return r

    def deriv_classes(self, e: int, reps: np.ndarray, class_of: np.ndarray, n_classes: int) -> tuple[list, np.ndarray]:
        """A DFA row of e over global byte classes, in one call: (the distinct derivatives, 0 first;
        per class, the index of its derivative among them). ``reps``: one byte per class (four
        words); ``class_of``: byte -> class, of ``n_classes``."""
        groups = np.empty((256, 4), dtype=np.int64)
        uniq = np.empty(257, dtype=np.int64)
        index = np.empty(n_classes, dtype=np.int64)
        k = self._run(core.deriv_classes, e, reps, class_of, MAX_HEADS, groups, uniq, index)
        self.bound.check()
        self._checked = int(self.arena[core.H_WORK])
        return uniq[:k].tolist(), index

    # ------------------------------------------------------------------ counter clamping
    def clamp(self, e: int, limit: int) -> int:
        """e with repeat counters that cannot bind within ``limit`` bytes clamped (outside AND/NOT),
        and a character count bound made unbounded where it cannot bind within ``limit`` bytes (the
        intersection ``A & X{0,n}`` with X a character unit, ``char_units``, A free of intersections
        and complements, and n unbounded or at least ``limit`` plus ``completion_bound(A)`` becomes
        ``A' & X*``, A' clamped).

        An item of at least m bytes (a non-empty one at least 1) consumes m bytes per iteration, so
        within ``limit - 1`` bytes at most ceil(limit / m) - 1 iterations complete: an upper bound
        past that cannot bind, and a lower bound past it is the same as ceil(limit / m)
        (``expr_core.rep_span``): the clamped expression allows exactly the same tokens. For
        the count: within those bytes (c characters) A's derivative, when live, has a string of at
        most the bound's characters, which fits in the n - c left, and the count is nullable at every
        point within them; so a string under ``pattern`` and ``maxLength`` shares its masks instead
        of making new ones at every position (one schema's masks built 218k states, ~5 per character
        written). Compiled (``expr_core.clamp``), memoised per (node, limit) in the arena; limits
        past ``expr_core.CLAMP_LIMITS`` leave e as it is (clamping only shares masks).
        """
        if self.counter[e] <= limit or limit >= core.CLAMP_LIMITS:
            return e
        units = self.__dict__.get("_units")
        if units is None or units[0] != self.char_units:
            units = self._units = (self.char_units, np.array(sorted(self.char_units), dtype=np.int64))
        return self._run(core.clamp, e, limit, units[1])

    def completion_bound(self, e: int) -> int | None:
        """An upper bound of the bytes of the shortest string of every non-empty derivative of e (its
        shortest completion from any point), for e free of AND/NOT (None otherwise). Memoised.

        Rules (``min_len`` is exact without AND/NOT): a byte set 1; a union the largest of its
        branches'; ``h t`` the larger of U(h) + min_len(t) (still in h) and U(t); ``x{lo,hi}``
        the larger of lo * min_len(x) (before any iteration) and U(x) + (lo - 1) * min_len(x)
        (inside one: at most lo - 1 mandatory iterations left)."""
        return None if self.has_bool[e] else self._run(core.completion_bound, e)

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
            r = self.byte_classes(e)
            cache[e] = r
        return r

    def byte_classes(self, *roots: int) -> tuple[list[int], list[int]]:
        """The bytes partitioned by membership in the byte sets of ``byte_masks(*roots)``, in one
        compiled call: (class of each byte, one byte per class: classes numbered by their first byte)."""
        cls, reps = core.byte_partition(self.arena, np.asarray(roots, dtype=np.int64))
        return cls.tolist(), reps.tolist()

    def byte_masks(self, *roots: int) -> set[int]:
        """All byte sets occurring in the expressions (one walk: shared sub-expressions once)."""
        ids = core.reachable_bytes(self.arena, np.asarray(roots, dtype=np.int64))
        first = self.first
        return {first[int(x)] for x in ids}

    # ------------------------------------------------------------------ from the AST
    def intern(self, node: Node) -> int:
        """The expression of an AST node, over bytes (UTF-8 for Chars; Not within valid UTF-8).

        Memoized for the pool's lifetime by structural equality (nodes are hashable with a cached
        hash): the terminals of a grammar share most of their subtrees (JSON strings, numbers, the
        schema-free value), often as equal copies rather than the same objects, and each is
        interned once. The new nodes become one program (``expr_core.intern_prog``: children
        before parents) that compiled code runs in one call. A ``Let`` root binds its placeholders
        for the pool's lifetime (a pool of its own: ``with_common`` forks one per grammar).
        """
        if node.__class__ is Let:  # the placeholders first: the body's walk finds them interned
            values = self.intern_many(node.values)
            for name, value in zip(node.names, values, strict=True):
                if self._interned.setdefault(name, value) != value:
                    raise GrammarError(f"placeholder {name!r} stands for two expressions in one pool")
            node = node.body
        r = self._interned.get(node)
        return r if r is not None else self.intern_many((node,))[0]

    def intern_many(self, nodes) -> list[int]:
        """``[intern(n) for n in nodes]`` as one program: the nodes' subtrees are looked up once per
        object for the whole batch. A subtree equal to one interned before, but built apart, is
        compared structurally (a walk of both) at its first lookup only, where interning the
        terminals one by one compared it again under every terminal that shares it."""
        nodes = tuple(nodes)  # iterated twice, and keeping the nodes alive keeps their ids theirs
        memo = self._interned
        # This batch's nodes by identity (the caller's nodes keep them alive): a node equal to one
        # interned before is compared structurally once, not at every use. A ref is an expression
        # id (>= 0) or -1 - the index of the instruction that makes it. Post-order with an explicit
        # stack: children left to right, each shared subtree once; the AST's depth costs no Python
        # stack.
        done: dict[int, int] = {}
        pending: dict[Node, int] = {}  # by structural equality: the refs of this program's nodes
        prog: list[int] = []
        made: list[Node] = []  # the node of each instruction
        bodies: dict[int, int] = {}  # Cofinite node (by identity) -> its body's expression
        any_id = -1
        for node in nodes:
            if id(node) in done:
                continue
            stack: list = [node]  # a node to look up, or (node,) once its children are in done
            while stack:
                n = stack.pop()
                if n.__class__ is not tuple:
                    if id(n) in done:
                        continue
                    r = memo.get(n)
                    if r is None and pending:
                        r = pending.get(n)
                    if r is not None:
                        done[id(n)] = r
                        continue
                    if n.__class__ is TrieLeft:  # made from its words, never from its items' nodes
                        done[id(n)] = memo[n] = self._intern_trie(n)
                        continue
                    if n.__class__ is Recursive:
                        done[id(n)] = memo[n] = self._intern_recursive(n)
                        continue
                    stack.append((n,))
                    cls = n.__class__
                    if cls is Seq or cls is Alt or cls is Cofinite or cls is And:
                        for x in reversed(n.items):
                            if id(x) not in done:
                                stack.append(x)
                    elif cls is Repeat or cls is Not:
                        stack.append(n.item)
                    continue
                n = n[0]
                if id(n) in done:  # (a node met twice before its first visit ended)
                    continue
                cls = n.__class__
                if cls is Chars:
                    words = _chars_words(n.ranges)
                    prog += words[0]
                    prog.append(self._wide_id(words[1]) if words[1] else -1)
                elif cls is ByteSet:
                    prog += (core.OP_BYTES, 4, *_int64_words(_mask(n.ranges)))
                elif cls is Seq or cls is Alt or cls is And or cls is Cofinite:
                    op = core.OP_SEQ if cls is Seq else core.OP_AND if cls is And else core.OP_ALT
                    prog += (op, len(n.items))
                    prog += [done[id(x)] for x in n.items]
                    if cls is Cofinite:
                        bodies[id(n)] = self.intern(n.body)
                elif cls is Repeat:
                    prog += (core.OP_REP, 3, done[id(n.item)], n.min, INF if n.max is None else n.max)
                elif cls is Not:
                    if any_id < 0:
                        any_id = self.intern(any_string())
                    prog += (core.OP_NOT, 2, done[id(n.item)], any_id)
                else:
                    raise GrammarError(f"not a regex AST node: {n!r}")
                done[id(n)] = pending[n] = -1 - len(made)
                made.append(n)
        ids: list[int] = []
        if made:
            out = np.empty(len(made), dtype=np.int64)
            self._run(core.intern_prog, np.array(prog, dtype=np.int64), out, np.zeros(2, dtype=np.int64))
            ids = out.tolist()
            for n, r in zip(made, ids, strict=True):
                memo[n] = r
                if n.__class__ is Cofinite:
                    self.cofinite.setdefault(r, bodies[id(n)])
                if r != EMPTY_ID and n.__class__ in (Chars, ByteSet):
                    kind = "chars" if n.__class__ is Chars else "bytes"
                    self.char_class.setdefault(r, (kind, tuple(n.ranges)))
        return [r if r >= 0 else ids[-1 - r] for r in (done[id(n)] for n in nodes)]

    def _intern_recursive(self, node: Recursive) -> int:
        """The expression of a ``Recursive`` leaf (K_REC): made first, with the bytes its strings begin
        with and its shortest length, so that its body (which refers to it) is interned around it;
        then given its body. Those two and the body's must agree, and no string of the body is empty."""
        e = self._run(core.make_rec, *_int64_words(node.first_bytes), node.min_len)
        self._interned[node] = e
        body = self.intern(node.body)
        if self.first[body] != node.first_bytes or self.min_len[body] != node.min_len or self.nullable[body]:
            raise GrammarError(f"recursive language {node.name}: its body's first bytes or length differ from its own")
        with self._lock:
            core.set_rec_body(self.arena, e, body)
        return e

    def _intern_trie(self, node: TrieLeft) -> int:
        """The expression of a ``TrieLeft``, made from its words' trie as one program: the union
        ``regex_ast._left`` builds at each trie node (the empty string where no word ends, then
        ``other(kids)``, then each child's ``char(c)`` and what is left below it), the same expression
        its items intern to, without making or walking those nodes."""
        body = self.intern(node.body)
        parts = self.__dict__.setdefault("_trie_parts", {})  # (function, argument) -> its node's expression
        char, other = node.char, node.other
        # the trie in preorder, from the sorted words: node i's children (in order), whether a word ends
        kids: list[list] = [[]]
        ends = [False]
        path = [0]  # the nodes along the previous word
        prev = ""
        for w in node.words:
            k = 0
            top = min(len(w), len(prev))
            while k < top and w[k] == prev[k]:
                k += 1
            del path[k + 1 :]
            for c in w[k:]:
                kids[path[-1]].append((c, len(kids)))
                path.append(len(kids))
                kids.append([])
                ends.append(False)
            ends[path[-1]] = True
            prev = w
        # the parts not interned in this pool yet, all in one program (a call each cost more than the
        # few instructions it ran)
        sets = [(other, tuple(c for c, _ in below)) for below in kids]
        new = list(dict.fromkeys([k for k in sets if k not in parts]
                                 + [(char, c) for below in kids for c, _ in below if (char, c) not in parts]))  # fmt: skip
        if new:
            parts.update(zip(new, self.intern_many([f(x) for f, x in new]), strict=True))
        prog: list[int] = []
        unions: list[int] = []  # the instructions that make a trie node's union (a Cofinite one)
        made = 0
        ref = [0] * len(kids)  # a node's expression, or the ref of the instruction that makes it
        for i in range(len(kids) - 1, -1, -1):  # a child comes after its parent in preorder
            e = parts[sets[i]]
            items = [e] if ends[i] else [EPS_ID, e]
            for c, j in kids[i]:
                prog += (core.OP_SEQ, 2, parts[char, c], ref[j])
                items.append(-1 - made)
                made += 1
            if len(items) == 1:
                ref[i] = items[0]
                continue
            prog += (core.OP_ALT, len(items), *items)
            unions.append(made)
            ref[i] = -1 - made
            made += 1
        if ref[0] >= 0:
            return ref[0]
        out = np.empty(made, dtype=np.int64)
        self._run(core.intern_prog, np.array(prog, dtype=np.int64), out, np.zeros(2, dtype=np.int64))
        for i in unions:
            self.cofinite.setdefault(int(out[i]), body)
        return int(out[-1 - ref[0]])

    def _wide_id(self, wide: tuple) -> int:
        """The UTF-8 sequences of codepoint ranges >= 0x80 (memoized per pool; their byte sequences
        per process)."""
        w = self._wide.get(wide)
        if w is None:
            seqs = _wide_sequences(wide)
            w = self._wide[wide] = self.or_([self.cat_all([self.bytes_(m) for m in q]) for q in seqs])
        return w


class _Column:
    """One scalar column of a pool's nodes: ``column[e]``."""

    __slots__ = ("pool", "slot", "cast")

    def __init__(self, pool: ExprPool, slot: int, cast=int):
        self.pool, self.slot, self.cast = pool, slot, cast

    def __getitem__(self, e: int):
        a = self.pool.arena
        return self.cast(a[a[self.slot] + core.NW * e])

    def __len__(self) -> int:
        return len(self.pool)


class _First(_Column):
    """``first[e]``: the 256-bit set of bytes e's derivative may be non-empty for (a BYTES node's set)."""

    def __init__(self, pool: ExprPool):
        super().__init__(pool, core.O_FIRST)

    def __getitem__(self, e: int) -> int:
        a = self.pool.arena
        o = a[core.O_FIRST] + core.NW * e
        return int.from_bytes(a[o : o + 4].tobytes(), "little")


class _Args(_Column):
    """``args[e]``: BYTES its set, CAT (head, tail), OR/AND the sorted children, NOT the item, REP (item,
    min, max or -1), EMPTY/EPS None."""

    def __init__(self, pool: ExprPool):
        super().__init__(pool, core.O_A0)

    def __getitem__(self, e: int):
        pool = self.pool
        a = pool.arena
        r = a[core.O_KIND] + core.NW * e  # the node's record: kind, a0, a1, a2 first
        k = a[r]
        a0 = int(a[r + 1])
        if k == K_CAT:
            return a0, int(a[r + 2])
        if k == K_OR or k == K_AND:
            o = a[core.O_KIDS] + a0
            return tuple(a[o : o + a[r + 2]].tolist())
        if k == K_BYTES:
            return pool.first[e]
        if k == K_NOT:
            return a0
        if k == K_REP:
            return a0, int(a[r + 2]), int(a[r + 3])
        if k == K_REC:
            return a0
        return None


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


def _arena_fork(a: np.ndarray) -> np.ndarray:
    """A copy of the arena for a fork: its header, hash table and memo whole, its node records and
    children as far as they are used (an empty memo's values not at all). The room past them is left
    unwritten (``expr_core._layout`` writes a record and children before anything reads them): the
    common arena is mostly room for the fork's own expressions, and copying it all doubled what each
    compile copies."""
    new = np.empty(len(a), dtype=a.dtype)
    new[: core.HEADER] = a[: core.HEADER]
    lo = int(a[core.O_KIND])
    hi = lo + core.NW * int(a[core.H_N])
    new[lo:hi] = a[lo:hi]
    ht, mk, mv, kids = int(a[core.O_HT]), int(a[core.O_MK]), int(a[core.O_MV]), int(a[core.O_KIDS])
    if a[core.H_MCOUNT]:
        new[ht:kids] = a[ht:kids]  # the node hash table, the memo's keys and values
    else:  # an empty memo (the common pool derives nothing): its keys say so, its values go unread
        new[ht:mk] = a[ht:mk]
        new[mk:mv] = -1
    klen = int(a[core.H_KLEN])
    new[kids : kids + klen] = a[kids : kids + klen]
    return new


def _arena_copy(a: np.ndarray) -> np.ndarray:
    """A copy of the arena holding what it holds in use (the node records made so far, the hash
    table, the memo's entries, the children) and zeros elsewhere, for a pickle: a large arena leaves
    its unused regions unwritten (``expr_core._layout``), and no such bytes go to a cache file."""
    new = np.zeros(len(a), dtype=a.dtype)
    new[: core.HEADER] = a[: core.HEADER]
    lo = int(a[core.O_KIND])
    hi = lo + core.NW * int(a[core.H_N])
    new[lo:hi] = a[lo:hi]
    ht, mk, mv, kids = int(a[core.O_HT]), int(a[core.O_MK]), int(a[core.O_MV]), int(a[core.O_KIDS])
    new[ht:mk] = a[ht:mk]  # the node hash table
    mcap, klen = int(a[core.H_MCAP]), int(a[core.H_KLEN])
    keys = a[mk : mk + mcap]
    new[mk : mk + mcap] = keys
    new[mv : mv + mcap] = np.where(keys >= 0, a[mv : mv + mcap], 0)  # the values of the entries alone
    new[kids : kids + klen] = a[kids : kids + klen]
    return new


@lru_cache(maxsize=8192)
def _chars_words(ranges) -> tuple[tuple[int, ...], tuple]:
    """A ``Chars`` node's intern instruction but its last word (OP_CHARS, 5, the four int64 words of its
    ASCII byte set), and its ranges at or above 0x80 (memoized: the same character classes recur)."""
    narrow, wide = _split_ascii(ranges)
    return (core.OP_CHARS, 5, *_int64_words(narrow)), wide


def _int64_words(mask: int) -> tuple[int, int, int, int]:
    """A 256-bit set as four int64 words, low word first (``expr_core.words`` without an array)."""
    out = []
    for _ in range(4):
        w = mask & 0xFFFFFFFFFFFFFFFF
        out.append(w - (1 << 64) if w >> 63 else w)
        mask >>= 64
    return tuple(out)


def _mask(ranges) -> int:
    m = 0
    for lo, hi in ranges:
        m |= ((1 << (hi - lo + 1)) - 1) << lo
    return m
