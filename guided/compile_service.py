"""CompileService: constraints compiled off the hot path, once per key, within a time bound.

The engine never compiles: a request carries a ``PendingGrammar`` and waits in its own state until
``ready()``; the batch runs on meanwhile. Identical constraints submitted concurrently share one
compile (and the GrammarCompiler's LRU keeps finished ones). A compile that outlives its bound fails
its request with ``CompileTimeoutError``; the worker thread finishes in the background and its result
still lands in the cache.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from guided.constraints import Choice, Constraint, Grammar, JsonSchema, Reasoning, Regex, StructuralTag
from guided.errors import CompileTimeoutError, ConfigError, GuidedError, LimitError
from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.compiler import GrammarCompiler
from guided.grammar.disk_cache import GrammarDiskCache
from guided.grammar.regex_ast import alt, literal
from guided.grammar.vocab import Vocabulary
from guided.limits import Limits, check_text
from guided.schema.compiler import compile_json_schema
from guided.schema.unique_runtime import prepare as prepare_checks
from guided.structural import compile_reasoning, compile_structural

__all__ = ["CompileService", "PendingGrammar", "grammar_cache_dir"]

logger = logging.getLogger("guided.compile_service")
GRAMMAR_CACHE_ENV = "GUIDED_GRAMMAR_CACHE"
_OFF = ("", "0", "off", "none", "false", "no")


def grammar_cache_dir(spec: str | os.PathLike | None = "auto") -> Path | None:
    """Where compiled grammars persist: ``spec`` a directory, None / "off" for nowhere, "auto" for
    ``$GUIDED_GRAMMAR_CACHE`` (a directory, or "off") else ``grammars/`` under ``$GUIDED_CACHE``
    (``~/.cache/guided`` by default)."""
    if spec is None:
        return None
    if str(spec) == "auto":
        spec = os.environ.get(GRAMMAR_CACHE_ENV)
        if spec is None:
            from guided.builtin.tokenizers import cache_dir  # lazy: only a default cache needs it

            return cache_dir() / "grammars"
    if str(spec).strip().lower() in _OFF:
        return None
    return Path(spec).expanduser()


def _disk_cache(spec, max_bytes: int) -> GrammarDiskCache | None:
    """The disk cache ``spec`` names (see ``grammar_cache_dir``). A directory that cannot be made is a
    ConfigError when named, a warning (and no disk cache) when it is the default."""
    directory = grammar_cache_dir(spec)
    if directory is None:
        return None
    if max_bytes <= 0:
        raise ConfigError(f"grammar_cache_bytes must be positive, got {max_bytes}")
    import guided  # lazy: the package's __init__ imports this module (its version is read at call time)
    import guided.schema

    try:
        return GrammarDiskCache(directory, max_bytes=max_bytes, version=guided.__version__,
                                source_dirs=[Path(guided.schema.__file__).parent])  # fmt: skip
    except OSError as e:
        if str(spec) != "auto":
            raise ConfigError(f"grammar cache directory {str(directory)!r} cannot be used: {e}") from None
        logger.warning("grammar cache %s cannot be used (%s); compiled grammars are not kept on disk", directory, e)
        return None


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
    grammar_cache : path, "auto" or None
        Directory where compiled grammars persist (``GrammarDiskCache``): a restarted process loads a
        grammar compiled before instead of compiling it. "auto": see ``grammar_cache_dir``; None: off.
    grammar_cache_bytes : int
        Bound on that directory (least recently used entries removed past it).
    """

    def __init__(self, vocabulary: Vocabulary, encode=None, workers: int = 2, timeout_s: float = 10.0,
                 cache_size: int = 256, limits: Limits | None = None, grammar_cache: str | os.PathLike | None = None,
                 grammar_cache_bytes: int = 1 << 30):  # fmt: skip
        if timeout_s <= 0:
            raise ConfigError(f"compile timeout must be positive, got {timeout_s}")
        disk = _disk_cache(grammar_cache, grammar_cache_bytes)
        self.grammars = GrammarCompiler(vocabulary, cache_size=cache_size, encode=encode, disk_cache=disk)
        self.set_limits(limits or Limits(compile_timeout_s=float(timeout_s)))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="guided-compile")
        self._pool.submit(prepare_checks, vocabulary)  # the run-time checks' tables, off the first request
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
            compiled = self._compile(constraint)
        except RecursionError:  # a safety net: nesting the depth pre-checks did not catch
            raise LimitError("the constraint nests too deeply to compile (recursion limit)") from None
        _warm_start(compiled)
        return compiled

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
        if isinstance(constraint, StructuralTag):
            return compile_structural(compiler, constraint, self.limits)
        if isinstance(constraint, Reasoning):
            return compile_reasoning(compiler, constraint, self.limits)
        if isinstance(constraint, Grammar):
            if constraint.import_paths:
                return compiler.compile_lark(constraint.text, import_paths=constraint.import_paths)
            return compiler.compile_grammar(constraint.text, syntax=constraint.syntax)
        raise ConfigError(f"unknown constraint {constraint!r}")


def _warm_start(compiled) -> None:
    """Compute the start's shortest completion, before and after the text it forces, here on the
    worker: the engine's budget check reads both first, on its own thread (a cold search there can
    take 0.3 s on intersection-heavy schemas, stalling the batch). Both are memoised per state."""
    matcher = compiled.matcher() if hasattr(compiled, "matcher") else None
    if matcher is None or not hasattr(matcher, "shortest_completion"):
        return
    try:
        matcher.shortest_completion()
        matcher.accept_tokens(matcher.forced_tokens())
        matcher.shortest_completion()
    except GuidedError:  # a limit: the engine meets it again where it reports it, on its request
        pass
