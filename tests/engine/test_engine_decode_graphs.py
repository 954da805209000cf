"""Decode steps through DecodeGraphs' padded static inputs, checked on CPU against HF's greedy generate.

On CPU no graph is captured (``capture=False``): the model runs on exactly the padded inputs a replay
reads (batch padded to a captured size, every sequence's chunk padded to the step's chunk length),
so the padding and the gather of real rows are checked here; the GPU tests replay real graphs.
"""

from __future__ import annotations

import json
import random

import pytest
from engine_testlib import PROMPTS, greedy, hf_greedy, make_engine, run_all

from guided.engine.cuda_graphs import DecodeGraphs


def with_emulated_graphs(engine, max_batch: int = 8, max_chunk: int = 4):
    graphs = DecodeGraphs(engine.runner, max_batch, engine.config.max_model_len, max_chunk, capture=False)
    engine.set_decode_graphs(graphs)
    runs: dict[tuple[int, int], int] = {}
    run = graphs.run

    def counted(shape, *args):
        runs[shape] = runs.get(shape, 0) + 1
        return run(shape, *args)

    graphs.run = counted
    return runs


@pytest.mark.parametrize("seed", range(3))
def test_padded_chunks_match_hf(seed):
    """Small budgets split prompts into chunks of 1-3 tokens beside single-token decodes: every step with
    chunks of at most 4 tokens runs padded (chunk length 2 or 4, batch padded to 1/2/4/8), and the
    greedy outputs still equal HF's."""
    rng = random.Random(seed)
    engine = make_engine("llama", max_num_batched_tokens=rng.randint(3, 7), max_num_seqs=rng.randint(3, 6))
    runs = with_emulated_graphs(engine)
    base = engine.tokenizer.encode(PROMPTS[4])
    prompts = [base[: rng.randint(2, len(base))] for _ in range(5)]
    for i, p in enumerate(prompts):
        engine.add_request(p, greedy(10), request_id=str(i))
    finals = run_all(engine)
    for i, p in enumerate(prompts):
        assert finals[str(i)].token_ids == hf_greedy("llama", p, 10), f"prompt {i}"
    assert any(k > 1 for _, k in runs) and any(k == 1 for _, k in runs), runs


def test_fast_forward_chunks_stay_on_graphs():
    """A guided request whose schema forces long runs: with graphs, a decoding sequence's chunk is capped
    at the longest captured chunk (4 here), every decode step runs padded, and the output is the same
    valid JSON as without graphs."""
    from guided.constraints import JsonSchema
    from guided.llm import LLM

    schema = {"type": "object", "properties": {"customer_identifier_field": {"const": "a_rather_long_constant"},
              "flag": {"type": "boolean"}}, "required": ["customer_identifier_field", "flag"],
              "additionalProperties": False}  # fmt: skip
    texts = {}
    for mode in ("eager", "graphs"):
        from engine_testlib import model_dir, tokenizer

        llm = LLM(model_dir("llama"), tokenizer=tokenizer(), device="cpu", block_size=4, max_model_len=256)
        runs = with_emulated_graphs(llm.engine) if mode == "graphs" else None
        out = llm.generate(["Give me JSON"], greedy(60), use_tqdm=False, response_format=JsonSchema(schema))[0]
        assert out.finish_reason == "stop", out.text
        texts[mode] = json.loads(out.text)
        if runs is not None:
            assert any(k == 4 for _, k in runs), runs  # forced runs went through chunk-4 steps
            assert llm.engine.stats()["num_forced_tokens"] > 8
    assert texts["graphs"] == texts["eager"]
    assert texts["graphs"]["customer_identifier_field"] == "a_rather_long_constant"


def test_decode_chunk_cap_shrinks_with_the_batch():
    """Padded graph steps stay within DECODE_CHUNK_TOKENS tokens: 8 new tokens a sequence up to 32
    sequences, then fewer, one at 256; no cap without graphs."""
    from guided.engine.scheduler import DECODE_CHUNK_TOKENS

    engine = make_engine("llama")
    scheduler = engine.scheduler
    assert scheduler.max_decode_chunk is None and scheduler._decode_chunk_cap() is None  # CPU: no graphs
    scheduler.max_decode_chunk = 8
    caps = {}
    for n in (1, 32, 33, 64, 100, 128, 256, 300):
        scheduler.running = [None] * n
        caps[n] = scheduler._decode_chunk_cap()
    scheduler.running = []
    assert caps == {1: 8, 32: 8, 33: 4, 64: 4, 100: 2, 128: 2, 256: 1, 300: 1}
    assert all(n * k <= max(DECODE_CHUNK_TOKENS, n) for n, k in caps.items())


@pytest.mark.gpu
def test_cuda_graph_chunks_match_hf():
    """Real graphs (batch and chunk shapes captured) in fp32: chunked prefills of 1-3 tokens beside
    decodes replay padded graphs, and greedy outputs equal HF's on CPU."""
    engine = make_engine("llama", device="cuda", dtype="float32", max_num_batched_tokens=5, max_num_seqs=4,
                         cuda_graph_max_batch=8, cuda_graph_max_chunk=4)  # fmt: skip
    graphs = engine.runner.graphs
    assert graphs is not None and graphs.error is None and (4, 4) in graphs.graphs
    replays: dict[tuple[int, int], int] = {}
    run = graphs.run
    graphs.run = lambda shape, *args: (replays.__setitem__(shape, replays.get(shape, 0) + 1), run(shape, *args))[1]
    base = engine.tokenizer.encode(PROMPTS[4])
    prompts = [base[: 3 + 4 * i] for i in range(4)]
    for i, p in enumerate(prompts):
        engine.add_request(p, greedy(10), request_id=str(i))
    finals = run_all(engine)
    for i, p in enumerate(prompts):
        assert finals[str(i)].token_ids == hf_greedy("llama", p, 10), f"prompt {i}"
    assert any(k > 1 for _, k in replays), replays
