"""GrammarCompiler: constraint -> CompiledGrammar for one Vocabulary, with a thread-safe LRU cache.

``compile_regex`` parses a pattern; ``compile_ast`` takes a regex AST built directly (the JSON Schema
compiler lowers schemas to ``regex_ast`` nodes and calls it); ``compile_lark`` / ``compile_gbnf`` /
``compile_cfg`` take context-free grammars (text, or the grammar IR), which give matchers with the same
API. Compilation is lazy by design: it
interns the expression, finds the byte classes and checks the language is non-empty; DFA rows and
masks are computed on first visit.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

import numpy as np

from guided.errors import GrammarError
from guided.grammar.automata.earley import warm_up_walk
from guided.grammar.automata.lazy_dfa import warm_up_core
from guided.grammar.automata.lex_table import warm_up as warm_up_lex_table
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.cfg_ir import CfgGrammar
from guided.grammar.collector import quiet_collector
from guided.grammar.disk_cache import GrammarDiskCache
from guided.grammar.frontends.ecma_regex import parse_regex
from guided.grammar.frontends.gbnf_grammar import parse_gbnf
from guided.grammar.frontends.lark_grammar import parse_lark
from guided.grammar.regex_ast import Node
from guided.grammar.tokens.compiled import CompiledGrammar
from guided.grammar.tokens.compiled_cfg import CompiledCfg, compile_cfg
from guided.grammar.tokens.vocab_index import vocab_index
from guided.grammar.vocab import Vocabulary

__all__ = ["GrammarCompiler", "warm_up"]

logger = logging.getLogger("guided.grammar.compiler")


class GrammarCompiler:
    """Compiles constraints against one vocabulary, caching the results.

    Parameters
    ----------
    vocabulary : Vocabulary
    cache_size : int
        How many compiled grammars to keep (least recently used are dropped).
    encode : callable, optional
        ``encode(bytes) -> list[int]``: the tokenizer's canonical encoding of text as a continuation
        (no BOS, no dummy prefix). Used for forced tokens; without it they use greedy longest match.
    max_states : int
        Bound on DFA states per grammar (LimitError past it).
    mask_cache_bytes : int
        Bound on the memory of cached masks per grammar.
    mask_timeout_s : float or None
        Bound on the lazy work of one mask / token transition of a regular grammar (LimitError past it).
    disk_cache : GrammarDiskCache, optional
        Where compiled grammars persist across processes: a grammar missing from the memory cache is
        loaded from there when it is stored, else compiled and stored.
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        cache_size: int = 256,
        encode: Callable[[bytes], list[int]] | None = None,
        max_states: int = 500_000,
        mask_cache_bytes: int = 256 << 20,
        mask_timeout_s: float | None = 5.0,
        disk_cache: GrammarDiskCache | None = None,
    ):
        self.vocabulary = vocabulary
        self.cache_size = cache_size
        self.encode = encode
        self.max_states = max_states
        self.mask_cache_bytes = mask_cache_bytes
        self.mask_timeout_s = mask_timeout_s
        self.disk_cache = disk_cache
        self._cache: BoundedCache[tuple, CompiledGrammar | CompiledCfg] = BoundedCache(cache_size, on_evict=_release)
        warm_up(vocabulary)

    def compile_regex(self, pattern: str, search: bool = False) -> CompiledGrammar:
        """Compile an ECMA-262 regex; the text must match it fully (``search=True``: contain a match)."""
        return self._cached(("regex", pattern, search), lambda: parse_regex(pattern, search=search))

    def compile_ast(self, node: Node, key: object = None) -> CompiledGrammar:
        """Compile a regex AST (``guided.grammar.regex_ast``); ``key`` (hashable) names it in the cache,
        the node itself is the key when omitted."""
        return self._cached(("ast", node if key is None else key), lambda: node)

    def compile_lark(self, text: str, start: str = "start", import_paths=()) -> CompiledGrammar | CompiledCfg:
        """Compile Lark grammar text (context-free; a grammar without recursion takes the regular path)."""
        key = ("lark", text, start, tuple(import_paths))
        # a grammar that imports files other than Lark's common.lark is not kept on disk: the key does not
        # hold those files, which may change between processes
        persist = not import_paths and all(m == "common" or m.startswith("common.") for m in re.findall(r"%import\s+([\w.]+)", text))
        return self._cached_grammar(key, lambda: parse_lark(text, start, import_paths), persist)

    def compile_gbnf(self, text: str, start: str = "root") -> CompiledGrammar | CompiledCfg:
        """Compile llama.cpp GBNF grammar text (``root`` is the start rule by default)."""
        return self._cached_grammar(("gbnf", text, start), lambda: parse_gbnf(text, start))

    def compile_grammar(self, text: str, syntax: str = "lark") -> CompiledGrammar | CompiledCfg:
        """Compile grammar text in ``syntax`` "lark" or "gbnf"."""
        if syntax == "gbnf":
            return self.compile_gbnf(text)
        if syntax == "lark":
            return self.compile_lark(text)
        raise GrammarError(f"unknown grammar syntax {syntax!r}: 'lark' or 'gbnf'")

    def compile_cfg(self, grammar: CfgGrammar, key: object) -> CompiledGrammar | CompiledCfg:
        """Compile a grammar IR built directly (e.g. a recursive JSON Schema); ``key`` names it."""
        return self._cached_grammar(("cfg", key), lambda: grammar)

    def compile_lowered(self, key: tuple, lower: Callable[[], Node | CfgGrammar]) -> CompiledGrammar | CompiledCfg:
        """Compile what ``lower()`` builds (a regex AST, or grammar IR for the context-free path), cached
        under ``key`` (plain values: it names the disk entry too). A cached grammar, in memory or on
        disk, never calls ``lower``."""
        opts = dict(self._options(), mask_timeout_s=self.mask_timeout_s)

        def make():
            lang = lower()
            if isinstance(lang, CfgGrammar):
                return compile_cfg(self.vocabulary, lang, key=key, **opts)
            return CompiledGrammar(self.vocabulary, lang, key=key, **opts)

        return self._lookup(key, make, source=lower)

    def _options(self) -> dict:
        return dict(encode=self.encode, max_states=self.max_states, mask_cache_bytes=self.mask_cache_bytes)

    def _cached_grammar(self, key: tuple, build: Callable[[], CfgGrammar], persist: bool = True):
        opts = dict(self._options(), mask_timeout_s=self.mask_timeout_s)
        return self._lookup(key, lambda: compile_cfg(self.vocabulary, build(), key=key, **opts), persist, source=build)

    def _cached(self, key: tuple, build: Callable[[], Node]) -> CompiledGrammar:
        opts = dict(self._options(), mask_timeout_s=self.mask_timeout_s)
        return self._lookup(key, lambda: CompiledGrammar(self.vocabulary, build(), key=key, **opts), source=build)

    def _lookup(self, key: tuple, make: Callable[[], CompiledGrammar | CompiledCfg], persist: bool = True,
                source: Callable[[], Node | CfgGrammar] | None = None):  # fmt: skip
        """The cached grammar for ``key``, else ``make()``'s (or the disk cache's); a grammar built here
        drops its source AST, which ``source()`` (what ``make`` compiles) can build again."""
        load = (lambda: self._load_or_make(key, make)) if persist else make

        def build():
            compiled = load()
            if source is not None:
                compiled.release_source(_rebuilder(source, regular=not isinstance(compiled, CompiledCfg)))
            return compiled

        entry = key + (self.vocabulary.fingerprint,)
        cached = self._cache.get(entry)
        if cached is not None:
            if not cached.spent:
                return cached
            self._cache.pop(entry)  # a capacity bound was hit at mask time: build it afresh
        return self._cache.get_or_create(entry, lambda: _quietly(build))

    def _load_or_make(self, key: tuple, make: Callable[[], CompiledGrammar | CompiledCfg]):
        disk = self.disk_cache
        if disk is None:
            return make()
        bounds = dict(max_states=self.max_states, mask_cache_bytes=self.mask_cache_bytes,
                      mask_timeout_s=self.mask_timeout_s)  # fmt: skip
        compiled = disk.load(key, self.vocabulary, self.encode, **bounds)
        if compiled is None:
            t0 = time.perf_counter()
            compiled = make()
            disk.save(key, compiled, build_s=time.perf_counter() - t0)  # before any other thread sees it
        return compiled


def _rebuilder(source: Callable[[], Node | CfgGrammar], regular: bool) -> Callable[[], Node | CfgGrammar]:
    """What builds a released grammar's source again: ``source()``, as a regex when the grammar IR took
    the regular path (``compile_cfg``). Refers to no grammar, so a grammar holding it has no cycle."""

    def rebuild():
        lang = source()
        return lang.to_regex() if regular and isinstance(lang, CfgGrammar) else lang

    return rebuild


def _quietly(build: Callable[[], CompiledGrammar | CompiledCfg]) -> CompiledGrammar | CompiledCfg:
    """``build()`` with the cyclic collector held off (see ``guided.grammar.collector``)."""
    with quiet_collector():
        return build()


def _release(compiled) -> None:
    """A grammar the cache lets go of drops what callers kept on it (the JSON checks' wrappers, which
    refer back to it): with that cycle broken, reference counting frees it once no request uses it,
    and no full pass of the collector has to find it."""
    compiled.__dict__.pop("_wrappers", None)


_WARM: set[str] = set()  # fingerprints of the vocabularies warmed up in this process
_WARM_LOCK = threading.Lock()
NOTICE_AFTER_S = 5.0  # a warm-up still running then is compiling: the process says so, once
COMPILING = ("guided: compiling the mask code (numba's JIT: once per machine and guided version, about a minute on "
             "2 cores; `guided warm-up` does it ahead of time, e.g. in a container image's build) ...")  # fmt: skip


def warm_up(vocabulary: Vocabulary) -> None:
    """Build the vocabulary's index and fill one regular and one context-free mask, once per process:
    numba's JIT compilation (or its cache load, about a second) then happens here, when a compiler is
    made, and never inside a compile's or a mask's time bound. Still running after ``NOTICE_AFTER_S``
    (the JIT of a cold process), it logs ``COMPILING`` once: a long first start says why."""
    with _WARM_LOCK:
        if vocabulary.fingerprint in _WARM:
            return
        notice = threading.Timer(NOTICE_AFTER_S, logger.warning, (COMPILING,))  # a cold start is not a hang
        notice.daemon = True
        notice.start()
        try:
            vocab_index(vocabulary).cfg_tables()
            warm_up_core()
            warm_up_lex_table()
            warm_up_walk()
            row = np.zeros(vocabulary.bitmask_words, dtype=np.int32)
            nested = parse_lark('start: "(" start? ")"', "start")
            for compiled in (CompiledGrammar(vocabulary, parse_regex("[a-z]{1,3}"), mask_timeout_s=None),
                             compile_cfg(vocabulary, nested, regular_fast_path=False, mask_timeout_s=None)):  # fmt: skip
                compiled.matcher().fill_bitmask(row)
        finally:
            notice.cancel()
        _WARM.add(vocabulary.fingerprint)
