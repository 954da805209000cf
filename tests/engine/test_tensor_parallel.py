"""Tensor parallelism on CPU over gloo: two ranks give HF transformers' greedy tokens (as one rank
does), with guided requests, prefix hits and preemption; through the Python API, the server and
torchrun with two local processes acting as two nodes; a dead worker ends the engine with a clear
error and shutdown frees every process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jsonschema
import pytest
from engine_testlib import PROMPTS, check_parity, greedy, make_engine, model_dir, moe_checkpoint, tokenizer

from guided.engine.llm_engine import LLMEngine
from guided.errors import ConfigError, EngineDeadError

TP = {"tensor_parallel_size": 2}
ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "count": {"type": "integer", "minimum": 0}},
    "required": ["name", "count"],
    "additionalProperties": False,
}


def workers_gone(engine, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    procs = engine.runner.group.processes
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(p.poll() is not None for p in procs)


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "phi3", "qwen3_moe", "gemma3", "gpt_oss"])
def test_two_ranks_match_hf(name):
    engine = make_engine(name, **TP)
    try:
        check_parity(engine, name, PROMPTS)
        a = engine.runner.model.args
        # each rank holds half the KV heads (the cache) and half of the MLP's width
        assert engine.runner.kv_cache.shape[-2] == a.num_kv_heads // 2
        mlp = engine.runner.model.layers[-1].mlp
        if name == "gpt_oss":  # every layer a mixture: each expert's width, and the heads' sinks
            assert mlp.experts.down_proj.shape[2] == a.moe_intermediate_size // 2
            assert engine.runner.model.layers[0].self_attn.sinks.shape == (a.num_heads // 2,)
        else:
            assert mlp.down_proj.weight.shape[1] == a.intermediate_size // 2
        assert engine.runner.tp.stats["all_reduces"] > 0 and engine.runner.tp.stats["broadcasts"] > 0
    finally:
        engine.close()
    assert workers_gone(engine)
    assert engine.runner.group.processes[0].returncode == 0  # stopped, not killed


def test_stacked_expert_checkpoint_splits_across_ranks(tmp_path):
    path = moe_checkpoint(tmp_path / "stacked", stacked=True)
    engine = LLMEngine.from_model(path, tokenizer=tokenizer(), device="cpu", max_model_len=512, block_size=4, **TP)
    try:
        check_parity(engine, "qwen3_moe", PROMPTS[:3])
    finally:
        engine.close()


def test_prefix_hits_chunked_prefill_and_preemption_with_two_ranks():
    engine = make_engine("qwen3", num_kv_blocks=14, max_num_batched_tokens=9, **TP)
    try:
        check_parity(engine, "qwen3", [PROMPTS[1], PROMPTS[1] + "x", PROMPTS[0], "y = 1"], max_tokens=16)
        assert engine.block_manager.num_hit_tokens > 0 and engine.scheduler.num_preemptions > 0
    finally:
        engine.close()


def test_kv_heads_not_divisible_is_a_clear_error_before_any_process_starts():
    t = time.monotonic()
    with pytest.raises(ConfigError, match=r"num_key_value_heads \(1\) is not divisible by tensor_parallel_size \(2\)"):
        make_engine("llama-tied", **TP)
    assert time.monotonic() - t < 5
    with pytest.raises(ConfigError, match="num_attention_heads"):
        make_engine("llama", tensor_parallel_size=3)


def test_python_api_guided_requests_equal_one_rank():
    from guided.constraints import JsonSchema
    from guided.engine.sampling_params import SamplingParams
    from guided.llm import LLM

    prompts = ["Item:", "Give one item as JSON: ", "{"]
    params = SamplingParams(temperature=0.0, max_tokens=48)
    outputs = {}
    for size in (1, 2):
        with LLM(model_dir("llama"), device="cpu", max_model_len=512, tensor_parallel_size=size) as llm:
            outs = llm.generate(prompts, params, use_tqdm=False, response_format=JsonSchema(ITEM))
            outputs[size] = [o.text for o in outs]
            if size == 2:
                procs = llm.engine.runner.group.processes
    assert outputs[1] == outputs[2]
    for text in outputs[2]:
        jsonschema.validate(json.loads(text), ITEM)
    assert all(p.poll() is not None for p in procs)  # the with block stopped the worker


def test_a_dead_worker_ends_the_engine_with_a_clear_error():
    engine = make_engine("llama", **TP)
    try:
        for i, p in enumerate(PROMPTS):
            engine.add_request(engine.tokenizer.encode(p), greedy(40), request_id=str(i))
        engine.step()
        worker = engine.runner.group.processes[0]
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        t = time.monotonic()
        with pytest.raises(EngineDeadError, match=r"rank 1 \(exit code -9\) is gone"):
            for _ in range(10):
                engine.step()
        assert time.monotonic() - t < 10  # no hang (the collective timeout is far longer)
        with pytest.raises(EngineDeadError):
            engine.step()
        with pytest.raises(EngineDeadError):
            engine.add_request([1, 2, 3], greedy(4))
        assert engine.dead() is not None
    finally:
        t = time.monotonic()
        engine.close()
        assert time.monotonic() - t < 5


def test_server_with_two_ranks_answers_the_openai_client():
    openai = pytest.importorskip("openai")
    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    llm = LLM(model_dir("llama"), device="cpu", max_model_len=512, tensor_parallel_size=2)
    app = create_app(llm, model_name="tiny")
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    procs = llm.engine.runner.group.processes
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "One item, please."}], temperature=0, max_tokens=60,
            response_format={"type": "json_schema", "json_schema": {"name": "item", "schema": ITEM, "strict": True}})
        jsonschema.validate(json.loads(reply.choices[0].message.content), ITEM)
        import httpx

        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        srv.should_exit = True
        thread.join(30)
    assert all(p.wait(15) == 0 for p in procs)  # the server's shutdown stopped the worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_nodes_on_one_machine_generate_what_one_rank_does(tmp_path):
    """Two torchrun launchers, node ranks 0 and 1, one process each, rendezvous on 127.0.0.1: every
    rank runs the same `guided generate`; rank 0 prints the text, rank 1 serves as its worker."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun is not installed next to this Python")
    port = _free_port()
    command = ["-m", "guided", "generate", "--model", model_dir("llama"), "--device", "cpu", "--max-model-len", "512",
               "--max-tokens", "16", "--schema", str(tmp_path / "item.json"), "Item:"]  # fmt: skip
    (tmp_path / "item.json").write_text(json.dumps(ITEM))
    env = {**os.environ, "GUIDED_GRAMMAR_CACHE": "off", "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen([torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
                               "--master-addr", "127.0.0.1", "--master-port", str(port), *command,
                               "--tensor-parallel-size", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in (0, 1)]  # fmt: skip
    try:
        results = [n.communicate(timeout=240) for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    assert [n.returncode for n in nodes] == [0, 0], results[0][1][-3000:] + results[1][1][-3000:]
    single = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=240, env=env)
    assert single.returncode == 0, single.stderr[-3000:]
    assert results[0][0] == single.stdout and single.stdout.strip()  # rank 0 printed the one-rank text
    assert results[1][0] == ""  # the worker rank printed nothing
    jsonschema.validate(json.loads(single.stdout), ITEM)


def test_a_failed_load_raises_its_own_error_and_stops_the_workers(tmp_path):
    from guided.errors import ModelLoadError

    broken = moe_checkpoint(tmp_path / "missing", drop="experts.3.up_proj.weight")
    before = _children()
    t = time.monotonic()
    with pytest.raises(ModelLoadError, match="experts.3.up_proj"):
        LLMEngine.from_model(broken, tokenizer=tokenizer(), device="cpu", max_model_len=512, **TP)
    assert time.monotonic() - t < 60
    deadline = time.monotonic() + 15
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children() - before  # the worker it started is gone


def _children() -> set[int]:
    """The pids of this process's live children (Linux /proc)."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc")
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                out.add(int(entry))
    return out


@pytest.mark.gpu
def test_two_gpus_over_nccl_match_hf():
    """The NCCL path: two ranks on GPUs 0 and 1 in fp32 (the Triton kernels) against HF on CPU."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    engine = make_engine("qwen3", device="cuda", dtype="float32", max_num_batched_tokens=9, num_kv_blocks=14, **TP)
    try:
        check_parity(engine, "qwen3", PROMPTS[:4], max_tokens=8)
        assert engine.runner.kv_cache.device == torch.device("cuda", 0)
    finally:
        engine.close()


def test_server_after_a_worker_dies_answers_errors_and_health_503():
    import httpx

    from guided.llm import LLM
    from guided.server.app import create_app, start_in_thread

    llm = LLM(model_dir("llama"), device="cpu", max_model_len=512, tensor_parallel_size=2)
    app = create_app(llm, model_name="tiny")
    srv, thread, port = start_in_thread(app, "127.0.0.1", 0, timeout=60)
    base = f"http://127.0.0.1:{port}"
    body = {"model": "tiny", "prompt": "x = ", "max_tokens": 8, "temperature": 0}
    try:
        assert httpx.post(f"{base}/v1/completions", json=body, timeout=60).status_code == 200
        worker = llm.engine.runner.group.processes[0]
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        t = time.monotonic()
        for _ in range(2):  # the step that finds the worker gone, then a request the dead engine refuses
            reply = httpx.post(f"{base}/v1/completions", json=body, timeout=60)
            assert reply.status_code >= 500 and "rank 1" in reply.text, reply.text
        assert time.monotonic() - t < 20
        health = httpx.get(f"{base}/health", timeout=10)
        assert health.status_code == 503 and "rank 1" in health.json()["status"]
    finally:
        srv.should_exit = True
        thread.join(30)
