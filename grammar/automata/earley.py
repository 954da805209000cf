"""CfgAutomaton: an Earley parser over lexemes, determinised lazily into a byte DFA of configurations.

The parser (Earley with the Aycock-Horspool fix for nullable rules, so left recursion, ambiguity and
empty rules all work) runs over lexemes; a lexer made of regex derivatives (``ExprPool``) runs, per
Earley set, over the terminals that set expects plus the ignorable ones, and lexemes may end wherever
a terminal accepts (nondeterministic lexing, the exact context-free language).

The trick that makes it cheap is that Earley sets are interned by content, with item origins naming
*sets* instead of positions (``-1`` = the set itself). Two positions with equal sets behave the same
forever after, so a parser configuration -- which lexemes are in flight (origin set, lexer state) and
whether the text so far is a sentence -- is a small hashable value, interned as an int. The position's
Earley set may be a union of interned sets (closure distributes over union), so an ignored lexeme
just restarts lexing from the set it began in. Configurations and their transitions per byte class
form a lazily built DFA with the shape of ``LazyDFA`` (``class_map``, ``trans``, ``accepting``,
``materialize``, ``step``, ``walk``, ``single_byte``, ``is_final``), so forced tokens work unchanged and
rollback is a pop of an int. Transitions are computed one entry at a time, on first use (``UNKNOWN``
until then); bytes that no lexeme in flight can start are DEAD from the start. Masks walk the
vocabulary trie in numba (``cfg_matcher``); only transitions never taken before cost Python time, once.
Every configuration is viable (validated
grammars have no unproductive symbols and dead lexer states are dropped), so a byte is allowed exactly
when its transition is not DEAD.
"""

from __future__ import annotations

import threading
from array import array

import numba
import numpy as np

from guided.errors import GrammarError, LimitError
from guided.grammar.automata import expr_core as core
from guided.grammar.automata import lex_table as lexing
from guided.grammar.automata.end_bytes import ALL_BYTES, last_bytes
from guided.grammar.automata.expr_pool import EMPTY_ID, EPS_ID, ExprPool
from guided.grammar.automata.lex_table import DEAD, LEX_ACCEPTS, LEX_GOES_ON, TERM_SHIFT, UNKNOWN, LexTable
from guided.grammar.automata.lex_table import step as lex_step
from guided.grammar.automata.state_table import StateTable, grown
from guided.grammar.cfg_ir import CfgGrammar

__all__ = ["CfgAutomaton", "DEAD", "UNKNOWN", "LEX", "LEX_ACCEPTS", "LEX_GOES_ON", "pure_slot", "warm_up_walk"]

COMPLETE = 1 << 30  # next_sym of an item whose dot is at the end
_FILL = {"trans": UNKNOWN, "computed": 0, "accepting": 0, "internal": 0, "pure": -1,
         "lex_trans": UNKNOWN, "lex_flags": 0, "lex_exit": ~np.uint64(0)}  # fmt: skip
# Items and lexemes are plain ints, not tuples, so the garbage collector has little to traverse (tuple
# items made gen-2 collections take ~0.4 s on large automata): item = lr0 << 32 | (origin + 1), origin
# -1 meaning the set itself; a lexeme in flight = origin set << 24 | lexer state.
ITEM = 1 << 32
ORIGIN = ITEM - 1
LEX = 1 << 24
_INF = 1 << 40


class CfgAutomaton(StateTable):
    """Lazily built DFA over Earley configurations; state 0 is the start, DEAD (-1) a dead end."""

    def __init__(self, grammar: CfgGrammar, pool: ExprPool | None = None, max_states: int = 500_000):
        self.pool = pool or ExprPool()
        self.max_states = max_states
        self.lock = threading.RLock()
        self._compile_terminals(grammar)
        self._compile_rules(grammar)
        # interned Earley sets, one column per field (a list of plain ints and of dicts of int tuples,
        # which the garbage collector does not track, where one object per set would be walked by
        # every full collection): the items as a sorted tuple; nonterminal -> items with the dot
        # before it; terminal -> the same; whether the set accepts; the lexer state over the
        # terminals the set expects (+ ignored), or -1
        self.set_items: list[tuple[int, ...]] = []
        self.set_waiting: list[dict[int, tuple[int, ...]]] = []
        self.set_scans: list[dict[int, tuple[int, ...]]] = []
        self.set_accepting: list[bool] = []
        self.set_lex: list[int] = []
        self._set_ids: dict[tuple[int, ...], int] = {}
        self.lexstates: list[tuple] = []
        self._lex_ids: dict[tuple, int] = {}
        # the lexer states again as flat arrays (``LexTable``): mask walks step them in compiled code
        # and make new ones there, which ``sync_lex`` then adds to the Python-side tables
        self.lex_table = LexTable()
        self._lex_clamps: dict[int, int] = {}  # lexer state << 16 | limit -> clamped lexer state
        self._lex_acc: list[tuple[int, ...]] = []
        self._lex_cont: list[bool] = []
        self.configs: list[tuple] = []
        self._config_ids: dict[tuple, int] = {}
        self._scan_cache: dict[int, tuple[tuple[int, ...], bool]] = {}
        self._closure_cache: dict[tuple[int, ...], int] = {}
        self._pred_cache: dict[int, tuple[int, ...]] = {}
        cap = 64
        self.trans = np.full((cap, self.n_classes), UNKNOWN, dtype=np.int32)  # [states, classes]
        self.computed = np.zeros(cap, dtype=np.uint8)  # 1: the whole row is known
        self.accepting = np.zeros(cap, dtype=np.uint8)
        self.internal = np.zeros((cap, self.n_classes), dtype=np.uint8)  # 1: trans[s, c] stays in s's lexeme
        self.pure_lex = array("q")  # config -> lexer state when it is one non-accepting lexeme, else -1
        # the pure configurations again, for mask walks in lexeme mode (``compiled_cfg._walk``): per
        # configuration its one lexeme (origin set * LEX + lexer state) or -1, and a hash table
        # lexeme -> configuration (open addressing, pure_slot; keys -1 where empty)
        self.pure = np.full(cap, -1, dtype=np.int64)
        self.pure_keys = np.full(64, -1, dtype=np.int64)
        self.pure_vals = np.zeros(64, dtype=np.int32)
        self._pure_count = 0
        # the lexer's transitions as a table (lexer state, byte class) -> lexer state, DEAD or UNKNOWN,
        # and per lexer state its LEX_* flags and exit mask (prepare_exits: 256 bits as uint64 [4], all
        # ones, no pruning, until prepare_exits): a lexeme in flight alone steps the same way from
        # every origin, so walks in lexeme mode share these rows across parser contexts
        lcap = 64
        self.lex_trans = np.full((lcap, self.n_classes), UNKNOWN, dtype=np.int32)
        self.lex_flags = np.zeros(lcap, dtype=np.uint8)
        self.lex_exit = np.full((lcap, 4), ~np.uint64(0), dtype=np.uint64)
        self._exits_done = 0  # lexer states below this have their lex_exit row
        self._term_exit_cache: dict[int, int] = {}
        n_terms = len(self.term_names)  # the same as rows (prepare_exits), and which are filled
        self._term_exit_words = (np.zeros((n_terms, 4), dtype=np.uint64), np.zeros(n_terms, dtype=bool))
        self._live_cache: dict[int, int] = {}
        self._dead_cache: dict[int, np.ndarray] = {}  # bits -> _dead_row
        start = self._closure({self.start_item * ITEM})
        if self._config([start] if start >= 0 else [], []) != 0:
            raise GrammarError("the grammar matches no string at all (its language is empty)")

    # ------------------------------------------------------------------ compiling the grammar
    def _compile_terminals(self, g: CfgGrammar) -> None:
        pool = self.pool
        self.term_names = list(g.terminals)
        self.term_index = {n: i for i, n in enumerate(self.term_names)}
        self.term_nodes = [g.terminals[n].node for n in self.term_names]
        self.term_expr = pool.intern_many(self.term_nodes)
        for n, e in zip(self.term_names, self.term_expr, strict=True):
            if not pool.is_live(e) if pool.has_bool[e] else e == EMPTY_ID:
                raise GrammarError(f"terminal {n!r} matches no string")
        cls, reps = pool.byte_classes(*self.term_expr)
        self.class_map = np.asarray(cls, dtype=np.int32)  # [256] byte -> class
        self.reps = reps
        pool.reps = reps
        self.n_classes = len(reps)
        # class -> its bytes as a 256-bit int, for _dead_row
        self.class_bits = [0] * self.n_classes
        for b, c in enumerate(cls):
            self.class_bits[c] |= 1 << b
        # the same as int64 [classes, 4] words, and the classes' bytes, for ``lex_table.step``
        self.class_words = np.array(
            [[(cb >> (64 * w)) & ((1 << 64) - 1) for w in range(4)] for cb in self.class_bits], dtype=np.uint64
        ).view(np.int64)
        self.rep_bytes = np.asarray(reps, dtype=np.int64)
        self.ignore = frozenset(self.term_index[n] for n in g.ignore)

    def _compile_rules(self, g: CfgGrammar) -> None:
        names = ["<start>", *g.rules]
        nt = {n: i for i, n in enumerate(names)}
        arena = self.pool.arena  # whether each terminal matches the empty string: its nullable column
        empty = (arena[arena[core.O_NULL] + core.NW * np.asarray(self.term_expr, dtype=np.int64)] != 0).tolist()
        prods: list[tuple[int, tuple[int, ...]]] = [(0, (nt[g.start],))]
        term_index, known = self.term_index, nt.get
        for rule in g.rules.values():
            head = nt[rule.name]
            for a in rule.alternatives:
                body = []
                for s in a:  # a nonterminal's id (>= 0), or ~terminal
                    i = known(s)
                    if i is None:
                        t = term_index[s]
                        i = self._optional(s, t, nt, names, prods) if empty[t] else ~t
                    body.append(i)
                prods.append((head, tuple(body)))
        self.nt_names = names
        next_sym: list[int] = []
        lhs: list[int] = []
        first_items: list[list[int]] = [[] for _ in names]
        for head, body in prods:  # an item per dot position: the symbol after the dot, or COMPLETE
            first_items[head].append(len(next_sym))
            next_sym += body
            next_sym.append(COMPLETE)
            lhs += [head] * (len(body) + 1)
        # tuples of ints once built: the collector stops tracking them, where it would visit every
        # item of a list at every full pass (a large grammar has ~100k items)
        self.next_sym, self.lhs = tuple(next_sym), tuple(lhs)
        self.first_items = tuple(tuple(x) for x in first_items)
        self.nullable = _nullable(len(names), prods)
        self.start_item = 0
        self.accept_item = 1  # <start> -> S .

    def _optional(self, s: str, t: int, nt: dict, names: list, prods: list) -> int:
        """The nonterminal (T | empty) that stands for terminal s (index t), which matches the empty string."""
        e = self.term_expr[t]
        key = f"{s}?"
        if key not in nt:
            nt[key] = len(names)
            names.append(key)
            prods.append((nt[key], ()))
            if e != EPS_ID:
                prods.append((nt[key], (~t,)))
        return nt[key]

    # ------------------------------------------------------------------ Earley sets
    def _closure(self, kernel) -> int:
        """Predict and complete from kernel items; the interned set id (or DEAD when empty).

        Items predicted here (origin -1) come in bulk from ``_predicted``, already closed; only items
        with an earlier origin (from the kernel and from completions) go through the agenda.
        """
        nxt, lhs, nullable, set_waiting = self.next_sym, self.lhs, self.nullable, self.set_waiting
        items = set(kernel)
        agenda = list(items)
        predicted: set[int] = set()
        while agenda:
            it = agenda.pop()
            r = it >> 32
            s = nxt[r]
            if s == COMPLETE:
                o = (it & ORIGIN) - 1
                if o < 0:  # a self-origin completion: covered by the nullable prediction step
                    continue
                for w in set_waiting[o].get(lhs[r], ()):
                    new = w + ITEM if w & ORIGIN else w + ITEM + o + 1
                    if new not in items:
                        items.add(new)
                        agenda.append(new)
            elif s >= 0:
                if s not in predicted:
                    predicted.add(s)
                    items.update(self._predicted(s))
                if nullable[s]:
                    new = it + ITEM
                    if new not in items:
                        items.add(new)
                        agenda.append(new)
        return self._intern_set(items) if items else DEAD

    def _predicted(self, a: int) -> tuple[int, ...]:
        """The items (origin -1) that predicting nonterminal a adds, closed under prediction and the
        Aycock-Horspool step over nullable nonterminals."""
        r = self._pred_cache.get(a)
        if r is None:
            nxt, first, nullable = self.next_sym, self.first_items, self.nullable
            seen: set[int] = set()
            stack = list(first[a])
            while stack:
                x = stack.pop()
                if x in seen:
                    continue
                seen.add(x)
                s = nxt[x]
                if s != COMPLETE and s >= 0:
                    stack.extend(first[s])
                    if nullable[s]:
                        stack.append(x + 1)
            r = self._pred_cache[a] = tuple(x * ITEM for x in seen)
        return r

    def _intern_set(self, items: set[int]) -> int:
        key = tuple(sorted(items))
        i = self._set_ids.get(key)
        if i is not None:
            return i
        waiting: dict[int, list] = {}
        scans: dict[int, list] = {}
        for it in key:
            s = self.next_sym[it >> 32]
            if s == COMPLETE:
                continue
            (waiting.setdefault(s, []) if s >= 0 else scans.setdefault(~s, [])).append(it)
        # tuples once built: sets live as long as the grammar, and the collector stops tracking
        # tuples of ints (lists it would walk in every full collection)
        waiting = {s: tuple(v) for s, v in waiting.items()}
        scans = {t: tuple(v) for t, v in scans.items()}
        i = len(self.set_items)
        accepting = self.accept_item * ITEM + 1 in items or (i == 0 and self.accept_item * ITEM in items)
        terms = sorted(set(scans) | self.ignore)
        lex = self._lex_id(tuple((t, self.term_expr[t]) for t in terms)) if terms else DEAD
        self.set_items.append(key)
        self.set_waiting.append(waiting)
        self.set_scans.append(scans)
        self.set_accepting.append(accepting)
        self.set_lex.append(lex)
        self._set_ids[key] = i
        return i

    # ------------------------------------------------------------------ lexer
    def _lex_id(self, state: tuple) -> int:
        i = self._lex_ids.get(state)
        if i is None:
            i = len(self.lexstates)
            if i >= len(self.lex_flags):
                self._grow(("lex_trans", "lex_flags", "lex_exit"))
            acc = tuple(t for t, e in state if self.pool.nullable[e])
            cont = any(self._can_continue(e) for _, e in state)
            self.lex_table.add(state)
            self.lexstates.append(state)
            self._lex_acc.append(acc)
            self._lex_cont.append(cont)
            self.lex_flags[i] = (LEX_ACCEPTS if acc else 0) | (LEX_GOES_ON if cont else 0)
            self._lex_ids[state] = i
            # a byte none of its terminals can take is DEAD: known now, without a lexer step
            self.lex_trans[i] = self._dead_row(self._first_bytes(i))
        return i

    def sync_lex(self) -> None:
        """Add the lexer states a mask walk made in compiled code (``lex_table.step``) to the Python-side
        tables; the walk gave them their flags and DEAD classes. Call under the lock, right after.
        Only accepting states look for their accepting terminals."""
        table, nullable = self.lex_table, self.pool.nullable
        first, n = len(self.lexstates), len(table)
        if first == n:
            return
        states = table.states(first, n)  # one slice of the table's words
        for k, (state, flags) in enumerate(zip(states, self.lex_flags[first:n].tolist(), strict=True)):
            self.lexstates.append(state)
            self._lex_acc.append(tuple(t for t, e in state if nullable[e]) if flags & LEX_ACCEPTS else ())
            self._lex_cont.append(bool(flags & LEX_GOES_ON))
            self._lex_ids[state] = first + k

    def _can_continue(self, e: int) -> bool:
        """Whether e (a live expression: every lexer state holds live ones) matches a non-empty string."""
        pool = self.pool
        if e == EPS_ID:
            return False
        if not pool.has_bool[e]:
            return True  # simplified, intersection-free expressions other than EPS match a non-empty string
        if not pool.nullable[e]:
            return True  # live and not matching the empty string: what it matches is non-empty
        return any(pool.is_live(pool.deriv(e, b)) for b in self.reps)

    def _lex_step(self, lex: int, c: int) -> int:
        """The lexer state after byte class c from lex (or DEAD), from ``lex_trans`` or made there."""
        r = int(self.lex_trans[lex, c])
        if r == UNKNOWN and lexing.NATIVE_STEPS:  # in compiled code where it can be: one call in all
            table = self.lex_table
            table.reserve(1, len(self.lexstates[lex]))
            r = self.pool.call(
                lexing.step, lex, c, self.rep_bytes, table.items, table.off, table.ht, table.hdr, self.lex_trans,
                self.lex_flags, self.class_words,
            )  # fmt: skip
            if r != UNKNOWN:
                self.sync_lex()
        if r == UNKNOWN:
            pool, b = self.pool, self.reps[c]
            out = []
            for t, e in self.lexstates[lex]:
                d = pool.deriv(e, b)
                if d != EMPTY_ID and (not pool.has_bool[d] or pool.is_live(d)):
                    out.append((t, d))
            r = self._lex_id(tuple(out)) if out else DEAD
            self.lex_trans[lex, c] = r  # after _lex_id, which may have regrown the table
        return r

    # ------------------------------------------------------------------ configurations
    def _config(self, boundaries, lexemes: list) -> int:
        """Intern (is-sentence, lexemes in flight): the Earley set at this position is the union of the
        boundary sets (closure distributes over union), each starting its own lexeme."""
        accepting = False
        for b in boundaries:
            accepting = accepting or self.set_accepting[b]
            if self.set_lex[b] >= 0:
                lexemes.append(b * LEX + self.set_lex[b])
        if not lexemes and not accepting:
            return DEAD
        return self._intern_config(accepting, lexemes)

    def _intern_config(self, accepting: bool, lexemes: list) -> int:
        """The configuration (is-sentence, lexemes in flight), made on first use."""
        key = (accepting, tuple(sorted(set(lexemes))))
        i = self._config_ids.get(key)
        if i is None:
            i = len(self.configs)
            if i >= self.max_states:
                self.spent = True
                raise LimitError(f"context-free matcher exceeded {self.max_states} parser configurations")
            if i >= len(self.computed):
                self._grow()
            self.configs.append(key)
            self._config_ids[key] = i
            self.accepting[i] = accepting
            lexemes = key[1]
            pure = not accepting and len(lexemes) == 1 and not self._lex_acc[lexemes[0] & (LEX - 1)]
            self.pure_lex.append(lexemes[0] & (LEX - 1) if pure else -1)
            if pure:
                self._add_pure(lexemes[0], i)
            if len(lexemes) == 1:
                bits = self._first_bytes(lexemes[0] & (LEX - 1))
            else:
                bits = 0
                for x in lexemes:
                    bits |= self._first_bytes(x & (LEX - 1))
            # a byte no lexeme in flight can take is DEAD: known now, without a parser step
            self.trans[i] = self._dead_row(bits)
        return i

    def clamped(self, cfg: int, limit: int) -> int:
        """The configuration with every lexeme's lexer state clamped (``ExprPool.clamp`` on each
        terminal's expression): within ``limit - 1`` bytes its lexemes go on, end and die where cfg's
        do (what follows a lexeme depends on its terminal and origin alone), so it allows the same
        tokens. The positions of a string under ``maxLength: 300`` share one, as in a regular grammar."""
        with self.lock:
            accepting, lexemes = self.configs[cfg]
            out = [x - (x & (LEX - 1)) + self._clamped_lex(x & (LEX - 1), limit) for x in lexemes]
            return cfg if out == list(lexemes) else self._intern_config(accepting, out)

    def _clamped_lex(self, lex: int, limit: int) -> int:
        key = lex << 16 | limit
        r = self._lex_clamps.get(key)
        if r is None:
            state = self.lexstates[lex]
            clamped = tuple(dict.fromkeys((t, self.pool.clamp(e, limit)) for t, e in state))
            r = self._lex_clamps[key] = lex if clamped == state else self._lex_id(clamped)
        return r

    def _first_bytes(self, lex: int) -> int:
        """256-bit int: the bytes lexer state lex may take (a superset: ``ExprPool.first``)."""
        r = self._live_cache.get(lex)
        if r is None:
            r = 0
            for _, e in self.lexstates[lex]:
                r |= self.pool.first[e]
            self._live_cache[lex] = r
        return r

    def _dead_row(self, bits: int) -> np.ndarray:
        """A new state's transition row: DEAD for the byte classes with no byte in bits, UNKNOWN for the
        rest (int32 [classes], cached per bits; copied into the table, one row write)."""
        r = self._dead_cache.get(bits)
        if r is None:
            r = np.array([UNKNOWN if bits & cb else DEAD for cb in self.class_bits], dtype=np.int32)
            self._dead_cache[bits] = r
        return r

    def _add_pure(self, lexeme: int, cfg: int) -> None:
        """Record pure configuration cfg under its one lexeme (``pure``, ``pure_keys``/``pure_vals``).
        A slot's value is written before its key: a walk reading the table without the lock finds a
        key only with its value."""
        self.pure[cfg] = lexeme
        self._pure_count += 1
        if 2 * self._pure_count > len(self.pure_keys):
            n = 2 * len(self.pure_keys)
            keys, vals = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int32)
            for c in np.flatnonzero(self.pure[: len(self.configs)] >= 0).tolist():
                _pure_put(keys, vals, int(self.pure[c]), c)
            self.pure_vals, self.pure_keys = vals, keys
        else:
            _pure_put(self.pure_keys, self.pure_vals, lexeme, cfg)

    def pure_entry(self, lexeme: int, c: int) -> None:
        """What a mask walk in lexeme mode stopped at (the lexeme ``origin * LEX + lexer state`` in
        flight alone, byte class c): the lexer's step, and where the lexeme may end there, the pure
        configuration and its transition (the parser's step). Idempotent, thread-safe."""
        with self.lock:
            lex2 = self._lex_step(lexeme & (LEX - 1), c)
            if lex2 >= 0 and self._lex_acc[lex2]:
                self.entry(self._intern_config(False, [lexeme]), c)

    def prepare_exits(self) -> None:
        """Fill the lex_exit rows of the lexer states made since the last call (only mask walks that
        prune read them, so grammars whose walks never prune never pay for them): each row is the OR
        of its terminals' exit bytes (``_term_exit``), over the new states' words at once."""
        with self.lock:
            n, done = len(self.lexstates), self._exits_done
            if n == done:
                return
            off = self.lex_table.off
            lo = int(off[done])
            terms = self.lex_table.items[lo : int(off[n])] >> TERM_SHIFT
            rows = self._term_exit_rows(terms)[terms]
            self.lex_exit[done:n] = np.bitwise_or.reduceat(rows, off[done:n] - lo, axis=0)  # every state has a pair
            self._exits_done = n

    def _term_exit_rows(self, terms: np.ndarray) -> np.ndarray:
        """uint64 [terminals, 4]: each terminal's exit bytes (``_term_exit``) as words, filled for those in
        ``terms`` (once each)."""
        rows, known = self._term_exit_words
        for t in np.unique(terms[~known[terms]]).tolist():
            bits = self._term_exit(t)
            rows[t] = [(bits >> (64 * w)) & ((1 << 64) - 1) for w in range(4)]
            known[t] = True
        return rows

    def __getstate__(self):
        """As ``StateTable``, without the terminals' AST nodes (``release_nodes``)."""
        self.release_nodes()
        return super().__getstate__()

    def release_nodes(self) -> None:
        """Read every terminal's exit bytes off its AST node, then drop the nodes: the automaton needs
        nothing else of the AST (once compiled, a grammar's AST is only garbage the collector walks)."""
        if self.term_nodes is not None:
            for t in range(len(self.term_nodes)):
                self._term_exit(t)
            self.term_nodes = None

    def _term_exit(self, t: int) -> int:
        """The bytes (a 256-bit int) that can end a string of terminal t, read off its regex: a superset
        of the bytes that take a lexer state of a lexeme of t to an accepting one."""
        r = self._term_exit_cache.get(t)
        if r is None:
            try:
                r = last_bytes(self.term_nodes[t])
            except RecursionError:
                r = ALL_BYTES
            self._term_exit_cache[t] = r
        return r

    def _step_config(self, cfg: int, c: int) -> int:
        boundaries: set[int] = set()
        kernels = []
        cont: list = []
        lex_trans = self.lex_trans
        for x in self.configs[cfg][1]:
            origin = x >> 24
            lex2 = int(lex_trans[x & (LEX - 1), c])  # known: no call (most are, after a walk's steps)
            if lex2 == UNKNOWN:
                lex2 = self._lex_step(x & (LEX - 1), c)
                lex_trans = self.lex_trans  # (the step may have regrown the table)
            if lex2 < 0:
                continue
            if self._lex_acc[lex2]:
                kernel, ignored = self._scan(origin, lex2)
                if kernel:
                    kernels.append(kernel)
                if ignored:  # an ignored lexeme leaves the parser where it was
                    boundaries.add(origin)
            if self._lex_cont[lex2]:
                cont.append(origin * LEX + lex2)
        if kernels:
            kernel = kernels[0] if len(kernels) == 1 else tuple(sorted(set().union(*kernels)))
            y = self._closure_of(kernel)
            if y >= 0:
                boundaries.add(y)
        return self._config(boundaries, cont)

    def _scan(self, origin: int, lex: int) -> tuple[tuple[int, ...], bool]:
        """(items advanced over the terminals lex accepts, from set origin; whether an ignored one accepts)."""
        key = origin * LEX + lex
        r = self._scan_cache.get(key)
        if r is None:
            scans = self.set_scans[origin]
            kernel = set()
            for t in self._lex_acc[lex]:
                for it in scans.get(t, ()):
                    kernel.add(it + ITEM if it & ORIGIN else it + ITEM + origin + 1)
            # a sorted tuple, not a frozenset: the collector stops tracking tuples of ints
            r = self._scan_cache[key] = (tuple(sorted(kernel)), any(t in self.ignore for t in self._lex_acc[lex]))
        return r

    def _closure_of(self, kernel: tuple[int, ...]) -> int:
        r = self._closure_cache.get(kernel)
        if r is None:
            r = self._closure_cache[kernel] = self._closure(kernel)
        return r

    def _grow(self, names=("trans", "computed", "accepting", "internal", "pure")) -> None:
        """Double the per-configuration arrays, or those named (old rows kept, new rows at their
        initial value)."""
        cap = 2 * len(getattr(self, names[0]))
        for name in names:
            setattr(self, name, grown(getattr(self, name), cap, _FILL[name]))

    # ------------------------------------------------------------------ the LazyDFA interface
    @property
    def n_states(self) -> int:
        return len(self.configs)

    def materialize(self, s: int) -> None:
        """Compute configuration s's whole transition row (idempotent, thread-safe)."""
        if self.computed[s]:
            return
        with self.lock:
            if self.computed[s]:
                return
            for c in range(self.n_classes):
                self.entry(s, c)
            self.computed[s] = 1

    def entry(self, s: int, c: int) -> int:
        """The transition of configuration s on byte class c, computed on first use."""
        t = self.trans[s, c]
        if t != UNKNOWN:
            return int(t)
        with self.lock:
            t = self.trans[s, c]
            if t == UNKNOWN:
                t = self._step_config(s, c)
                lex = self.pure_lex[s]
                if t >= 0 and lex >= 0 and not self._lex_acc[self._lex_step(lex, c)]:
                    # the one lexeme went on without any terminal accepting (not even an ignored one):
                    # what follows depends on the lexer state alone, never on the parser
                    self.internal[s, c] = 1
                self.trans[s, c] = t  # self.trans may have been regrown by _config: index the new one
            return int(t)

    def step(self, s: int, byte: int) -> int:
        return self.entry(s, int(self.class_map[byte]))

    def walk(self, s: int, data: bytes) -> int:
        """The configuration after data from s, or DEAD.

        Where a pure configuration's one lexeme goes on without ending (a key, a string), the walk
        steps the lexer alone (as mask walks do) and makes the configuration only where the
        lexeme may end or the data does: a token spelling a name made one configuration per byte,
        each a parser step in Python, for positions no mask asks about."""
        s, lexeme = self._walk_to(s, data)
        if lexeme >= 0:
            with self.lock:
                return self._intern_config(False, [lexeme])
        return s

    def reaches(self, s: int, data: bytes) -> bool:
        """Whether data leads from s to a live configuration (``walk`` is not DEAD), without making the
        configuration where the data ends inside a lexeme: every lexer state is live, and so is a
        configuration of one (the run-time checks ask this of every declared name where one is due)."""
        s, lexeme = self._walk_to(s, data)
        return s >= 0 or lexeme >= 0

    def _walk_to(self, s: int, data: bytes) -> tuple[int, int]:
        """``walk``'s steps: (the configuration after data, or DEAD, and -1), or (-1, the lexeme in
        flight alone, origin set * LEX + lexer state) where data ends inside one."""
        class_map, trans, pure = self.class_map, self.trans, self.pure
        lexeme = -1  # >= 0: in lexeme mode (origin set * LEX + lexer state); s is then stale
        i, n, buf = 0, len(data), None
        while i < n:
            c = int(class_map[data[i]])
            i += 1
            if lexeme < 0:
                t = trans[s, c]
                if t == UNKNOWN and pure[s] >= 0:
                    lexeme = int(pure[s])
                elif t == UNKNOWN:
                    t = self.entry(s, c)
                    trans = self.trans  # (the step may have regrown the tables)
                    pure = self.pure
            if lexeme >= 0:
                lex = lexeme & (LEX - 1)
                with self.lock:
                    lex2 = self._lex_step(lex, c)
                    if lex2 >= 0 and not self._lex_acc[lex2]:  # the lexeme goes on, nothing else can happen
                        if n - i > 2:  # the steps after it, in compiled code (a name, a string)
                            buf = _byte_array(data) if buf is None else buf
                            i, lex2 = self._run_lexeme(lex2, buf, i)
                        lexeme += lex2 - lex
                        continue
                    s = self._intern_config(False, [lexeme])  # it may end here: the parser's step
                    t = self.entry(s, c)
                    trans, pure = self.trans, self.pure
                lexeme = -1
            s = t
            if s < 0:
                return DEAD, -1
        return (-1, lexeme) if lexeme >= 0 else (int(s), -1)

    def _run_lexeme(self, lex: int, data: np.ndarray, i: int) -> tuple[int, int]:
        """``_lex_run`` from lexer state lex before data[i], making the lexer steps not made yet there
        too (``lex_table.step``) when the expression arena is free; the states it made are then added
        to the Python side (``sync_lex``). Call under the lock."""
        table, pool = self.lex_table, self.pool
        native = lexing.NATIVE_STEPS and pool.try_hold()
        try:
            if native:
                left = len(data) - i
                table.reserve(left, left * len(self.lexstates[lex]))  # a step never adds pairs
            return _lex_run(self.lex_trans, self.lex_flags, self.class_map, lex, data, i, native, pool.arena,
                            self.rep_bytes, table.items, table.off, table.ht, table.hdr, self.class_words)  # fmt: skip
        finally:
            if native:
                pool.let_go()
                self.sync_lex()

    # ------------------------------------------------------------------ bytes still needed
    def bytes_needed(self, cfg: int) -> int:
        """A lower bound of the bytes that end a sentence from configuration cfg (0 when it is one):
        over the lexemes in flight, the bytes their lexer state needs (``ExprPool.min_len``) plus the
        cheapest way the parse can end after that terminal (``_after_scan``). Guides the shortest
        completion search (``guided.grammar.tokens.completion``)."""
        accepting, lexemes = self.configs[cfg]
        if accepting:
            return 0
        with self.lock:
            if not hasattr(self, "_suffix"):
                self._yields()
            best = _INF
            min_len = self.pool.min_len
            for x in lexemes:
                origin = x >> 24
                for t, e in self.lexstates[x & (LEX - 1)]:
                    # an ignored lexeme (whitespace) leaves the parser at its set: what that set needs
                    rest = self._from_set(origin) if t in self.ignore else self._after_scan(origin, t)
                    best = min(best, min_len[e] + rest)
        return 0 if best >= _INF else best

    def _from_set(self, origin: int) -> int:
        """The fewest bytes that end the parse from a boundary whose Earley set is ``origin``."""
        got = self._from.get(origin)
        if got is None:
            got = 0 if self.set_accepting[origin] else min(
                (self._term_least[t] + self._after_scan(origin, t) for t in self.set_scans[origin]), default=_INF
            )
            self._from[origin] = got
        return got

    def _yields(self) -> None:
        """Per lr0 item, the fewest bytes its rest (from the dot) derives: terminals by ``min_len``
        (a lower bound), nonterminals by a fixpoint over their productions."""
        nxt, min_len = self.next_sym, self.pool.min_len
        term = [min_len[e] for e in self.term_expr]
        least = [_INF] * len(self.nt_names)
        changed = True
        while changed:
            changed = False
            for head, starts in enumerate(self.first_items):
                for r in starts:
                    total = 0
                    while nxt[r] != COMPLETE:
                        s = nxt[r]
                        total += least[s] if s >= 0 else term[~s]
                        r += 1
                    if total < least[head]:
                        least[head], changed = total, True
        suffix = [0] * (len(nxt) + 1)
        for r in range(len(nxt) - 1, -1, -1):
            s = nxt[r]
            suffix[r] = 0 if s == COMPLETE else (least[s] if s >= 0 else term[~s]) + suffix[r + 1]
        self._suffix = tuple(suffix)
        self._term_least = term
        self._finish: dict[int, dict[int, int]] = {}  # set -> nonterminal -> bytes to end after it completes there
        self._from: dict[int, int] = {}  # set -> bytes to end from a boundary there (_from_set)

    def _after_scan(self, origin: int, t: int) -> int:
        """The fewest bytes that end the parse once terminal t is scanned at set ``origin``."""
        best = _INF
        for it in self.set_scans[origin].get(t, ()):
            r = it >> 32
            o = origin if not it & ORIGIN else (it & ORIGIN) - 1
            best = min(best, self._suffix[r + 1] + self._finish_at(o).get(self.lhs[r], _INF))
        return best

    def _finish_at(self, o: int) -> dict[int, int]:
        """For each nonterminal some item of set o waits for: the fewest bytes that end the parse
        once it completes with origin o. Items point at earlier sets only (or at their own), so the
        earlier sets are solved first, then this one's own cycles by relaxation."""
        got = self._finish.get(o)
        if got is not None:
            return got
        todo, order = [o], set()
        while todo:  # the earlier sets this one depends on, each once
            x = todo.pop()
            if x in self._finish or x in order:
                continue
            order.add(x)
            todo.extend({(w & ORIGIN) - 1 for ws in self.set_waiting[x].values() for w in ws if w & ORIGIN})
        for x in sorted(order):
            waiting = self.set_waiting[x]
            value = {a: _INF for a in waiting}
            if x == 0:
                value[0] = 0  # <start> complete at the first set: the text is a sentence
            changed = True
            while changed:
                changed = False
                for a, ws in waiting.items():
                    for w in ws:
                        r = w >> 32
                        b = self.lhs[r]
                        after = value.get(b, _INF) if not w & ORIGIN else self._finish[(w & ORIGIN) - 1].get(b, _INF)
                        if self._suffix[r + 1] + after < value[a]:
                            value[a], changed = self._suffix[r + 1] + after, True
            self._finish[x] = value
        return self._finish[o]

    def allowed_bytes(self, s: int) -> np.ndarray:
        """bool [256]: the bytes that may follow configuration s."""
        self.materialize(s)
        return self.trans[s][self.class_map] >= 0


def _nullable(n: int, prods) -> list[bool]:
    """Which of the n nonterminals derive the empty string: a worklist over the productions, each
    waiting on the nonterminals of its body (terminals never are: nullable ones became ``T?``
    nonterminals), where passes over every production until none changed took one pass per level."""
    out = [False] * n
    waiting: list[list[int]] = [[] for _ in range(n)]  # nonterminal -> the productions it occurs in, per occurrence
    left: list[int] = []  # per production: the occurrences of body symbols not known nullable
    ready = []
    for i, (head, body) in enumerate(prods):
        if any(s < 0 for s in body):
            left.append(-1)
            continue
        left.append(len(body))
        for s in body:
            waiting[s].append(i)
        if not body:
            ready.append(head)
    while ready:
        head = ready.pop()
        if out[head]:
            continue
        out[head] = True
        for i in waiting[head]:
            left[i] -= 1
            if left[i] == 0:
                ready.append(prods[i][0])
    return out


def _byte_array(data) -> np.ndarray:
    """data's bytes as a read-only uint8 array (the one array type ``_lex_run`` is compiled for)."""
    return np.frombuffer(data if isinstance(data, bytes) else bytes(data), dtype=np.uint8)


def warm_up_walk() -> None:
    """Call ``_lex_run`` once with the argument types ``CfgAutomaton.walk`` passes: numba compiles or
    loads it here, not inside a token's time bound."""
    table = LexTable()
    _lex_run(np.zeros((1, 1), dtype=np.int32), np.zeros(1, dtype=np.uint8), np.zeros(256, dtype=np.int32), 0,
             _byte_array(b"ab"), 0, False, ExprPool().arena, np.zeros(1, dtype=np.int64), table.items, table.off,
             table.ht, table.hdr, np.zeros((1, 4), dtype=np.int64))  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _lex_run(lex_trans, lex_flags, class_map, lex, data, i, native, arena, reps, items, off, ht, hdr, class_words):
    """From lexer state lex before data[i]: the lexer's steps while the lexeme goes on and cannot end
    (no LEX_ACCEPTS), as ``CfgAutomaton.walk`` takes them one by one; with ``native`` (the caller
    holds the expression arena) a step not made yet is made here (``lex_table.step``). Returns (the
    index of the first byte not taken, the lexer state before it): it stops at the data's end, a
    step not made (or one ``step`` leaves to Python), a dead one, and one where the lexeme may end
    (the parser's step, which the caller makes)."""
    while i < len(data):
        c = class_map[data[i]]
        lex2 = lex_trans[lex, c]
        if lex2 == UNKNOWN and native:
            lex2 = lex_step(arena, lex, c, reps, items, off, ht, hdr, lex_trans, lex_flags, class_words)
        if lex2 < 0 or lex_flags[lex2] & LEX_ACCEPTS:  # UNKNOWN, DEAD, or it may end: the caller's
            break
        lex = lex2
        i += 1
    return i, lex


@numba.njit(cache=True, nogil=True)
def pure_slot(keys: np.ndarray, key: int) -> int:
    """The slot of key in an open-addressing table of int64 keys (-1 where empty; a power-of-two
    length, at most half full): where it is, or the empty slot where it goes."""
    m = len(keys) - 1
    i = (key * 0x9E3779B1) & m
    while keys[i] != -1 and keys[i] != key:
        i = (i + 1) & m
    return i


@numba.njit(cache=True, nogil=True)
def _pure_put(keys: np.ndarray, vals: np.ndarray, key: int, val: int) -> None:
    i = pure_slot(keys, key)
    vals[i] = val
    keys[i] = key
