"""CompiledCfg / CfgMatcher: a context-free grammar against one Vocabulary, behind the Matcher API.

``CompiledCfg`` has the shape of ``CompiledGrammar`` with a ``CfgAutomaton`` (Earley configurations,
lazily determinised) in place of the regex ``LazyDFA``: a numba walk of the vocabulary trie fills
masks (returning to Python only for transitions never computed before), masks are cached per
configuration, forced tokens come from the same ``ForcedTokenizer``. Where a lexeme in flight loops on
a character class (a string body), the vocabulary's precomputed slice of that class supplies its
tokens and the walk skips them, in every parser context, first visits included. So ``CfgMatcher`` is
the regular ``Matcher`` (a stack of ints: rollback is a pop, copy a list copy) and the engine never
cares which kind a constraint is. ``compile_cfg`` sends grammars without recursion to the regular engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numba
import numpy as np

from guided.grammar.automata import lex_table as lexing
from guided.grammar.automata.earley import LEX, LEX_ACCEPTS, LEX_GOES_ON, UNKNOWN, CfgAutomaton, pure_slot
from guided.grammar.automata.expr_pool import ExprPool
from guided.grammar.automata.lex_table import step as lex_step
from guided.grammar.automata.slice_forms import slice_candidate
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.tokens.compiled import AutomatonQueries, CompiledGrammar
from guided.grammar.tokens.matcher import Matcher
from guided.grammar.vocab import Vocabulary

__all__ = ["CompiledCfg", "CfgMatcher", "compile_cfg", "compile_lark", "compile_gbnf"]

_STEP_BUDGET = 4096  # lexer steps one walk round makes at most (the time bound is checked between rounds)
ROW_SUBTREE = 2048  # trie nodes past which a walk asks for a state's slice row (below: walked node by node)
ROW_UNREAD = -2  # a state's slice row not read yet (``_walk``): -1 is "none", >= 0 a row of the epoch
NEED_ROW = -1  # the byte class of a walk's stop that asks for its state's slice row

Encode = Callable[[bytes], list[int]]


class CfgMatcher(Matcher):
    """Per-sequence cursor over a CompiledCfg (the Matcher API, unchanged)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"CfgMatcher(state={self.state}, accepted={self.num_accepted}, grammar={self.compiled.key!r})"


class CompiledCfg(AutomatonQueries):
    """A context-free grammar's automaton over a vocabulary; create with ``compile_cfg``, use via ``matcher()``."""

    _SOURCE = "grammar"
    _VOCABULARY_SIDE = (*AutomatonQueries._VOCABULARY_SIDE, "_desc", "_next_tok", "_tails", "_tail_state",
                        "_tail_rows", "_tail_lock")  # fmt: skip

    def _build(self, pool: ExprPool | None = None) -> None:
        if pool is None:  # the front end's, where it interned terminals already (if it did)
            pool = self.grammar.pool
        if pool is None or pool.spent:
            pool = ExprPool.with_common()
        self.grammar.pool = None  # the first compile's: two compiles never share a pool
        # the terminals' emptiness checks run here, eagerly: bounded like the lazy work they replace
        with pool.bound.limit(self.mask_timeout_s, "compiling the grammar's terminals"):
            self.dfa = CfgAutomaton(self.grammar, pool=pool, max_states=self.max_states)
        self.dfa.timeout_s = self.mask_timeout_s  # forced-token queries read it
        self.pool = pool
        self._build_vocabulary_side()
        self._attach()
        self._inside: dict[int, np.ndarray] = {}  # lexer state -> tokens inside its lexeme (any context)
        self._slice_keys: dict[int, tuple | None] = {}  # configuration -> slice_of
        self._mask_key: dict[int, int] = {}  # configuration -> its clamped configuration (mask)
        self._lex_slices: dict[int, tuple | None] = {}  # lexer state -> its lexemes' widest slice

    def _attach(self) -> None:
        self._desc, self._next_tok, self._tails = self.index.cfg_tables()
        # mid-token slices: configuration -> row of self._tails (an unbounded slice's tails) or -1; the
        # rows live in this process's vocabulary index, so a disk cache load starts them again
        self._restart_tails(self._tails.epoch)
        self._tail_lock = threading.Lock()

    # ------------------------------------------------------------------ queries
    def matcher(self) -> CfgMatcher:
        return CfgMatcher(self)

    def _walk_token(self, state: int, data: bytes) -> int:
        with self.pool.bound.limit(self.mask_timeout_s, "accepting a token"):
            return self.dfa.walk(state, data)

    def _bytes_needed(self, state: int) -> int:
        return self.dfa.bytes_needed(state)

    def cached_mask(self, state: int) -> np.ndarray | None:
        """The configuration's mask when it is computed already, else None; never computes."""
        key = self._mask_key.get(state)
        return self._masks.get(key) if key is not None else None

    def mask(self, state: int) -> np.ndarray:
        """The allowed-token bitmask of a configuration: uint32 [words]. Do not modify. Keyed by the
        configuration with its lexer states' counters clamped past the longest token
        (``CfgAutomaton.clamped``): the same tokens, shared by the positions of a long bounded string."""
        keys = self._mask_key
        key = keys.get(state)
        m = self._masks.get(key) if key is not None else None
        if m is None:
            with self.pool.bound.limit(self.mask_timeout_s, "computing a token mask"):
                if key is None:
                    key = keys[state] = self.dfa.clamped(state, self.trie.max_token_len + 1)
                m = self._masks.get(key)
                if m is None:
                    m = self._masks.put(key, self._compute_mask(key))
        return m

    def _compute_mask(self, state: int) -> np.ndarray:
        """Walk the trie in rounds: each numba pass skips the subtrees behind transitions not computed yet
        and lists them; Python computes those transitions and the next pass resumes in those subtrees.

        Where one lexeme is in flight alone (a pure configuration: a string body, a key, a number), the
        walk goes on in lexeme mode: its state is (origin set, lexer state), its steps are the lexer's
        (``CfgAutomaton.lex_trans``), shared by every parser context the lexeme occurs in, and the
        parser is asked only where the lexeme may end. No configuration is made for the positions
        inside a lexeme.

        When the walk starts inside one lexeme, the tokens that stay inside it depend on the lexer state
        alone: they are recorded once per lexer state, and later walks from any parser context skip the
        subtrees whose bytes cannot end the lexeme, OR-ing the record in.
        """
        trie, dfa = self.trie, self.dfa
        inmask = np.zeros(self._words, dtype=np.uint32)
        stack = np.zeros(self._stack_len, dtype=np.int32)
        keys = np.zeros(self._stack_len, dtype=np.int64)
        ins = np.zeros(self._stack_len, dtype=np.uint8)
        sl, hi = self._slice(state)
        if sl is not None:  # the slice's tokens are allowed; the walk skips the subtrees made of them
            mask, skipcap, lex = sl.masks[hi].copy(), sl.skipcap, -1
        else:
            mask, skipcap, lex = np.zeros(self._words, dtype=np.uint32), trie.no_skip, dfa.pure_lex[state]
        known = self._inside.get(lex) if lex >= 0 else None
        jobs, out = _buffers(trie.n_nodes)
        pure = int(dfa.pure[state])
        jobs[0] = (0, -1 if pure >= 0 else state, pure, 0, lex >= 0)  # the whole trie from state
        k, whole = 1, True
        want_cfg, want_lex = ([], [pure & (LEX - 1)]) if pure >= 0 else ([state], [])  # the whole trie's rows
        while k:
            self.pool.bound.check()  # one clock read per round: a slow first visit fails its request
            if known is not None:
                dfa.prepare_exits()
            cfg_tail, lex_tail, tails = self._sync_tails(want_cfg, want_lex)
            # lexer steps in the walk (lex_table.step) write the automaton's lexer tables and the
            # expression arena: only while this thread holds both, else the walk leaves them to Python
            native = lexing.NATIVE_STEPS and dfa.lock.acquire(blocking=False)
            if native and not self.pool.try_hold():
                dfa.lock.release()
                native = False
            try:
                with dfa.lock:  # arrays regrown together, read together
                    trans, internal, pure_of = dfa.trans, dfa.internal, dfa.pure
                    lex_trans, lex_flags, lex_exit = dfa.lex_trans, dfa.lex_flags, dfa.lex_exit
                    pure_keys, pure_vals = dfa.pure_keys, dfa.pure_vals
                    lt = dfa.lex_table
                if native:
                    lt.reserve(64, 1024)
                k = _walk(
                    trie.node_byte, trie.node_depth, trie.node_end, trie.tok_start, trie.tok_end, trie.token_ids,
                    dfa.class_map, trans, internal, pure_of, lex_trans, lex_flags, lex_exit, pure_keys, pure_vals,
                    self._desc, known is not None, skipcap, hi, jobs[:k], whole, stack, keys, ins, mask, inmask, out,
                    cfg_tail, lex_tail, tails, ROW_SUBTREE, self._next_tok,
                    native, _STEP_BUDGET if native else 0, self.pool.arena, dfa.rep_bytes, lt.items, lt.off,
                    lt.ht, lt.hdr, dfa.class_words,
                )  # fmt: skip
            finally:
                if native:
                    self.pool.let_go()
                    try:
                        dfa.sync_lex()
                    finally:
                        dfa.lock.release()
            todo = set(zip(out[:k, 1].tolist(), out[:k, 2].tolist(), out[:k, 3].tolist(), strict=True))
            want_cfg, want_lex = [], []
            for c, lexeme, cls in todo:
                if cls == NEED_ROW:
                    (want_cfg.append(c) if c >= 0 else want_lex.append(lexeme & (LEX - 1)))
                elif c >= 0:
                    dfa.entry(c, cls)
                else:
                    dfa.pure_entry(lexeme, cls)
            jobs, out, whole = out, jobs, False
        if known is not None:
            mask |= known
        elif lex >= 0:
            self._inside[lex] = inmask
        if dfa.accepting[state]:
            mask |= self._eos_mask
        return mask

    def slice_of(self, state: int) -> tuple | None:
        """(character class key, max repeats or -1) when some lexeme in flight at configuration state is
        ``X{lo,hi} rest``: every token of at most hi X-characters then stays inside that lexeme, whatever
        the parser context (see ``slice_forms.slice_candidate`` and ``slices.Slice``); else None."""
        if state in self._slice_keys:
            return self._slice_keys[state]
        dfa, best = self.dfa, None
        with dfa.lock:
            for x in dfa.configs[state][1]:
                best = _wider_slice(best, self._lex_slice(x & (LEX - 1)))
        self._slice_keys[state] = best
        return best

    def _lex_slice(self, lex: int) -> tuple | None:
        """``slice_of`` for one lexer state (cached: many configurations share their lexer states)."""
        r = self._lex_slices.get(lex, False)
        if r is False:
            r = None
            for _, e in self.dfa.lexstates[lex]:
                r = _wider_slice(r, slice_candidate(self.dfa.pool, e))
            self._lex_slices[lex] = r
        return r

    # (epoch of the TailRows numbers, configuration -> row, -1 or ROW_UNREAD, the same per lexer state
    # (lexeme mode)): one tuple, replaced whole
    @property
    def _cfg_tail(self) -> np.ndarray:
        return self._tail_state[1]

    @property
    def _lex_tail(self) -> np.ndarray:
        return self._tail_state[2]

    def _restart_tails(self, epoch: int) -> None:
        """Records made afresh for ``epoch`` of the shared rows (the numbers of another are stale)."""
        self._tail_state = (epoch, np.full(64, ROW_UNREAD, dtype=np.int32), np.full(64, ROW_UNREAD, dtype=np.int32))
        self._tail_rows: dict[tuple, int] = {}  # slice candidate -> its row or -1, in that epoch

    def _sync_tails(self, want_cfg=(), want_lex=()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(configuration -> row of ``TailRows``, -1 or ``ROW_UNREAD``, the same per lexer state, the
        rows), with the rows of the configurations ``want_cfg`` and lexer states ``want_lex`` read: the
        walk skips, below a node whose configuration (lexer state, in lexeme mode) has an unbounded
        slice, the subtrees that spell only that slice's characters (``Slice.tails``), OR-ing in their
        tokens. A state's slice is read only when a walk meets it above a big subtree (``_walk`` asks):
        most states (inside keys and numbers, deep in the trie) never are, and reading one is Python
        time. Row numbers and rows are of one epoch of ``TailRows.table`` (each read once: other
        threads may start a new one); entries are written in place, where a walk reading the array
        sees ROW_UNREAD or the row, either of which it takes."""
        epoch, rows = self._tails.table
        mine, cfg, lex = self._tail_state
        if mine == epoch and not want_cfg and not want_lex:
            return cfg, lex, rows
        with self._tail_lock:
            for _ in range(2):  # the second time in the epoch a first reading started
                epoch, rows = self._tails.table
                if self._tail_state[0] != epoch:
                    self._restart_tails(epoch)
                _, cfg, lex = self._tail_state
                cfg, lex = _room(cfg, self.dfa.n_states), _room(lex, len(self.dfa.lexstates))
                if self._read_rows(cfg, want_cfg, self.slice_of, epoch) and self._read_rows(
                    lex, want_lex, self._lex_slice, epoch
                ):
                    self._tail_state = (epoch, cfg, lex)
                    return cfg, lex, rows
            # this grammar's slices alone take more rows than an epoch holds: this round walks without
            n, n_lex = self.dfa.n_states, len(self.dfa.lexstates)
            return np.full(n, -1, dtype=np.int32), np.full(n_lex, -1, dtype=np.int32), rows

    def _read_rows(self, table: np.ndarray, want, slice_of, epoch: int) -> bool:
        """Fill table's entries of the states in want (their slice's row of tails in ``epoch``, or -1);
        False when the shared rows moved to a new epoch meanwhile (the entries written are of ``epoch``)."""
        rows = self._tail_rows
        for s in want:
            if table[s] != ROW_UNREAD:
                continue
            candidate = slice_of(s)
            if candidate is None:
                table[s] = -1
                continue
            row = rows.get(candidate)
            if row is None:
                row = self._tails.row(*candidate, epoch)
                if row is None:
                    return False
                rows[candidate] = row
            table[s] = row
        return True

    def _slice(self, state: int):
        """(Slice, bound) of the character class some lexeme in flight loops on, or (None, -1)."""
        candidate = self.slice_of(state)
        sl = None if candidate is None else self.index.slice_for(candidate[0], lazy=True)
        return (None, -1) if sl is None else (sl, sl.bound(candidate[1]))

    def __repr__(self) -> str:
        return f"CompiledCfg({self.key!r}, configurations={self.dfa.n_states}, vocabulary={self.vocabulary.name!r})"


def _room(table: np.ndarray, n: int) -> np.ndarray:
    """table when it has n entries, else a new one with its entries and ROW_UNREAD past them (a walk
    may still be reading the old one)."""
    if len(table) >= n:
        return table
    grown = np.full(max(n, 2 * len(table)), ROW_UNREAD, dtype=np.int32)
    grown[: len(table)] = table
    return grown


def _wider_slice(best: tuple | None, c: tuple | None) -> tuple | None:
    """The slice candidate of the two allowing more repeats (-1: unbounded), the first on a tie."""
    if c is not None and (best is None or best[1] >= 0 and (c[1] < 0 or c[1] > best[1])):
        return c
    return best


@numba.njit(cache=True, nogil=True)
def _walk(node_byte, node_depth, node_end, tok_start, tok_end, token_ids, class_map, trans, internal, pure,
          lex_trans, lex_flags, lex_exit, pure_keys, pure_vals, desc, prune, skipcap, hi, jobs, whole, stack, keys,
          ins, mask, inmask, out, cfg_tail, lex_tail, tails, row_subtree, next_tok, native, budget, arena, reps,
          lex_items, lex_off, lex_ht, lex_hdr, class_words):  # fmt: skip
    """Depth-first over the trie subtrees of the nodes jobs[r, 0] (the whole trie when ``whole``), the
    state before each being jobs[r, 1] (a configuration) or, when that is -1, jobs[r, 2] (lexeme mode:
    the one lexeme in flight, origin set * LEX + lexer state, of a pure configuration); one state per
    depth in stack and keys, and in ins whether the path so far stayed inside the starting lexeme
    (jobs[r, 4] at the job's node). A transition into a pure configuration goes on in lexeme mode; in
    lexeme mode a lexer step (``lex_trans``) that cannot end the lexeme stays in it, and one that can
    goes through the pure configuration's own transition (found in the ``pure_keys``/``pure_vals``
    table). Nodes whose step is still UNKNOWN, or whose pure configuration is not made yet, are
    written to out as (node, configuration or -1, lexeme or -1, byte class, inside) and their subtree
    skipped; a DEAD transition skips the subtree for good. A state whose slice row is not read yet
    (``ROW_UNREAD``, or past the tables) is written there too, with the class ``NEED_ROW``, before a
    subtree of more than ``row_subtree`` nodes (a smaller one is walked without the row). Tokens reached inside the starting lexeme
    also go to inmask; with ``prune``, a subtree inside it whose bytes (desc) cannot end the lexeme
    (lex_exit) is skipped: its tokens are in the caller's record. Subtrees with skipcap <= hi (tokens of
    a slice the caller put in mask) are skipped too. Below a state s whose slice row (``cfg_tail``,
    ``lex_tail`` in lexeme mode) is >= 0, a node whose subtree spells only that slice's characters
    (``tails[row]``) has its subtree's tokens (token_ids[next_tok[node]:next_tok[node_end[node]]])
    OR-ed in and is skipped; on a path inside the starting lexeme they go to inmask too: s's lexer
    state follows from the starting one and the path alone, and the slice from the lexer state alone,
    so they are allowed in every parser context that the record serves.
    With ``native`` (the caller holds the automaton's lock and the expression arena), an UNKNOWN
    lexer step is made here (``lex_table.step``, at most ``budget`` of them): the walk goes on through
    a lexeme without a round per byte. A lexer state made here has no slice row yet: the walk asks
    for it before a big subtree, as above.
    Returns how many were written."""
    n_out = 0
    for r in range(len(jobs)):
        i = jobs[r, 0]
        end = len(node_byte) if whole else node_end[i]
        stack[node_depth[i] - 1] = jobs[r, 1]
        keys[node_depth[i] - 1] = jobs[r, 2]
        ins[node_depth[i] - 1] = jobs[r, 4]
        while i < end:
            if skipcap[i] <= hi:  # a subtree of slice tokens: already in mask
                i = node_end[i]
                continue
            d = node_depth[i]
            s = stack[d - 1]
            key = keys[d - 1]
            lex = key & (LEX - 1)
            if s >= 0:
                row = cfg_tail[s] if s < len(cfg_tail) else ROW_UNREAD
            else:
                row = lex_tail[lex] if lex < len(lex_tail) else ROW_UNREAD
            if row == ROW_UNREAD:
                if node_end[i] - i > row_subtree:  # worth a row: Python reads the state's slice, the next
                    n_out = _stop(out, n_out, i, s, key, NEED_ROW, ins[d - 1])  # round resumes here
                    i = node_end[i]
                    continue
                row = -1
            if row >= 0 and tails[row, i] == 1:  # X-characters from here on: all allowed
                record = ins[d - 1] == 1
                for k in range(next_tok[i], next_tok[node_end[i]]):
                    tid = token_ids[k]
                    bit = np.uint32(1) << np.uint32(tid & 31)
                    mask[tid >> 5] |= bit
                    if record:
                        inmask[tid >> 5] |= bit
                i = node_end[i]
                continue
            c = class_map[node_byte[i]]
            inside = False
            t = UNKNOWN
            if s < 0:  # lexeme mode
                lex2 = lex_trans[lex, c]
                if lex2 == UNKNOWN and budget > 0:
                    budget -= 1
                    lex2 = lex_step(arena, lex, c, reps, lex_items, lex_off, lex_ht, lex_hdr, lex_trans, lex_flags,
                                    class_words)  # fmt: skip
                if lex2 == UNKNOWN:
                    t = UNKNOWN
                elif lex2 < 0 or lex_flags[lex2] & (LEX_ACCEPTS | LEX_GOES_ON) == 0:  # no lexeme: dead
                    i = node_end[i]
                    continue
                elif lex_flags[lex2] & LEX_ACCEPTS == 0:  # the lexeme goes on, nothing else can happen
                    stack[d] = -1
                    keys[d] = key - lex + lex2
                    inside = ins[d - 1] == 1
                    t = 0
                else:  # it may end here: the parser's step, from the pure configuration
                    slot = pure_slot(pure_keys, key)
                    if pure_keys[slot] == key:
                        s = pure_vals[slot]
                        t = trans[s, c]
            else:
                t = trans[s, c]
            if t == UNKNOWN:
                n_out = _stop(out, n_out, i, stack[d - 1], key, c, ins[d - 1])
                i = node_end[i]
                continue
            if t < 0:
                i = node_end[i]
                continue
            if s >= 0:  # a configuration's transition
                inside = ins[d - 1] == 1 and internal[s, c] == 1
                if pure[t] >= 0:
                    stack[d] = -1
                    keys[d] = pure[t]
                else:
                    stack[d] = t
                    keys[d] = -1
            ins[d] = inside
            for k in range(tok_start[i], tok_end[i]):
                tid = token_ids[k]
                bit = np.uint32(1) << np.uint32(tid & 31)
                mask[tid >> 5] |= bit
                if inside:
                    inmask[tid >> 5] |= bit
            if inside and prune:  # inside: the state reached is lexeme mode
                x = keys[d] & (LEX - 1)
                if (
                    (desc[i, 0] & lex_exit[x, 0]) == 0 and (desc[i, 1] & lex_exit[x, 1]) == 0
                    and (desc[i, 2] & lex_exit[x, 2]) == 0 and (desc[i, 3] & lex_exit[x, 3]) == 0
                ):  # fmt: skip
                    i = node_end[i]
                    continue
            i += 1
    return n_out


@numba.njit(cache=True, nogil=True, inline="always")
def _stop(out, n_out, i, s, key, c, inside):
    """Write a walk's stop (node, configuration or -1, lexeme or -1, byte class or NEED_ROW, inside) as
    out's row n_out; the number of rows after it."""
    out[n_out, 0] = i
    out[n_out, 1] = s
    out[n_out, 2] = key
    out[n_out, 3] = c
    out[n_out, 4] = inside
    return n_out + 1


_LOCAL = threading.local()


def _buffers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two int64 [n, 5] job lists for the walk rounds (reused per thread: a mask writes what it reads)."""
    bufs = getattr(_LOCAL, "bufs", None)
    if bufs is None or len(bufs[0]) < n:
        bufs = _LOCAL.bufs = (np.empty((n, 5), dtype=np.int64), np.empty((n, 5), dtype=np.int64))
    return bufs


def compile_cfg(
    vocabulary: Vocabulary, grammar: CfgGrammar, key: object = None, regular_fast_path: bool = True, **options
) -> CompiledCfg | CompiledGrammar:
    """Compile a CfgGrammar against a vocabulary (options as for ``CompiledCfg``).

    A grammar without recursion is a regular language: it goes to the regular engine
    (``CompiledGrammar``, whose masks are keyed by clamped counters) unless ``regular_fast_path`` is
    False. Either way the result makes matchers with the same API.
    """
    node = grammar.to_regex() if regular_fast_path else None
    if node is not None:  # in the pool where the front end interned terminals already, as CompiledCfg is
        pool, grammar.pool = grammar.pool, None
        return CompiledGrammar(vocabulary, node, key=key, pool=pool, **options)
    return CompiledCfg(vocabulary, grammar, key=key, **options)


def compile_lark(
    vocabulary: Vocabulary, text: str, start: str = "start", import_paths=(), **options
) -> CompiledCfg | CompiledGrammar:
    """Compile Lark grammar text (see ``lark_frontend.parse_lark``)."""
    return compile_cfg(
        vocabulary, parse_lark(text, start, import_paths), key=("lark", text, start), **options
    )


def compile_gbnf(
    vocabulary: Vocabulary, text: str, start: str = "root", **options
) -> CompiledCfg | CompiledGrammar:
    """Compile GBNF text (see ``gbnf_frontend.parse_gbnf``)."""
    return compile_cfg(vocabulary, parse_gbnf(text, start), key=("gbnf", text, start), **options)
