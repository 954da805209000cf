"""CompileService: constraints compiled off the hot path, once per key, within a time bound.

The engine never compiles: a request carries a ``PendingGrammar`` and waits in its own state until
``ready()``; the batch runs on meanwhile. Identical constraints submitted concurrently share one
compile (and the GrammarCompiler's LRU keeps finished ones). A compile that outlives its bound fails
its request with ``CompileTimeoutError``; the worker thread finishes in the background and its result
still lands in the cache.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from guided.constraints import Choice, Constraint, Grammar, JsonSchema, Regex
from guided.errors import CompileTimeoutError, ConfigError, LimitError
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.regex_ast import alt, literal
from guided.grammar.vocab import Vocabulary
from guided.limits import Limits, check_text
from guided.schema.compiler import compile_json_schema

__all__ = ["CompileService", "PendingGrammar"]


@dataclass(slots=True)
class PendingGrammar:
    """A compile in flight for one request: poll ``ready()``, then take ``result()``.

    The time bound runs from when a worker starts the compile (``started[0]``), not from submission:
    waiting behind other compiles in the queue does not count against it.
    """

    future: Future
    started: list  # [monotonic start time or None], shared by every request of the same compile
    timeout_s: float

    def ready(self) -> bool:
        if self.future.done():
            return True
        start = self.started[0]
        return start is not None and time.monotonic() >= start + self.timeout_s

    def result(self):
        """The CompiledGrammar; raises the compile's error, or CompileTimeoutError past the deadline."""
        if not self.future.done():
            raise CompileTimeoutError("compiling the constraint took longer than its time bound")
        return self.future.result()


class CompileService:
    """Compiles Constraint specs for one vocabulary in a small worker pool.

    Parameters
    ----------
    vocabulary : Vocabulary
    encode : callable, optional
        The tokenizer's encode for canonical forced tokens (see GrammarCompiler).
    workers : int
        Compile threads.
    timeout_s : float
        Time bound of one compile, as seen by the request that waits for it.
    limits : Limits, optional
        Size bounds checked before compiling (text sizes, schema pre-pass, automaton states, mask
        cache); its ``compile_timeout_s`` replaces ``timeout_s`` when given.
    """

    def __init__(self, vocabulary: Vocabulary, encode=None, workers: int = 2, timeout_s: float = 10.0,
                 cache_size: int = 256, limits: Limits | None = None):  # fmt: skip
        if timeout_s <= 0:
            raise ConfigError(f"compile timeout must be positive, got {timeout_s}")
        self.grammars = GrammarCompiler(vocabulary, cache_size=cache_size, encode=encode)
        self.set_limits(limits or Limits(compile_timeout_s=float(timeout_s)))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="guided-compile")
        self._inflight: dict[tuple, tuple[Future, list]] = {}
        self._compiled: BoundedCache[tuple, bool] = BoundedCache(cache_size)  # keys compiled lately
        self._lock = threading.Lock()
        self.compiles = 0  # compiles started (cache misses)
        self.shared = 0  # submissions that joined a compile already in flight

    def submit(self, constraint: Constraint) -> PendingGrammar:
        """Start (or join) the compile of ``constraint``; never blocks on the compile itself."""
        key = constraint.key
        with self._lock:
            entry = self._inflight.get(key)
            new = entry is None
            if new:
                self.compiles += 1
                started: list = [None]
                entry = (self._pool.submit(self._timed_compile, constraint, started), started)
                self._inflight[key] = entry
            else:
                self.shared += 1
        future, started = entry
        if new:  # outside the lock: a finished future runs the callback right here
            future.add_done_callback(lambda f, k=key: self._done(k, f))
        return PendingGrammar(future, started, self.timeout_s)

    def set_limits(self, limits: Limits) -> None:
        """Apply ``limits`` to compiles submitted from now on."""
        self.limits = limits
        self.timeout_s = limits.compile_timeout_s
        self.grammars.max_states = limits.automaton_states
        self.grammars.mask_cache_bytes = limits.mask_cache_bytes

    def compile(self, constraint: Constraint):
        """Compile synchronously (for tools and tests), with the same bound and errors."""
        pending = self.submit(constraint)
        try:
            return pending.future.result(timeout=self.timeout_s)
        except TimeoutError:
            raise CompileTimeoutError(
                f"compiling the constraint took longer than {self.timeout_s:g} s"
            ) from None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def is_known(self, constraint: Constraint) -> bool:
        """Whether ``constraint`` compiled lately or is compiling now (a submit would not start a compile)."""
        return constraint.key in self._compiled or constraint.key in self._inflight

    def _done(self, key: tuple, future: Future) -> None:
        with self._lock:
            entry = self._inflight.get(key)
            if entry is not None and entry[0] is future:
                del self._inflight[key]
        if not future.cancelled() and future.exception() is None:
            self._compiled.put(key, True)

    def _timed_compile(self, constraint: Constraint, started: list):
        started[0] = time.monotonic()
        self._check(constraint)
        try:
            return self._compile(constraint)
        except RecursionError:  # a safety net: nesting the depth pre-checks did not catch
            raise LimitError("the constraint nests too deeply to compile (recursion limit)") from None

    def _check(self, constraint: Constraint) -> None:
        """Text and count limits, before any parsing work."""
        limits = self.limits
        if isinstance(constraint, Regex):
            check_text(limits, "regex_bytes", constraint.pattern, "the regex")
        elif isinstance(constraint, Grammar):
            check_text(limits, "grammar_bytes", constraint.text, "the grammar")
        elif isinstance(constraint, Choice):
            if len(constraint.options) > limits.choice_options:
                raise limits.exceeded("choice_options", len(constraint.options), "the choice")
            check_text(limits, "grammar_bytes", "".join(constraint.options), "the choice options")

    def _compile(self, constraint: Constraint):
        compiler = self.grammars
        hook = getattr(constraint, "compile", None)
        if hook is not None:  # constraints defined elsewhere (tool calls) compile themselves: hook(compiler, limits)
            return hook(compiler, self.limits)
        if isinstance(constraint, Regex):
            return compiler.compile_regex(constraint.pattern)
        if isinstance(constraint, Choice):

            return compiler.compile_ast(alt(*(literal(o) for o in constraint.options)), key=constraint.key)
        if isinstance(constraint, JsonSchema):

            return compile_json_schema(
                compiler, constraint.schema, strict=constraint.strict, lenient=constraint.lenient,
                whitespace=constraint.whitespace, limits=self.limits,
            )  # fmt: skip
        if isinstance(constraint, Grammar):
            return compiler.compile_grammar(constraint.text, syntax=constraint.syntax)
        raise ConfigError(f"unknown constraint {constraint!r}")
