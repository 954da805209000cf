"""Speculative decoding (prompt-lookup drafts checked in one forward): the tokens are exactly those of
plain decoding, greedy and sampled (the same seeds), under every kind of constraint, fast-forward on
and off, with opted-out requests, shared cached prefixes, aborts and a KV pool too small for drafts;
drafts are cut by the grammar and never reach the prefix cache."""

from __future__ import annotations

import json

import pytest
from engine_testlib import PROMPTS, greedy, make_engine, model_dir, run_all, tokenizer

from guided.constraints import Choice, Grammar, JsonSchema, Regex
from guided.engine.sampling_params import SamplingParams
from guided.engine.speculative import SpeculativeConfig, grammar_cut, propose
from guided.errors import ConfigError

SPEC = {"method": "ngram", "num_speculative_tokens": 5}
ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "n": {"type": "integer"},
                   "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 6}},
    "required": ["name", "tags", "n"],
    "additionalProperties": False,
}  # fmt: skip
ECHO = "Item: " + json.dumps({"name": "red green", "tags": ["red", "green", "red"], "n": 12}) * 2
COLORS = "tags tags tags: red green blue red green blue red green"
LARK = 'start: color (" " color)+\ncolor: "red" | "green" | "blue"\n'
GBNF = 'root ::= color (" " color)*\ncolor ::= "red" | "green" | "blue"\n'


def llm(**config):
    from guided.llm import LLM

    return LLM(model_dir("llama"), tokenizer=tokenizer(), device="cpu", max_model_len=512, **config)


def outputs(constraint, params, speculative, prompts=(ECHO, COLORS, "x"), **config):
    model = llm(speculative=speculative, **config)
    outs = model.generate(list(prompts), params, use_tqdm=False, response_format=constraint)
    return [o.token_ids for o in outs], model.engine.stats()


# ---------------------------------------------------------------------- drafting
def test_propose_takes_what_followed_the_longest_latest_suffix():
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2, 4, 1) == [7, 1]  # the latest "1 2 3"
    assert propose([5, 6, 7, 5, 6], 3, 4, 1) == [7, 5, 6]
    assert propose([1, 2, 3, 4], 3, 4, 1) == []  # no suffix recurs
    assert propose([4, 1, 2, 9, 2], 3, 4, 2) == []  # only the 1-gram "2" recurs, below the minimum
    assert propose([4, 1, 2, 9, 2], 3, 4, 1) == [9, 2]


def test_grammar_cut_stops_at_a_refused_token_and_before_forced_ones():
    from guided.compile_service import CompileService
    from guided.grammar.vocab import Vocabulary

    tok = tokenizer()
    service = CompileService(Vocabulary.from_tokenizer(tok))
    matcher = service.compile(Regex("(red|green) is (good|bad)")).matcher()
    red, is_, good, green = (tok.encode(t, add_special_tokens=False) for t in ("red", " is", " good", "green"))
    kept, states, sampled_after = grammar_cut(matcher, red + green, fast_forward=False)
    assert kept == red and len(states) == 1 and sampled_after  # "green" after "red" is refused
    kept, states, sampled_after = grammar_cut(matcher, red + is_ + good, fast_forward=True)
    assert kept == red and not sampled_after  # " is" is forced after "red": plain decoding appends it
    kept, _, _ = grammar_cut(matcher, red + is_ + good, fast_forward=False)
    assert kept == red + is_ + good
    assert matcher.num_accepted == 0  # the real matcher never sees a draft


def test_config_is_checked():
    assert SpeculativeConfig.parse({"num_speculative_tokens": 3}).prompt_lookup_max == 4
    assert SpeculativeConfig.parse({"model": "m"}).method == "draft_model"  # vLLM's: a model means a draft model
    for bad, match in (({"method": "draft_model"}, "needs 'model'"), ({"method": "eagle"}, "'ngram' or 'draft_model'"),
                       ({"model": "m", "prompt_lookup_max": 2}, "prompt lookup's"),
                       ({"method": "ngram", "model": "m"}, "without a model"),
                       ({"k": 3}, "unknown keys"), ({"num_speculative_tokens": 0}, r"\[1, 64\]"),
                       ({"prompt_lookup_min": 3, "prompt_lookup_max": 2}, "must not exceed"), (4, "must be a dict")):
        with pytest.raises(ConfigError, match=match):
            SpeculativeConfig.parse(bad)  # fmt: skip


# ---------------------------------------------------------------------- the same tokens
CONSTRAINTS = {
    "json": JsonSchema(ITEM), "regex": Regex(r"(red|green|blue)( (red|green|blue)){3,12}"), "lark": Grammar(LARK),
    "gbnf": Grammar(GBNF), "choice": Choice(["red green blue red green blue", "red red red"]), "none": None,
}  # fmt: skip


@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("kind", CONSTRAINTS)
def test_greedy_tokens_equal_plain_decoding(kind, fast_forward):
    params = SamplingParams(temperature=0.0, max_tokens=48)
    plain, _ = outputs(CONSTRAINTS[kind], params, None, fast_forward=fast_forward)
    spec, stats = outputs(CONSTRAINTS[kind], params, SPEC, fast_forward=fast_forward)
    assert spec == plain
    if kind != "choice":  # (a choice of two is forced after its first token)
        assert stats["spec_accepted_tokens"] > 0, stats  # speculation happened, and paid


@pytest.mark.parametrize("temperature", [0.4, 1.0])
@pytest.mark.parametrize("kind", ["json", "regex", "none"])
def test_sampled_tokens_equal_plain_decoding_with_the_same_seeds(kind, temperature):
    """Each draft row is drawn with its position's own noise, so a seeded sample is the same token
    for token (a draft token is kept with its probability; a refused one is a draw from the rest)."""
    totals = 0
    for seed in range(3):
        params = SamplingParams(temperature=temperature, seed=seed, max_tokens=40, repetition_penalty=1.1)
        plain, _ = outputs(CONSTRAINTS[kind], params, None)
        spec, stats = outputs(CONSTRAINTS[kind], params, SPEC)
        assert spec == plain, seed
        totals += stats["spec_draft_tokens"]
    assert totals > 0


def test_tool_calls_equal_plain_decoding():
    tools = [{"type": "function", "function": {"name": "paint", "parameters": ITEM}}]
    messages = [{"role": "user", "content": ECHO}]
    outs = []
    for spec in (None, SPEC):
        (out,) = llm(speculative=spec).chat(messages, SamplingParams(temperature=0.0, max_tokens=80), tools=tools,
                                            tool_choice="required")  # fmt: skip
        outs.append((out.outputs[0].token_ids, [(c.name, c.arguments) for c in out.outputs[0].tool_calls or []]))
    assert outs[0] == outs[1] and outs[0][1]


# ---------------------------------------------------------------------- batches, cache, faults
def test_a_mixed_batch_with_opted_out_requests_and_a_shared_cached_prefix():
    prompts = [ECHO, ECHO + " again", COLORS, ECHO + " x"]
    ids = [tokenizer().encode(p) for p in prompts]

    def run(speculative, opt_out):
        engine = make_engine("llama", speculative=speculative)
        out = {}
        for wave in ([0], [1, 2, 3]):  # the first fills the prefix cache the others hit
            for i in wave:
                engine.add_request(ids[i], SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True,
                                                          speculative=i not in opt_out), request_id=str(i))  # fmt: skip
            out.update({k: v.token_ids for k, v in run_all(engine).items()})
        return out, engine

    plain, _ = run(None, set())
    mixed, engine = run(SPEC, {1, 3})
    assert mixed == plain
    assert engine.block_manager.num_hit_tokens > 0 and engine.stats()["spec_accepted_tokens"] > 0
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    # every block the prefix cache holds is a block of some final sequence: no draft token reached it
    size, finals = engine.config.block_size, [p + mixed[str(i)] for i, p in enumerate(ids)]
    chunks = {tuple(t[j : j + size]) for t in finals for j in range(0, len(t) - size + 1, size)}
    cached = [b.token_ids for b in engine.block_manager.blocks if b.hash is not None]
    assert cached and all(c in chunks for c in cached)
    _, engine = run(SPEC, {0, 1, 2, 3})
    assert engine.stats()["spec_draft_tokens"] == 0  # opted out: never drafted


def test_abort_while_a_draft_waits_for_its_check():
    engine = make_engine("llama", speculative=SPEC)
    ids = [tokenizer().encode(p) for p in (ECHO, COLORS)]
    for i, p in enumerate(ids):
        engine.add_request(p, greedy(30), request_id=str(i))
    for _ in range(40):
        engine.step()
        if any(s.draft for s in engine.scheduler.running):
            break
    victim = next(s for s in engine.scheduler.running if s.draft)
    engine.abort(victim.request_id)
    rest = run_all(engine)
    assert victim.request_id not in rest or rest[victim.request_id].finish_reason == "abort"
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    plain = make_engine("llama")
    other = next(str(i) for i in range(2) if str(i) != victim.request_id)
    plain.add_request(ids[int(other)], greedy(30), request_id=other)
    assert run_all(plain)[other].token_ids == rest[other].token_ids


def test_a_kv_pool_too_small_for_drafts_drops_them_and_keeps_the_tokens():
    # 16 blocks of 4 tokens for two 30-token prompts growing by 24: drafts never preempt anyone
    prompts = [tokenizer().encode(ECHO)[:30], tokenizer().encode(COLORS)[:30]]

    def run(speculative):
        engine = make_engine("llama", speculative=speculative, num_kv_blocks=16, enable_prefix_caching=False)
        for i, p in enumerate(prompts):
            engine.add_request(p, greedy(24), request_id=str(i))
        return {k: v.token_ids for k, v in run_all(engine).items()}, engine

    plain, plain_engine = run(None)
    spec, engine = run(SPEC)
    assert spec == plain
    assert engine.scheduler.num_preemptions <= plain_engine.scheduler.num_preemptions
    stats = engine.stats()
    assert stats["spec_accepted_tokens"] > 0 and stats["spec_draft_tokens_dropped"] > 0
    assert engine.block_manager.num_free_blocks == 16


def test_two_tensor_parallel_ranks_check_drafts_too():
    params = SamplingParams(temperature=0.0, max_tokens=32)
    plain, _ = outputs(CONSTRAINTS["json"], params, None)
    model = llm(speculative=SPEC, tensor_parallel_size=2)
    try:
        outs = model.generate([ECHO, COLORS, "x"], params, use_tqdm=False, response_format=CONSTRAINTS["json"])
        assert [o.token_ids for o in outs] == plain
        assert model.engine.stats()["spec_accepted_tokens"] > 0
    finally:
        model.shutdown()


def test_server_flag_field_and_metrics():
    openai = pytest.importorskip("openai")
    import httpx

    from guided.server.app import create_app, start_in_thread

    app = create_app(llm(speculative=SPEC), model_name="tiny")
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        texts = []
        for extra in ({}, {"speculative": False}):
            reply = client.completions.create(model="tiny", prompt=ECHO, max_tokens=40, temperature=0, extra_body={
                "response_format": {"type": "json_schema", "json_schema": {"name": "item", "schema": ITEM}}, **extra})
            texts.append(reply.choices[0].text)
        assert texts[0] == texts[1]
        json.loads(texts[0])
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert "guided_spec_acceptance_rate" in metrics and "guided_spec_accepted_tokens_total" in metrics
    finally:
        srv.should_exit = True
        thread.join(30)


# ---------------------------------------------------------------------- ends inside a draft
def _plain_and_spec(prompt_ids, params, constraint, **config):
    outs = []
    for spec in (None, SPEC):
        model = llm(speculative=spec, **config)
        (out,) = model.generate([prompt_ids], params, use_tqdm=False, response_format=constraint)
        engine = model.engine
        outs.append((out.token_ids, out.finish_reason, engine.stats()))
        assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks  # no leaked block
    return outs


def test_end_of_sequence_inside_a_draft():
    tok = tokenizer()
    eos = tok.eos_token_id
    prompt = tok.encode("red green blue") + [eos] + tok.encode(" once more: red green blue")
    (plain, plain_reason, _), (spec, spec_reason, stats) = _plain_and_spec(
        prompt, SamplingParams(temperature=0.0, max_tokens=20), Regex("red green blue"), fast_forward=False)
    assert spec == plain and spec[-1] == eos and spec_reason == plain_reason == "stop"
    assert stats["spec_accepted_tokens"] > 0  # the draft after "red" ran up to EOS


def test_max_tokens_reached_inside_a_draft():
    prompt = tokenizer().encode(COLORS * 3)
    params = SamplingParams(temperature=0.0, max_tokens=7, budget_aware=False)
    constraint = Regex(r"(red|green|blue)( (red|green|blue)){20}")
    (plain, plain_reason, _), (spec, spec_reason, stats) = _plain_and_spec(prompt, params, constraint,
                                                                           fast_forward=False)  # fmt: skip
    assert spec == plain and len(spec) == 7 and spec_reason == plain_reason == "length"
    assert stats["spec_accepted_tokens"] > 0


def test_a_draft_the_grammar_cuts_to_nothing():
    prompt = tokenizer().encode("green red green red green red")
    (plain, _, _), (spec, _, stats) = _plain_and_spec(
        prompt, SamplingParams(temperature=0.0, max_tokens=12), Regex("green( green)*"), fast_forward=False)
    assert spec == plain and stats["spec_draft_tokens"] == 0  # " red" after "green" is refused: no draft


# ---------------------------------------------------------------------- the sampled distribution
CHI2_CRITICAL_2_DF = 13.8155  # chi-square critical value at significance 0.001 for 2 degrees of freedom


def test_sampled_distribution_matches_plain_decoding_chi_square():
    """Different seeds with and without speculation (not the identity the seeds give): the last of
    four sampled letters (3 categories) of 300 requests each, a 2 x 3 contingency chi-square test at
    significance 0.001."""
    prompt = tokenizer().encode("abcabcabcabcabcabc acb bca cab")
    constraint = Regex("(a|b|c)(a|b|c)(a|b|c)(a|b|c)")
    counts = []
    for spec, base in ((None, 0), (SPEC, 1000)):
        model = llm(speculative=spec, max_num_seqs=300)
        params = [SamplingParams(temperature=1.0, seed=base + i, max_tokens=8) for i in range(300)]
        outs = model.generate([prompt] * 300, params, use_tqdm=False, response_format=constraint)
        counts.append([sum(o.text[-1] == c for o in outs) for c in "abc"])
        if spec:
            assert model.engine.stats()["spec_accepted_tokens"] > 0
    total = [a + b for a, b in zip(*counts, strict=True)]
    chi2 = sum((counts[r][c] - total[c] * 300 / 600) ** 2 / (total[c] * 300 / 600)
               for r in range(2) for c in range(3) if total[c])  # fmt: skip
    assert all(total), counts
    assert chi2 < CHI2_CRITICAL_2_DF, (counts, chi2)


def test_longrope_drafts_stop_at_the_switch():
    """Past LongRoPE's switch plain decoding computes with the long factors (the KV is recomputed):
    no draft row crosses it, and greedy tokens still equal HF's."""
    from engine_testlib import check_parity

    engine = make_engine("phi3-longrope", speculative=SPEC)
    check_parity(engine, "phi3-longrope", [PROMPTS[0] * 3, PROMPTS[3] * 6], max_tokens=40)
    assert engine.scheduler.num_rope_recomputes > 0 and engine.stats()["spec_draft_tokens"] > 0


# ---------------------------------------------------------------------- a draft model
def draft(name: str, k: int = 4) -> dict:
    return {"method": "draft_model", "model": model_dir(name), "num_speculative_tokens": k}


@pytest.mark.parametrize("kind", ["json", "regex", "gbnf", "none"])
def test_the_target_as_its_own_draft_model_is_accepted_whole_and_changes_nothing(kind):
    """The draft model picks its most likely token under the constraint's mask: with the target's own
    weights that is greedy plain decoding's token, so every draft token is accepted (a draft made
    without the mask would be refused wherever the grammar narrows the choice). (Budget steering, which
    the draft model does not know, is off: it refuses draws that could not end within max_tokens.)"""
    params = SamplingParams(temperature=0.0, max_tokens=40, budget_aware=False)
    plain, _ = outputs(CONSTRAINTS[kind], params, None)
    spec, stats = outputs(CONSTRAINTS[kind], params, draft("llama"))
    assert spec == plain
    assert stats["spec_draft_tokens"] > 20 and stats["spec_acceptance_rate"] == 1.0, stats


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_another_draft_model_changes_no_token(temperature):
    """A different model (other weights: most of its drafts refused) under a JSON schema and
    unconstrained, greedy and sampled with seeds: the tokens are plain decoding's."""
    for kind in ("json", "none"):
        params = SamplingParams(temperature=temperature, seed=3, max_tokens=24 if temperature else 32,
                                repetition_penalty=1.1)  # fmt: skip
        plain, _ = outputs(CONSTRAINTS[kind], params, None)
        spec, stats = outputs(CONSTRAINTS[kind], params, draft("llama-tied", k=3))
        assert spec == plain, kind
        assert stats["spec_draft_tokens"] > 0 and stats["spec_acceptance_rate"] < 1.0


def test_draft_model_blocks_are_released_and_a_full_pool_only_drops_drafts():
    ids = [tokenizer().encode(p) for p in (ECHO, COLORS, "x")]
    plain = make_engine("llama")
    for i, p in enumerate(ids):
        plain.add_request(p, greedy(30), request_id=str(i))
    expected = {k: v.token_ids for k, v in run_all(plain).items()}

    engine = make_engine("llama", speculative=draft("llama"))
    drafter = engine.drafter
    drafter.free = drafter.free[:40]  # room for two of the three sequences (blocks of 4 tokens)
    for i, p in enumerate(ids):
        engine.add_request(p, greedy(30), request_id=str(i))
    for _ in range(3):
        engine.step()
    victim = next(s for s in engine.scheduler.running if s.seq_id in drafter.slots)
    engine.abort(victim.request_id)
    assert victim.seq_id not in drafter.slots
    rest = {k: v.token_ids for k, v in run_all(engine).items()}
    assert all(rest[k] == expected[k] for k in rest if k != victim.request_id) and len(rest) == 2
    assert len(drafter.free) == 40 and not drafter.slots  # every draft block came back
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    assert engine.stats()["spec_accepted_tokens"] > 0


def test_a_draft_model_must_exist_and_share_the_tokenizer(tmp_path):
    from guided.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="speculative draft model: model directory .* does not exist"):
        llm(speculative={"model": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError, match="tokenizer different from the target's"):
        llm(speculative={"model": model_dir("qwen2")})  # the tiny qwen2 has other special tokens
