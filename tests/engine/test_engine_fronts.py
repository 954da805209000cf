"""The offline LLM facade and the asyncio front."""

from __future__ import annotations

import asyncio

import pytest
from engine_testlib import PROMPTS, greedy, hf_greedy, model_dir, tokenizer

from guided.engine.async_engine import AsyncEngine
from guided.engine.llm_engine import LLMEngine
from guided.errors import ConfigError
from guided.llm import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm():
    return LLM(model_dir("llama"), tokenizer=tokenizer(), device="cpu", block_size=4, max_model_len=512)


def test_llm_generate_in_prompt_order_matches_hf(llm):
    outs = llm.generate(PROMPTS, greedy(10), use_tqdm=False)
    assert [o.prompt for o in outs] == PROMPTS
    for out in outs:
        assert out.token_ids == hf_greedy("llama", out.prompt_token_ids, 10)
        assert out.finish_reason == "length"
        assert out.text == llm.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_llm_generate_stop_strings(llm):
    (full,) = llm.generate(PROMPTS[1], greedy(20))
    stop = full.text[8:11]
    (cut,) = llm.generate(PROMPTS[1], greedy(20, stop=stop))
    assert cut.text == full.text[: full.text.index(stop)] and cut.finish_reason == "stop"


def test_llm_generate_single_prompt_and_per_prompt_params(llm):
    (one,) = llm.generate("import os", greedy(3))
    assert len(one.token_ids) == 3
    outs = llm.generate(["a", "b"], [greedy(2), greedy(4)])
    assert [len(o.token_ids) for o in outs] == [2, 4]
    with pytest.raises(ConfigError, match="2 prompts"):
        llm.generate(["a", "b"], [greedy(2)])


def test_llm_default_model_prints_a_notice(capsys):
    llm = LLM(device="cpu", max_model_len=256)
    assert "random-weight default model" in capsys.readouterr().err
    assert len(llm.generate(["hi"] * 10, SamplingParams(max_tokens=2), use_tqdm=True)) == 10


def test_async_engine_streams_deltas_and_serves_concurrently():
    engine = LLMEngine.from_model(model_dir("llama"), tokenizer=tokenizer(), device="cpu", block_size=4,
                                  max_model_len=512)
    front = AsyncEngine(engine)

    async def one(prompt, n):
        text, ids, last = "", [], None
        async for out in front.generate(prompt, greedy(n)):
            text += out.outputs[0].delta_text
            ids += out.outputs[0].delta_token_ids
            last = out
        assert last.finished and text == last.text and ids == last.token_ids
        return last

    async def main():
        return await asyncio.gather(*(one(p, 6 + i) for i, p in enumerate(PROMPTS)))

    try:
        outs = asyncio.run(main())
        for i, out in enumerate(outs):
            assert out.token_ids == hf_greedy("llama", out.prompt_token_ids, 6 + i)
    finally:
        front.shutdown()


def test_async_engine_cancel_aborts_and_frees_blocks():
    engine = LLMEngine.from_model(model_dir("llama"), tokenizer=tokenizer(), device="cpu", block_size=4,
                                  max_model_len=512)
    start = engine.block_manager.num_free_blocks
    front = AsyncEngine(engine)

    started = asyncio.Event()

    async def consume():
        async for _ in front.generate(PROMPTS[4], greedy(400)):
            started.set()  # cancel mid-stream, however fast the machine is

    async def main():
        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        bad = front.generate([], greedy(2))
        with pytest.raises(ConfigError, match="empty"):
            await bad.__anext__()
        for _ in range(100):
            if not engine.has_unfinished():
                break
            await asyncio.sleep(0.05)

    try:
        asyncio.run(main())
        assert not engine.has_unfinished()
        assert engine.block_manager.num_free_blocks == start
    finally:
        front.shutdown()
