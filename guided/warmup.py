"""``guided warm-up``: compile guided's numba code now, into its on-disk cache.

A process that finds no cache spends about 60 s (2 cores) in numba's JIT before its first masks: the
grammar engine's core, the trie walks, the run-time checks. numba caches that machine code under
``$GUIDED_CACHE/numba`` (``grammar/numba_cache.py``), so it happens once per machine and version. Run
this where that once should not be a user's first request: in a container image's build, before the
workers of a test run start (each would compile it again), or on a fresh GPU machine.

The work is generation on the embedded tiny model (CPU, its own tokenizer: numba specialises on the
arrays' types, never on the vocabulary) under one constraint of each kind and shape the compilers
route differently: a closed object (a regular language), an open one and a recursive one (the
context-free path), unique items, string formats, a regex, a choice, a Lark and a GBNF grammar; each
sampled, budget-aware, with and without fast-forward. Compiled grammars are not read from or written to
the grammar cache here: the point is to run the compilers.
"""

from __future__ import annotations

import time

__all__ = ["warm_up"]

_ARITH_LARK = r"""
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[0-9]{1,4}/
"""

_LIST_GBNF = r"""
root ::= "[" item ("," item)* "]"
item ::= [a-z]+ | "\"" [a-z ]* "\""
"""


def _schemas() -> list[dict]:
    closed = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "score": {"type": "number", "exclusiveMinimum": 0},
            "kind": {"enum": ["a", "b", 3, None]},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{2,5}$"}, "maxItems": 3},
            "day": {"type": "string", "format": "date"},
        },
        "required": ["name", "age", "kind"],
        "additionalProperties": False,
    }
    open_object = {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
                   "required": ["id"]}  # fmt: skip
    recursive = {
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["v"], "additionalProperties": False}},
        "$ref": "#/$defs/node",
    }  # fmt: skip
    unique = {"type": "array", "uniqueItems": True, "maxItems": 4,
              "items": {"type": "object", "properties": {"k": {"type": "string"}}, "additionalProperties": False}}  # fmt: skip
    formats = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"},
                                                "mail": {"type": "string", "format": "email"},
                                                "ip": {"type": "string", "format": "ipv4"}},
               "additionalProperties": False}  # fmt: skip
    return [closed, open_object, recursive, unique, formats]


def _constraints():
    from guided.constraints import Choice, Grammar, Regex  # lazy: importing this module loads nothing heavy

    return [*_schemas(), Regex(r"[A-Z][a-z]{2,8}-\d{2,4}( \w+)?"), Choice(["red", "green", "blue"]),
            Grammar(_ARITH_LARK, syntax="lark"), Grammar(_LIST_GBNF, syntax="gbnf")]  # fmt: skip


def warm_up(max_tokens: int = 48, seeds: int = 2, log=print) -> dict:
    """Run the warm-up workload; return {"seconds", "outputs", "jit_seconds", "numba_cache"} (jit_seconds:
    numba's compile time in it, the functions with explicit signatures that compile at import
    included, 0 when its cache was already warm; None where numba's event API is missing;
    numba_cache: the directory that holds the machine code)."""
    jit = _JitClock()
    start = time.perf_counter()
    with jit:
        # lazy: torch, the engine and numba load when the warm-up runs, not when the CLI parses its
        # arguments (and inside the clock: compiles at import count)
        from guided.engine.sampling_params import SamplingParams
        from guided.grammar import numba_cache_dir
        from guided.llm import LLM

        constraints, outputs = _constraints(), 0
        params = [SamplingParams(temperature=0.8, seed=seed, max_tokens=max_tokens) for seed in range(seeds)]
        for fast_forward in (True, False):
            llm = LLM(device="cpu", grammar_cache=None, compile_timeout=900.0, fast_forward=fast_forward)
            for constraint in constraints:
                t = time.perf_counter()
                outs = llm.generate(["Answer:"] * seeds, params, use_tqdm=False, response_format=constraint)
                outputs += len(outs)
                bad = [o for o in outs if o.outputs[0].finish_reason not in ("stop", "length")]
                if bad:
                    raise RuntimeError(f"warm-up: {_name(constraint)} ended {bad[0].outputs[0].finish_reason}")
                log(f"  {_name(constraint):36} fast_forward={fast_forward!s:5} {time.perf_counter() - t:6.1f} s")
            del llm
    return {"seconds": time.perf_counter() - start, "outputs": outputs, "jit_seconds": jit.seconds,
            "numba_cache": numba_cache_dir()}


def _name(constraint) -> str:
    if isinstance(constraint, dict):
        kind = "array" if constraint.get("type") == "array" else "object"
        return f"json schema ({kind}, {len(str(constraint))} chars)"
    syntax = getattr(constraint, "syntax", None)
    return type(constraint).__name__.lower() + (f" ({syntax})" if syntax else "")


class _JitClock:
    """numba's compile time while the block runs (its 'numba:compile' events, outermost only)."""

    def __init__(self):
        self.seconds: float | None = None

    def __enter__(self):
        try:
            from numba.core import event  # numba's compile events; lazy, as the rest
        except ImportError:  # pragma: no cover - numba without its event API: no figure
            return self
        clock = self

        class Listener(event.Listener):
            depth, began = 0, 0.0

            def on_start(self, ev):
                if self.depth == 0:
                    self.began = time.perf_counter()
                self.depth += 1

            def on_end(self, ev):
                self.depth -= 1
                if self.depth == 0:
                    clock.seconds += time.perf_counter() - self.began

        self.seconds, self._event, self._listener = 0.0, event, Listener()
        event.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc):
        if self.seconds is not None:
            self._event.unregister("numba:compile", self._listener)
