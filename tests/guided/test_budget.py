"""Budget-aware decoding: under a constraint, an output always ends complete and valid within
``max_tokens``; a budget too small for any complete output is refused up front, naming the need.

A tiny random-weight model wanders (inside strings, in whitespace) until the budget steers it: only
the budget brings these outputs to an end. Oracles: ``jsonschema`` for MaskBench schemas, the
shared grammars' byte-level recognizer (an Earley chart over the grammar IR, ``cfg_oracle``) and
Lark's own parser, Python ``re``; the steered draws are checked against a brute-force "fits" set and
the sampler's reference kernel.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
import torch
from cfg_oracle import automaton, recognizes
from engine_testlib import SlowGrammar
from shared_data import shared_path

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir
from guided.constraints import Grammar, JsonSchema, Regex
from guided.engine.budget import BudgetSteering
from guided.engine.sampler import SampledTokens, Sampler
from guided.engine.sampling_params import SamplingParams
from guided.engine.sequence import Sequence
from guided.kernels.sampling import fused_sample_ref
from guided.llm import LLM

SPEC = TinyModelSpec(arch="llama", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, seed=7)  # fmt: skip
SLACKS = [0, 1, 3, 7, 12, 20]  # budget = need + slack


def make_llm(**kw) -> LLM:
    llm = LLM(tiny_model_dir("builtin", SPEC), device="cpu", max_model_len=1024, max_num_seqs=256,
              compile_timeout=600.0, **kw)  # fmt: skip
    llm.compile_service.grammars.cache_size = 1024
    return llm


@pytest.fixture(scope="module")
def llm():
    return make_llm()


@pytest.fixture(scope="module")
def llm_no_ff(llm):
    other = make_llm(fast_forward=False)
    other._compile_service = llm.compile_service  # same vocabulary: reuse the compiled constraints
    return other


def need(llm, constraint) -> int | None:
    return llm.engine.budget.start_need(llm.compile_service.compile(constraint).matcher())[0]


def params(seed: int | None, max_tokens: int, **kw) -> SamplingParams:
    if seed is None:
        return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=max_tokens, **kw)


def generate(llm, constraints: list, budgets: list[int], seed: int | None) -> list:
    return llm.generate(["Out:"] * len(constraints), [params(seed, b) for b in budgets], use_tqdm=False,
                        response_format=constraints)  # fmt: skip


def assert_complete(out, budget: int, valid) -> None:
    assert out.finish_reason == "stop", (out.finish_reason, out.error, out.text[:200])
    assert len(out.token_ids) <= budget
    valid(out.text)


# ---------------------------------------------------------------------- MaskBench schemas
EVERY = 60  # every 60th MaskBench file and every 120th hard one, sorted by name
MAX_NEED = 600


@pytest.fixture(scope="module")
def schemas(llm):
    """(name, schema, need) of the sample's schemas that compile and have a known shortest output."""
    files = sorted(shared_path("data", "maskbench").glob("*.json"))[::EVERY]
    files += sorted(shared_path("data", "maskbench-hard").glob("*.json"))[::EVERY * 2]
    out, unknown = [], []
    for f in files:
        schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
        try:
            n = need(llm, JsonSchema(schema))
        except Exception:  # noqa: BLE001 - refused by the compiler: not this test's subject
            continue
        if n is None:
            unknown.append(f.name)
        elif n <= MAX_NEED:  # (a few need more than the model length holds: refused, as tested below)
            out.append((f.name, schema, n))
    # measured: all 155 compile, 153 need at most MAX_NEED tokens (median 8, max 122), none unknown
    assert len(unknown) <= len(out) // 20, unknown
    return out


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema)
    checker = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return lambda text: checker.validate(json.loads(text))


@pytest.mark.parametrize("seed", [None, 1])
def test_schemas_end_complete_within_small_budgets(llm, schemas, seed):
    budgets = [n + SLACKS[i % len(SLACKS)] for i, (_, _, n) in enumerate(schemas)]
    outs = generate(llm, [JsonSchema(s) for _, s, _ in schemas], budgets, seed)
    steered = 0
    for (name, schema, _), budget, out in zip(schemas, budgets, outs, strict=True):
        try:
            assert_complete(out, budget, _validator(schema))
        except (AssertionError, jsonschema.ValidationError, json.JSONDecodeError) as e:
            pytest.fail(f"{name} (budget {budget}): {e}")
        steered += out.outputs[0].budget_forced
    assert steered >= len(schemas) // 2  # a random model runs out of budget: most ends were steered


def test_schemas_without_fast_forward(llm_no_ff, schemas):
    part = schemas[::3]
    budgets = [n + SLACKS[i % len(SLACKS)] for i, (_, _, n) in enumerate(part)]
    outs = generate(llm_no_ff, [JsonSchema(s) for _, s, _ in part], budgets, 2)
    for (name, schema, _), budget, out in zip(part, budgets, outs, strict=True):
        assert not any(out.outputs[0].forced[:-1]) or out.outputs[0].budget_forced, name
        assert_complete(out, budget, _validator(schema))


UNIQUE = [  # arrays of unique items, where an ending must not repeat an item
    {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 2},
    {"type": "array", "items": {"type": "string", "maxLength": 2}, "uniqueItems": True, "minItems": 3},
    {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "minItems": 3},
    {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "integer"}}}, "uniqueItems": True,
     "minItems": 2},
    {"type": "array", "items": {}, "uniqueItems": True, "minItems": 3},
]  # fmt: skip


@pytest.mark.parametrize("seed", [None, 1])
def test_unique_items_end_complete_within_small_budgets(llm, seed):
    """Inside an array of unique items the grammar's shortest ending may repeat an item; the checked
    search finds one that does not, so these outputs are steered and end complete and valid too
    (each schema at every slack, greedy and sampled, the random model wandering until the budget
    ends it)."""
    cases = [(s, need(llm, JsonSchema(s)) + slack) for s in UNIQUE for slack in SLACKS]
    outs = generate(llm, [JsonSchema(s) for s, _ in cases], [b for _, b in cases], seed)
    for (schema, budget), out in zip(cases, outs, strict=True):
        try:
            assert_complete(out, budget, _validator(schema))
        except (AssertionError, jsonschema.ValidationError, json.JSONDecodeError) as e:
            pytest.fail(f"{schema} (budget {budget}): {e}")


# ---------------------------------------------------------------------- shared grammars
GRAMMARS = [f"gbnf/{n}.gbnf" for n in ("arithmetic", "c", "chess", "english", "japanese", "json", "json_arr",
                                       "list", "vllm-sql")] + [f"lark/{n}.lark" for n in ("csv", "json", "verilog")]  # fmt: skip


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_shared_grammars_end_complete_within_small_budgets(llm, seed):
    constraints, budgets, oracles = [], [], []
    for i, name in enumerate(GRAMMARS):
        text = shared_path("data", "grammars", *name.split("/")).read_text(encoding="utf-8")
        constraint = Grammar(text, syntax=name.split("/")[0])
        constraints.append(constraint)
        budgets.append(need(llm, constraint) + SLACKS[(i + (seed or 0)) % len(SLACKS)])
        oracles.append(automaton(name)[1])
    outs = generate(llm, constraints, budgets, seed)
    for name, budget, reference, out in zip(GRAMMARS, budgets, oracles, outs, strict=True):
        assert_complete(out, budget, lambda t, r=reference, n=name: _check(recognizes(r, t), n, t))


def _check(ok: bool, *what) -> None:
    assert ok, what


def test_lark_parser_agrees(llm):
    lark = pytest.importorskip("lark")
    path = shared_path("data", "grammars", "lark", "json.lark")
    parser = lark.Lark(path.read_text(encoding="utf-8"), parser="earley", lexer="dynamic_complete")
    constraint = Grammar(path.read_text(encoding="utf-8"), syntax="lark")
    n = need(llm, constraint)
    outs = generate(llm, [constraint] * len(SLACKS), [n + s for s in SLACKS], 3)
    for out, slack in zip(outs, SLACKS, strict=True):
        assert_complete(out, n + slack, parser.parse)


# ---------------------------------------------------------------------- refusal, off switch
def test_an_impossible_budget_is_refused_naming_the_need(llm):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
              "required": ["name", "tags"], "additionalProperties": False}  # fmt: skip
    n = need(llm, JsonSchema(schema))
    short, exact = llm.generate(["Out:"] * 2, [params(1, n - 1), params(1, n)], use_tqdm=False,
                                response_format=JsonSchema(schema))  # fmt: skip
    assert short.finish_reason == "error" and not short.token_ids
    assert f"max_tokens={n - 1} is too small" in short.error and f"takes {n} tokens" in short.error
    assert '{"name":"","tags":[]}' in short.error
    assert_complete(exact, n, _validator(schema))
    # the model length counts too: a prompt that leaves fewer tokens than the need is refused
    long_prompt = [5] * (1024 - n + 1)
    [cut] = llm.generate([long_prompt], params(1, 500), use_tqdm=False, response_format=JsonSchema(schema))
    assert cut.finish_reason == "error" and "model length" in cut.error


def test_budget_aware_false_is_the_plain_decoder(llm):
    """Off: the tokens of an unsteered run, cut by max_tokens. On, with room to spare: the same
    tokens too (the budget refuses nothing it does not have to)."""
    pattern = "[a-z]{1,80}!"
    constraint = Regex(pattern)
    long = llm.generate(["Out:"] * 4, [params(s, 200, budget_aware=False) for s in range(4)], use_tqdm=False,
                        response_format=constraint)  # fmt: skip
    off = llm.generate(["Out:"] * 4, [params(s, 6, budget_aware=False) for s in range(4)], use_tqdm=False,
                       response_format=constraint)  # fmt: skip
    on = llm.generate(["Out:"] * 4, [params(s, 6) for s in range(4)], use_tqdm=False, response_format=constraint)
    roomy = llm.generate(["Out:"] * 4, [params(s, 200) for s in range(4)], use_tqdm=False,
                         response_format=constraint)  # fmt: skip
    for a, b, c, d in zip(long, off, on, roomy, strict=True):
        assert b.token_ids == a.token_ids[:6] and b.finish_reason == "length" and not b.outputs[0].budget_forced
        assert c.finish_reason == "stop" and re.fullmatch(pattern, c.text) and c.outputs[0].budget_forced
        assert len(c.token_ids) <= 6
        assert d.token_ids == a.token_ids and not d.outputs[0].budget_forced


def test_held_back_rows_are_steered_too(llm):
    """A constraint whose masks are slow (held back a step) still ends within its budget, with the
    tokens of an unhurried run."""
    compiled = llm.compile_service.compile(Regex("[a-z]{3,40}\\."))
    slow = SlowGrammar(compiled, 0.05)
    engine = llm.engine
    outs = {}
    for name, grammar in (("slow", slow), ("plain", compiled)):
        for s in range(3):
            engine.add_request("Word:", params(s, 7), request_id=f"{name}{s}", grammar=grammar)
    while engine.has_unfinished():
        outs.update({o.request_id: o for o in engine.step() if o.finished})
    for s in range(3):
        slow_out, plain = outs[f"slow{s}"], outs[f"plain{s}"]
        assert slow_out.token_ids == plain.token_ids
        assert slow_out.finish_reason == "stop" and re.fullmatch("[a-z]{3,40}\\.", slow_out.text)


# ---------------------------------------------------------------------- the draws, exactly
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_steered_draws_are_the_mask_intersected_with_fits(llm, temperature):
    """At every step of budget-tight outputs, the steered token is the draw of the reference kernel
    under the plain mask intersected with the tokens after which a completion fits (computed here by
    trying every allowed token), with the same seed and offset."""
    # (numbers: their masks are small, so a tight budget refuses a share of them, not nearly all)
    compiled = llm.compile_service.compile(JsonSchema({"type": "array", "items": {"type": "integer"}, "minItems": 2}))
    vocab = compiled.vocabulary
    steering = BudgetSteering(list(vocab.eos_ids), fast_forward=True, max_tries=10_000)
    sampler = Sampler(vocab.size, vocab.size, list(vocab.eos_ids), torch.device("cpu"))
    words = vocab.bitmask_words
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for trial in range(6):
        seq = Sequence([1, 2, 3], SamplingParams(temperature=temperature, max_tokens=9), "r", 0)
        seq.seed, seq.constraint, seq.budget = 1000 + trial, compiled.matcher(), True
        m = seq.constraint
        while not m.is_terminated():
            room = seq.params.max_tokens - seq.num_output_tokens
            logits = torch.randn(1, vocab.size, generator=gen)
            bitmask = torch.zeros((1, words), dtype=torch.int32)
            m.fill_bitmask(bitmask.numpy(), 0)
            allowed = np.flatnonzero(m.allowed_tokens())
            fits = [int(t) for t in allowed if steering.fits(m, int(t), room)]
            assert fits, "the invariant keeps a token that fits"
            expected_mask = torch.zeros((1, words), dtype=torch.int32)
            for t in fits:
                expected_mask.numpy().view(np.uint32)[0, t >> 5] |= np.uint32(1 << (t & 31))
            batch = sampler.prepare([seq])
            expected = fused_sample_ref(logits.clone(), batch.temperature, batch.top_k, batch.top_p, batch.min_p,
                                        batch.seeds, batch.offsets, bitmask=expected_mask,
                                        bitmask_rows=torch.zeros(1, dtype=torch.int32)).token_ids.item()  # fmt: skip

            def sample(seqs, lg, bm, rows):
                out = SampledTokens()
                out.add(seqs, sampler(lg, sampler.prepare(seqs), bm, torch.tensor(rows, dtype=torch.int32)))
                return out

            sampled = sample([seq], logits.clone(), bitmask, [0])
            steering.steer(sampled, [seq], logits.clone(), bitmask, [0], sample, lambda s, r=room: r)
            assert not sampled.endings and sampled.token_ids == [expected], (trial, seq.num_output_tokens)
            token = sampled.token_ids[0]
            assert m.accept_token(token)
            seq.append_token(token)
            forced = m.forced_tokens() if not m.is_terminated() else []
            m.accept_tokens(forced)
            seq.append_tokens(forced)
            checked += 1
        assert seq.num_output_tokens <= seq.params.max_tokens
        text = b"".join(vocab.tokens[t] for t in seq.output_token_ids if t not in vocab.eos_ids)
        assert len(json.loads(text)) >= 2
    assert checked > 20 and steering.tokens_refused > 10, (checked, steering.tokens_refused)


def test_after_too_many_refused_draws_the_row_ends_with_its_shortest_completion(llm):
    compiled = llm.compile_service.compile(Regex("(ab)+c"))
    vocab = compiled.vocabulary
    steering = BudgetSteering(list(vocab.eos_ids), fast_forward=False, max_tries=0)
    seq = Sequence([1], SamplingParams(temperature=0.0, max_tokens=5), "r", 0)
    seq.constraint, seq.budget = compiled.matcher(), True
    assert seq.constraint.accept_text("abab")
    a = vocab.tokens.index(b"a")
    sampled = SampledTokens(seqs=[seq], token_ids=[a], logprobs=[None])
    bitmask = torch.full((1, vocab.bitmask_words), -1, dtype=torch.int32)
    steering.steer(sampled, [seq], torch.zeros(1, vocab.size), bitmask, [0], None, lambda s: 2)
    assert not sampled.seqs and seq.budget_forced
    [(ended, tokens)] = sampled.endings
    assert ended is seq and b"".join(vocab.tokens[t] for t in tokens[:-1]) == b"c"
    assert tokens[-1] in vocab.eos_ids


def test_the_compile_computes_the_start_completion(llm, monkeypatch):
    """The budget's first reads (the start's shortest completion, before and after the text it
    forces) are computed by the compile, on its worker: the engine thread finds them memoised."""
    import guided.grammar.tokens.compiled as compiled_module

    schema = {"type": "object", "properties": {"kind": {"const": "warm-start"}, "n": {"type": "integer"}},
              "required": ["kind", "n"], "additionalProperties": False}  # fmt: skip
    compiled = llm.compile_service.compile(JsonSchema(schema))

    def no_search(*args, **kwargs):
        raise AssertionError("a shortest completion was searched after the compile")

    monkeypatch.setattr(compiled_module, "shortest_bytes", no_search)
    need, text = llm.engine.budget.start_need(compiled.matcher())
    assert need is not None and text == b'{"kind":"warm-start","n":0}'


def test_a_row_in_a_state_of_unknown_need_is_left_alone():
    """Where no shortest completion is known (the search gave up), every draw would be refused and
    no ending found: the row keeps its draw, checked and resampled not at all."""

    class Unknown:
        def is_terminated(self):
            return False

        def shortest_completion(self):
            return None

    steering = BudgetSteering([0], fast_forward=True)
    seq = Sequence([1], SamplingParams(max_tokens=4), "r", 0)
    seq.constraint, seq.budget = Unknown(), True
    sampled = SampledTokens(seqs=[seq], token_ids=[7], logprobs=[None])
    steering.steer(sampled, [seq], torch.zeros(1, 64), torch.full((1, 2), -1, dtype=torch.int32), [0], None,
                   lambda s: 1)  # fmt: skip
    assert sampled.token_ids == [7] and not sampled.endings and steering.tokens_checked == 0
    assert not seq.budget_forced
