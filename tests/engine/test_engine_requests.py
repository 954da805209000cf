"""LLMEngine behaviour: seeded sampling, stops, lengths, logprobs, penalties, aborts, errors."""

from __future__ import annotations

import math

import pytest
from engine_testlib import PROMPTS, greedy, make_engine, model_dir, run_all

from guided.engine.config import Config
from guided.engine.sampling_params import SamplingParams
from guided.errors import ConfigError, ModelLoadError


@pytest.fixture(scope="module")
def engine():
    return make_engine("llama")


def generate(engine, prompt, params, rid="r"):
    engine.add_request(prompt, params, request_id=rid)
    return run_all(engine)[rid]


def test_seeded_sampling_is_reproducible_whatever_the_batch(engine):
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=1234, max_tokens=16, ignore_eos=True)
    alone = generate(engine, PROMPTS[1], params).token_ids
    for i, p in enumerate(PROMPTS):  # the same request inside a batch of others
        engine.add_request(p, SamplingParams(temperature=1.0, max_tokens=8), request_id=f"other{i}")
    engine.add_request(PROMPTS[1], params, request_id="again")
    assert run_all(engine)["again"].token_ids == alone
    other_seed = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=99, max_tokens=16, ignore_eos=True)
    assert generate(engine, PROMPTS[1], other_seed).token_ids != alone


def test_n_completions_differ_and_are_reproducible(engine):
    params = SamplingParams(temperature=1.0, n=3, seed=7, max_tokens=10, ignore_eos=True)
    first = generate(engine, PROMPTS[0], params)
    texts = [o.token_ids for o in first.outputs]
    assert len(set(map(tuple, texts))) == 3
    assert [o.token_ids for o in generate(engine, PROMPTS[0], params).outputs] == texts


def test_max_tokens_ends_with_length(engine):
    out = generate(engine, PROMPTS[2], greedy(5))
    assert len(out.token_ids) == 5 and out.finish_reason == "length"
    assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_stop_string_cuts_the_text(engine):
    full = generate(engine, PROMPTS[2], greedy(24))
    stop = full.text[10:13]
    cut = full.text.index(stop)
    out = generate(engine, PROMPTS[2], greedy(24, stop=[stop, "never-there"]))
    assert out.finish_reason == "stop" and out.outputs[0].stop_reason == stop
    assert out.text == full.text[:cut]
    assert out.token_ids == full.token_ids[: len(out.token_ids)] and len(out.token_ids) < 24
    kept = generate(engine, PROMPTS[2], greedy(24, stop=stop, include_stop_str_in_output=True))
    assert kept.text == full.text[: cut + len(stop)]


def test_stop_token_ids_and_eos(engine):
    full = generate(engine, PROMPTS[3], greedy(16))
    stop_id = full.token_ids[6]
    out = generate(engine, PROMPTS[3], greedy(16, stop_token_ids=[stop_id]))
    end = full.token_ids.index(stop_id) + 1
    assert out.token_ids == full.token_ids[:end] and out.finish_reason == "stop"
    assert out.outputs[0].stop_reason == stop_id
    engine.eos_token_ids.append(stop_id)  # the same id as EOS: ends unless ignore_eos
    try:
        eos = generate(engine, PROMPTS[3], SamplingParams(temperature=0, max_tokens=16))
        assert eos.token_ids == full.token_ids[:end] and eos.finish_reason == "stop"
        late = generate(engine, PROMPTS[3], SamplingParams(temperature=0, max_tokens=16, min_tokens=end + 1))
        assert stop_id not in late.token_ids[:end + 1]  # masked until min_tokens were generated
    finally:
        engine.eos_token_ids.remove(stop_id)


def test_streaming_deltas_add_up(engine):
    engine.add_request(PROMPTS[1], greedy(20, stop="\n\n\n"), request_id="s")
    text, ids = "", []
    while engine.has_unfinished():
        for out in engine.step():
            text += out.outputs[0].delta_text
            ids += out.outputs[0].delta_token_ids
            final = out
    assert text == final.text and ids == final.token_ids


def test_logprobs(engine):
    out = generate(engine, PROMPTS[0], greedy(4, logprobs=3))
    lps = out.outputs[0].logprobs
    assert len(lps) == 4
    for token, row in zip(out.token_ids, lps, strict=True):
        assert next(iter(row)) == token and len(row) in (3, 4)
        assert row[token] == pytest.approx(max(row.values()))  # greedy picks the most likely
        assert all(v <= 0 and not math.isnan(v) for v in row.values())


def test_penalties_change_greedy_output(engine):
    plain = generate(engine, PROMPTS[0], greedy(24)).token_ids
    penalised = generate(engine, PROMPTS[0], greedy(24, presence_penalty=2.0, frequency_penalty=2.0)).token_ids
    assert len(set(penalised)) >= len(set(plain))
    assert penalised != plain or len(set(plain)) == len(plain)


def test_abort_frees_every_block():
    engine = make_engine("llama", max_num_batched_tokens=8, num_kv_blocks=24)
    start = engine.block_manager.num_free_blocks
    for i, p in enumerate(PROMPTS):
        engine.add_request(p, greedy(30), request_id=str(i))
    for _ in range(4):
        engine.step()
    assert engine.block_manager.num_free_blocks < start
    for i in range(len(PROMPTS)):
        assert engine.abort(str(i))
    assert not engine.has_unfinished()
    assert engine.block_manager.num_free_blocks == start
    assert not engine.abort("0")  # already gone


def test_prompt_errors(engine):
    with pytest.raises(ConfigError, match="empty"):
        engine.add_request([], greedy())
    with pytest.raises(ConfigError, match="token ids"):
        engine.add_request([engine.vocab_size], greedy())
    with pytest.raises(ConfigError, match="at most"):
        engine.add_request([1] * 600, greedy())
    engine.add_request("x", greedy(), request_id="dup")
    with pytest.raises(ConfigError, match="already in use"):
        engine.add_request("x", greedy(), request_id="dup")
    engine.abort("dup")


def test_vocab_size_is_the_padded_lm_head(engine):
    assert engine.vocab_size % 64 == 0 and engine.vocab_size > len(engine.tokenizer)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(temperature=-1), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-2), "top_k"),
        (dict(min_p=2), "min_p"),
        (dict(repetition_penalty=0), "repetition_penalty"),
        (dict(frequency_penalty=3), "frequency_penalty"),
        (dict(presence_penalty=-3), "presence_penalty"),
        (dict(n=0), "n"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(min_tokens=5, max_tokens=2), "min_tokens"),
        (dict(stop=[""]), "stop"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
        (dict(logprobs=-1), "logprobs"),
        (dict(seed="x"), "seed"),
        (dict(seed=2**64), "seed"),
        (dict(temperature="hot"), "temperature"),
        (dict(temperature=1e5), "temperature"),
        (dict(temperature=math.inf), "temperature"),
        (dict(repetition_penalty=1e308), "repetition_penalty"),
        (dict(repetition_penalty=1e-300), "repetition_penalty"),
        (dict(logprobs=21), "logprobs"),
    ],
)
def test_sampling_params_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        SamplingParams(**kwargs)
    assert info.value.param == match  # the server's 400 names the field


def test_tiny_temperatures_are_raised_to_the_floor():
    assert SamplingParams(temperature=1e-300).temperature == 0.01
    assert SamplingParams(temperature=0.0).greedy


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(stop_token_ids=[10**9]), "stop_token_ids"), (dict(n=10**6), "max_num_seqs")],
)
def test_values_only_the_engine_can_check(engine, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        engine.add_request("x", greedy(**kwargs))
    assert not engine.requests


def test_top_k_past_int32_keeps_every_token(engine):
    """top_k beyond the vocabulary (even past int32) is 'off': the same tokens as without it."""
    free = generate(engine, "import os", SamplingParams(temperature=0.8, seed=7, max_tokens=8), "a")
    huge = generate(engine, "import os", SamplingParams(temperature=0.8, seed=7, max_tokens=8, top_k=2**40), "b")
    assert huge.token_ids == free.token_ids


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(block_size=0), "block_size"),
        (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
        (dict(max_num_seqs=0), "max_num_seqs"),
        (dict(dtype="float8"), "dtype"),
        (dict(device="tpu"), "device"),
        (dict(max_model_len=10**6), "max_model_len"),
        (dict(enable_chunked_prefill=False, max_num_batched_tokens=16), "chunked"),
    ],
)
def test_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Config(model=model_dir("llama"), **kwargs)


def test_model_load_errors(tmp_path, monkeypatch):
    # a hub name resolves through the Hugging Face cache (#24); offline and absent, a clear error
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache"):
        Config(model="meta-llama/Llama-3.2-1B")
    with pytest.raises(ModelLoadError, match="does not exist"):
        Config(model=str(tmp_path / "no" / "such" / "dir"))
    with pytest.raises(ModelLoadError, match="config.json"):
        Config(model=str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "llama", "max_position_embeddings": 64}')
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    from guided.engine.loader import safetensors_files

    with pytest.raises(ModelLoadError, match="safetensors"):
        safetensors_files(tmp_path)


def test_the_end_of_reasoning_is_found_however_the_model_spelled_it():
    """max_reasoning_tokens stops counting at the marker whether the model wrote its canonical ids or
    other pieces of the same text (a grammar takes any spelling); a prefix of it is not the end."""
    engine = make_engine("llama")
    tok = engine.tokenizer
    marker = tok.encode("</think>", add_special_tokens=False)
    pieces = [t for part in ("</", "thi", "nk", ">") for t in tok.encode(part, add_special_tokens=False)]
    assert pieces != marker
    before = tok.encode("so the answer is", add_special_tokens=False)
    assert engine._ends_with_marker(before + marker, marker)
    assert engine._ends_with_marker(before + pieces, marker)
    assert not engine._ends_with_marker(before + pieces[:-1], marker)
    assert not engine._ends_with_marker(before, marker)
