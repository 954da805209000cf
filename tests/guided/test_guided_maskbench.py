"""Guided generation over a fixed MaskBench sample and the shared grammars, on a tiny random-weight model.

Every output that ends with ``finish_reason == "stop"`` must be valid under its constraint (zero
tolerance): ``jsonschema`` (the validator class of the schema's draft, with its format checker) for
schemas, Lark's own Earley parser (``lexer="dynamic_complete"``, the oracle of
tests/grammar/test_cfg_grammars.py) for Lark grammars, and a fresh matcher re-accepting the text for
GBNF. Random weights make the text meaningless: only the constraint keeps it valid. A random model may
wander in a long free string (greedy decoding of a random model loops on the same few tokens), so
outputs cut by ``max_tokens`` are allowed, under a bound measured here and committed with margin.

Each sampling configuration is ONE ``generate`` call with one constraint per prompt (the whole sample
batched), to keep the file fast. Schemas the compiler refuses (recursive ``$ref`` cycles, formats with
no regular grammar, state limits) must come back as ``finish_reason == "error"`` with a message, never
as an exception; their count is bounded.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from shared_data import shared_path

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
from guided.constraints import Grammar, JsonSchema
from guided.engine.sampling_params import SamplingParams
from guided.errors import LimitError
from guided.llm import LLM

SPEC = TinyModelSpec(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, seed=7)  # fmt: skip

EVERY = 25  # every 25th MaskBench file, sorted by name: 302 of 7537
SUBSET_EVERY = 4  # the extra configurations run on every 4th schema of the sample (time budget)
MAX_TOKENS = 64

# Measured with this sample: 4 of 301 refused at compile time (2 recursive $ref cycles, format
# "regex", a regex-intersection state limit). Bound with margin for compiler changes.
MAX_COMPILE_ERRORS = 8

# Share of outputs cut by max_tokens (MAX_TOKENS = 64). A random model wanders in free strings: a
# token containing '"' is likely within tens of tokens when sampling, while greedy decoding of random
# weights loops on the same non-quote tokens until the cut. Measured (stop / length / error):
#   t1_seed1 49 / 248 / 4 of 301 (82%), t1_seed2 11 / 65 / 0 of 76 (86%),
#   greedy 3 / 73 / 0 of 76 (96%), greedy_no_ff 5 / 71 / 0 of 76 (93%).
# The bounds catch a regression that cuts (nearly) everything; validity of what stops is the real check.
LENGTH_BOUNDS = {"t1_seed1": 0.92, "t1_seed2": 0.95, "greedy": 0.99, "greedy_no_ff": 0.99}


def sample_files() -> list[Path]:
    root = shared_path("data", "maskbench")
    return sorted(root.glob("*.json"))[::EVERY]


def validate(schema, instance) -> None:
    cls = jsonschema.validators.validator_for(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(instance)


def sampling(seed: int | None) -> SamplingParams:
    # the plain decoder (no budget steering): outputs may be cut, as measured above; budget-aware
    # decoding of MaskBench schemas is tested in test_budget.py
    if seed is None:
        return SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, budget_aware=False)
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=MAX_TOKENS, budget_aware=False)


def make_llm(fast_forward: bool) -> LLM:
    # compile_timeout: generous, so that a loaded CI machine cannot turn a slow compile into a failure
    llm = LLM(tiny_model_dir("builtin", SPEC), device="cpu", max_model_len=512, max_num_seqs=512,
              compile_timeout=600.0, fast_forward=fast_forward)  # fmt: skip
    llm.compile_service.grammars.cache_size = 1024  # keep the whole sample compiled across configurations
    return llm


@pytest.fixture(scope="module")
def llm():
    return make_llm(True)


@pytest.fixture(scope="module")
def sample():
    files = sample_files()
    return [(f.name, json.loads(f.read_text(encoding="utf-8"))["schema"]) for f in files]


CONFIGS = {  # name -> (seed, fast_forward, every n-th schema of the sample)
    "t1_seed1": (1, True, 1),
    "greedy": (None, True, SUBSET_EVERY),
    "t1_seed2": (2, True, SUBSET_EVERY),
    "greedy_no_ff": (None, False, SUBSET_EVERY),
}


CHUNK = 64  # schemas per generate call
MAX_LAZY_LIMIT = 0  # a lazy LimitError fails its own request; generate() itself must never raise


def generate_isolating_lazy_limits(engine: LLM, part: list, params: SamplingParams, culprits: list) -> list:
    """Outputs for ``part`` ([(file, schema)]), generated CHUNK at a time; a chunk whose generate()
    raises (it must not: limits fail their own request) is recorded in ``culprits``."""
    out = []
    for i in range(0, len(part), CHUNK):
        chunk = part[i : i + CHUNK]
        try:
            out += engine.generate(["JSON:"] * len(chunk), params, use_tqdm=False,
                                   response_format=[JsonSchema(s) for _, s in chunk])  # fmt: skip
        except LimitError as e:
            culprits.append(f"{chunk[0][0]}..: {e}")
            out += [None] * len(chunk)
    return out


@pytest.fixture(scope="module")
def runs(llm, sample):
    """Each configuration's outputs, generated once: {name: ([(file, schema, RequestOutput)], culprits)}."""
    llm_no_ff = None
    results = {}
    for name, (seed, ff, every) in CONFIGS.items():
        if ff:
            engine = llm
        else:
            if llm_no_ff is None:
                llm_no_ff = make_llm(False)
                llm_no_ff._compile_service = llm.compile_service  # same vocabulary: reuse the compiled sample
            engine = llm_no_ff
        part = sample[::every]
        culprits: list[str] = []
        outs = generate_isolating_lazy_limits(engine, part, sampling(seed), culprits)
        done = [(f, s, o) for (f, s), o in zip(part, outs, strict=True) if o is not None]
        results[name] = (done, culprits)
    return results


def test_sample_is_fixed(sample):
    assert len(sample) >= 300
    assert sample[0][0] == "Github_easy---o10008.json"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_stopped_outputs_are_valid(runs, name):
    outs, culprits = runs[name]
    assert len(culprits) <= MAX_LAZY_LIMIT, culprits
    invalid = []
    for file, schema, out in outs:
        if out.finish_reason == "stop":
            try:
                validate(schema, json.loads(out.text))
            except (json.JSONDecodeError, jsonschema.ValidationError) as e:
                invalid.append((file, out.text[:200], str(e)[:200]))
    assert not invalid
    counts = Counter(o.finish_reason for _, _, o in outs)
    print(
        f"{name}: {len(outs)} schemas, {dict(counts)}, lazy LimitError: {culprits}"
    )  # the figures behind the bounds (pytest -s)
    assert set(counts) <= {"stop", "length", "error"}, counts
    assert counts["stop"] > 0
    # outputs cut by max_tokens: a random model may wander in a long free string
    assert counts["length"] / len(outs) <= LENGTH_BOUNDS[name], counts


@pytest.mark.parametrize("name", list(CONFIGS))
def test_compile_errors_are_reported_not_raised(runs, name):
    outs, _ = runs[name]
    errors = [(f, o.error) for f, _, o in outs if o.finish_reason == "error"]
    assert all(msg for _, msg in errors), errors
    assert len(errors) <= MAX_COMPILE_ERRORS, errors
    assert all(not o.token_ids for _, _, o in outs if o.finish_reason == "error")


def test_forced_tokens_only_with_fast_forward(runs):
    assert any(any(o.outputs[0].forced) for _, _, o in runs["greedy"][0])
    assert not any(any(o.outputs[0].forced) for _, _, o in runs["greedy_no_ff"][0])


def test_lazy_limit_error_fails_only_its_request(llm, monkeypatch):
    """A grammar limit raised lazily by a matcher (mid-generation) ends its own request with "error"."""
    from guided.grammar.tokens.compiled_cfg import CfgMatcher

    calls = Counter()
    original = CfgMatcher.fill_bitmask

    def fill_then_fail(self, bitmask, row=0):
        calls["fill"] += 1
        if calls["fill"] > 2:  # a later state's lazy work runs past a bound
            raise LimitError("mask_timeout_s: the test's bound")
        return original(self, bitmask, row)

    monkeypatch.setattr(CfgMatcher, "fill_bitmask", fill_then_fail)
    nested = Grammar('root ::= "(" root ")" | "x"', syntax="gbnf")  # recursive: the context-free matcher
    outs = llm.generate(["JSON:", "JSON:"], sampling(None), use_tqdm=False,
                        response_format=[nested, {"type": "integer"}])  # fmt: skip
    assert calls["fill"] > 2
    assert outs[0].finish_reason == "error" and "mask_timeout_s" in outs[0].error
    assert outs[1].finish_reason in ("stop", "length") and outs[1].error is None


# ---------------------------------------------------------------------- grammars
# The files that compile through the Grammar constraint (see tests/grammar/test_cfg_grammars.py for
# the others' reasons). storage.lark compiles only with an import path for its relative
# ``%import .csv`` / ``.json``, which a Grammar constraint cannot carry: left out here.
GBNF = ["arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list", "vllm-sql"]
LARK = ["csv", "json", "verilog"]
GRAMMAR_SEEDS = [None, 1, 2]


@pytest.fixture(scope="module")
def grammar_runs(llm):
    items = [(f"gbnf/{n}.gbnf", "gbnf") for n in GBNF] + [(f"lark/{n}.lark", "lark") for n in LARK]
    texts = [(name, shared_path("data", "grammars", *name.split("/")).read_text(encoding="utf-8"), syntax)
             for name, syntax in items]  # fmt: skip
    results = {}
    for seed in GRAMMAR_SEEDS:
        outs = llm.generate(["Text:"] * len(texts), sampling(seed), use_tqdm=False,
                            response_format=[Grammar(t, syntax=s) for _, t, s in texts])  # fmt: skip
        for (name, text, syntax), out in zip(texts, outs, strict=True):
            results[(name, seed)] = (text, syntax, out)
    return results


def lark_oracle(name: str):
    from lark import Lark

    path = shared_path("data", "grammars", *name.split("/"))
    return Lark(path.read_text(encoding="utf-8"), parser="earley", lexer="dynamic_complete", start="start",
                import_paths=[str(path.parent)])  # fmt: skip


def test_grammar_outputs_are_sentences(llm, grammar_runs):
    from lark.exceptions import LarkError

    oracles = {}
    stopped = 0
    for (name, seed), (text, syntax, out) in grammar_runs.items():
        assert out.finish_reason in ("stop", "length"), (name, seed, out.finish_reason, out.error)
        if out.finish_reason != "stop":
            continue
        stopped += 1
        matcher = llm.compile_service.compile(Grammar(text, syntax=syntax)).matcher()
        assert matcher.accept_text(out.text) and matcher.is_accepting(), (name, seed, out.text)
        if syntax == "lark":
            if name not in oracles:
                oracles[name] = lark_oracle(name)
            try:
                oracles[name].parse(out.text)
            except LarkError as e:
                pytest.fail(f"{name} seed {seed}: Lark rejects {out.text!r}: {e}")
    assert stopped >= 5  # measured: 10 of 36 (12 grammars x greedy, seeds 1 and 2) stop within 64 tokens


def test_reports_read_back_plain_or_gzip_compressed(tmp_path):
    """benchmarks/maskbench.py writes its reports gzip-compressed; --compare and the tools over the
    results read either form."""
    from guided.bench.runner import read_report  # the benchmarks' reader, beside the runner

    report = {"lines": {"guided": [{"file": "a.json", "status": "ok"}]}, "meta": {"sets": ["maskbench"]}}
    plain, packed = tmp_path / "r.json", tmp_path / "r.json.gz"
    plain.write_text(json.dumps(report))
    packed.write_bytes(gzip.compress(json.dumps(report).encode()))
    assert packed.read_bytes()[:2] == b"\x1f\x8b"
    assert read_report(plain) == report
    assert read_report(packed) == report
