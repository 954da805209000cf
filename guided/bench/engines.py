"""Engine adapters for the conformance benchmarks: guided and its peers behind one small interface.

Each engine is built once per run from a transformers tokenizer, single-threaded. ``compile(schema)``
returns a handle (raising on a compile error) after computing the first mask, so its time is the
time to first mask (TTFM); ``check(handle, tokens)`` replays one instance token by token: per token,
compute the mask, test the token's bit, commit it (timed together: TBM), and returns
``(every token allowed, accepting at the end, [tbm seconds])``. Peers come from the ``bench``
extra and are imported lazily.
"""

from __future__ import annotations

import json
import time

import numpy as np

from guided.grammar.compiler import GrammarCompiler
from guided.grammar.vocab import Vocabulary
from guided.schema.compiler import compile_json_schema
from guided.schema.unique_runtime import prepare as prepare_checks

__all__ = ["make_engine", "ENGINES"]

# "guided-closed": guided as its API compiles by default, objects closed where additionalProperties is
# unset (JsonSchema's strict); "guided" keeps the schema's literal meaning, as exactness is measured
ENGINES = ("guided", "guided-closed", "llguidance", "xgrammar", "outlines-core")


def make_engine(name: str, tokenizer, registry: dict | None = None, **options):
    if name == "guided-closed":
        name, options = "guided", {**options, "strict": True}
    cls = {"guided": GuidedEngine, "llguidance": LLGuidanceEngine, "xgrammar": XGrammarEngine,
           "outlines-core": OutlinesCoreEngine}.get(name)  # fmt: skip
    if cls is None:
        raise ValueError(f"unknown engine {name!r}; one of {', '.join(ENGINES)}")
    return cls(tokenizer, registry, **options) if options else cls(tokenizer, registry)


def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"engine needs {module!r}: pip install 'guided[bench]'") from e


def _bit(mask_row, token: int) -> bool:
    return bool((int(mask_row[token >> 5]) >> (token & 31)) & 1)


class GuidedEngine:
    name = "guided"

    def __init__(self, tokenizer, registry=None, **options):

        self.vocab = Vocabulary.from_tokenizer(tokenizer)
        self.compiler = GrammarCompiler(self.vocab, cache_size=2)
        prepare_checks(self.vocab)  # per-vocabulary tables, as llguidance builds its own with the tokenizer
        self.registry = registry
        self.options = options  # SchemaOptions fields, e.g. max_depth
        self.bitmask = np.zeros((1, self.vocab.bitmask_words), dtype=np.int32)

    def compile(self, schema):

        compiled = compile_json_schema(self.compiler, schema, registry=self.registry, **self.options)
        compiled.matcher().fill_bitmask(self.bitmask, 0)
        return compiled

    def check(self, compiled, tokens):
        m = compiled.matcher()
        bm, times = self.bitmask, []
        clock = time.perf_counter
        for t in tokens:
            t0 = clock()
            m.fill_bitmask(bm, 0)
            ok = _bit(bm[0], t) and m.accept_token(t)
            times.append(clock() - t0)
            if not ok:
                return False, False, times
        return True, m.is_accepting(), times


class LLGuidanceEngine:
    name = "llguidance"

    def __init__(self, tokenizer, registry=None):
        self.llg = _need("llguidance")
        import llguidance.hf
        import llguidance.numpy

        self.lln = llguidance.numpy
        self.tok = llguidance.hf.from_tokenizer(tokenizer)
        self.bitmask = self.lln.allocate_token_bitmask(1, self.tok.vocab_size)

    def compile(self, schema):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        m = self.llg.LLMatcher(self.tok, grammar)
        if m.is_error():
            raise ValueError(m.get_error())
        self.lln.fill_next_token_bitmask(m, self.bitmask, 0)
        return grammar

    def check(self, grammar, tokens):
        m = self.llg.LLMatcher(self.tok, grammar)
        bm, times = self.bitmask, []
        clock = time.perf_counter
        for t in tokens:
            t0 = clock()
            self.lln.fill_next_token_bitmask(m, bm, 0)
            ok = _bit(bm[0], t) and m.consume_token(t) and not m.is_error()
            times.append(clock() - t0)
            if not ok:
                return False, False, times
        return True, m.is_accepting(), times


class XGrammarEngine:
    name = "xgrammar"

    def __init__(self, tokenizer, registry=None):
        self.xgr = _need("xgrammar")
        size = len(tokenizer)
        self.info = self.xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=size)
        self.compiler = self.xgr.GrammarCompiler(self.info, max_threads=1)
        self.bitmask = self.xgr.allocate_token_bitmask(1, size)
        self.eos = list(self.info.stop_token_ids)

    def compile(self, schema):
        compiled = self.compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=True, strict_mode=False
        )
        self.xgr.GrammarMatcher(compiled).fill_next_token_bitmask(self.bitmask)
        return compiled

    def check(self, compiled, tokens):
        m = self.xgr.GrammarMatcher(compiled)
        bm, times = self.bitmask, []
        clock = time.perf_counter
        for t in tokens:
            t0 = clock()
            m.fill_next_token_bitmask(bm)
            ok = _bit(bm[0], t) and m.accept_token(t)
            times.append(clock() - t0)
            if not ok:
                return False, False, times
        m.fill_next_token_bitmask(bm)
        return True, any(_bit(bm[0], e) for e in self.eos), times


class OutlinesCoreEngine:
    name = "outlines-core"

    def __init__(self, tokenizer, registry=None):
        oc = _need("outlines_core")
        self.oc = oc
        eos = tokenizer.eos_token_id
        specials = set(tokenizer.all_special_ids)
        decoder = _byte_decoder()
        tokens: dict = {}
        for text, i in tokenizer.get_vocab().items():
            if i in specials or i == eos:
                continue
            tokens.setdefault(_token_bytes(text, decoder), []).append(i)
        self.vocab = oc.Vocabulary(eos, tokens)
        self.eos = eos

    def compile(self, schema):
        from outlines_core.json_schema import build_regex_from_schema

        regex = build_regex_from_schema(json.dumps(schema))
        index = self.oc.Index(regex, self.vocab)
        self.oc.Guide(index).get_tokens()
        return index

    def check(self, index, tokens):
        g = self.oc.Guide(index)
        times = []
        clock = time.perf_counter
        for t in tokens:
            t0 = clock()
            ok = t in g.get_tokens()
            if ok:
                g.advance(t)
            times.append(clock() - t0)
            if not ok:
                return False, False, times
        return True, self.eos in g.get_tokens() or g.is_finished(), times


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: printable stand-in character -> byte."""
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), 256))
    )
    chars_, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars_.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars_, strict=True)}


def _token_bytes(text: str, decoder) -> bytes:
    if text.startswith("<0x") and text.endswith(">") and len(text) == 6:  # SentencePiece byte fallback
        return bytes([int(text[3:5], 16)])
    if all(c in decoder for c in text):
        return bytes(decoder[c] for c in text)
    return text.replace("\u2581", " ").encode("utf-8")
