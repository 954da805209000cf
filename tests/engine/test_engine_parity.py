"""Greedy outputs equal HF transformers' greedy generate, token for token, under every scheduling path."""

from __future__ import annotations

import random

import pytest
import torch
from engine_testlib import (
    PROMPTS,
    check_parity,
    gemma3_multimodal_checkpoint,
    greedy,
    hf_greedy,
    make_engine,
    model_dir,
    moe_checkpoint,
    run_all,
    tokenizer,
)

from guided.engine.llm_engine import LLMEngine

MAX_TOKENS = 12


FAMILIES = ["llama", "qwen2", "qwen3", "llama-tied", "phi3", "phi3-longrope", "qwen3_moe", "mixtral", "gemma3",
            "gemma3-softcap", "qwen2-window", "gpt_oss"]  # fmt: skip


@pytest.mark.parametrize("name", FAMILIES)
def test_batch_of_prompts_matches_hf(name):
    engine = make_engine(name)
    check_parity(engine, name, PROMPTS)
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_prefix_cache_hits_match_hf():
    engine = make_engine("llama", block_size=4)
    shared = PROMPTS[4]
    check_parity(engine, "llama", [shared])
    before = engine.block_manager.num_hit_tokens
    prompts = [shared, shared + "print(total)", shared[:40] + " break"]
    check_parity(engine, "llama", prompts)
    full_blocks = len(engine.tokenizer.encode(shared)) // 4 * 4
    assert engine.block_manager.num_hit_tokens - before >= 2 * full_blocks  # the first two reuse them all
    assert engine.stats()["prefix_cache_hit_rate"] > 0.4


def test_chunked_prefill_small_budget_matches_hf():
    engine = make_engine("qwen2", max_num_batched_tokens=7)
    check_parity(engine, "qwen2", PROMPTS)


def test_longrope_sequences_growing_past_the_switch_match_hf():
    # past 32 tokens a sequence takes the long factors everywhere: its KV is computed again, once
    engine = make_engine("phi3-longrope")
    outputs = check_parity(engine, "phi3-longrope", PROMPTS, max_tokens=40)
    crossing = [p for p in PROMPTS if len(engine.tokenizer.encode(p)) <= 32]
    assert engine.scheduler.num_rope_recomputes == len(crossing) == 4
    assert all(o.finish_reason == "length" for o in outputs.values())


def test_longrope_phases_never_share_cached_blocks():
    engine = make_engine("phi3-longrope")
    short, long = PROMPTS[4][:60], PROMPTS[4]  # 16 and 34 tokens: their blocks hold different KV
    ids = engine.tokenizer.encode(short), engine.tokenizer.encode(long)
    assert len(ids[0]) <= 32 < len(ids[1]) and ids[0][:12] == ids[1][:12]  # 3 blocks of 4 tokens alike
    check_parity(engine, "phi3-longrope", [short], max_tokens=4)
    check_parity(engine, "phi3-longrope", [long], max_tokens=4)
    assert engine.block_manager.num_hit_tokens == 0  # the short phase's blocks are not the long one's
    check_parity(engine, "phi3-longrope", [short + "x"], max_tokens=4)  # short again: a hit
    assert engine.block_manager.num_hit_tokens >= 12


def test_longrope_named_su_as_early_phi3_configs_name_it(tmp_path):
    import json
    import shutil

    out = tmp_path / "su"
    shutil.copytree(model_dir("phi3-longrope"), out)
    config = json.loads((out / "config.json").read_text())
    rope = config.get("rope_parameters") or config["rope_scaling"]
    rope.pop("rope_type", None)
    rope["type"] = "su"
    (out / "config.json").write_text(json.dumps(config))
    engine = LLMEngine.from_model(str(out), tokenizer=tokenizer(), device="cpu", max_model_len=512, block_size=4)
    check_parity(engine, "phi3-longrope", PROMPTS[:2], max_tokens=40)  # the same weights: HF's longrope tokens
    assert engine.scheduler.num_rope_recomputes > 0


def test_phi3_with_prefix_hits_chunked_prefill_and_preemption_matches_hf():
    # fused qkv/gate_up checkpoint weights, a partial rotary embedding, LongRoPE's two phases
    engine = make_engine("phi3-longrope", num_kv_blocks=14, max_num_batched_tokens=9)
    prompts = [PROMPTS[1], PROMPTS[1] + "x", PROMPTS[0], "y = 1"]
    check_parity(engine, "phi3-longrope", prompts, max_tokens=24)  # the first two grow past 32 tokens
    assert engine.block_manager.num_hit_tokens > 0 and engine.scheduler.num_preemptions > 0
    assert engine.scheduler.num_rope_recomputes > 0


def test_moe_with_prefix_hits_chunked_prefill_and_preemption_matches_hf():
    engine = make_engine("qwen3_moe", num_kv_blocks=14, max_num_batched_tokens=9)
    prompts = [PROMPTS[1], PROMPTS[1] + "x", PROMPTS[0], "y = 1"]
    check_parity(engine, "qwen3_moe", prompts, max_tokens=16)
    assert engine.block_manager.num_hit_tokens > 0 and engine.scheduler.num_preemptions > 0


LOGITS_ATOL = 5e-5  # fp32 on CPU: the largest difference seen is 1.3e-5 (gemma3-softcap), logits up to ~5


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_of_every_position_match_hf(name):
    """One forward pass of a 34-token prompt (past the 6-key windows and the LongRoPE switch at 32):
    the logits at every position equal HF's within LOGITS_ATOL."""
    from engine_testlib import hf_model

    engine = make_engine(name)
    ids = engine.tokenizer.encode(PROMPTS[4])
    n, switch = len(ids), engine.runner.model.rotary.switch
    table = list(range(-(-n // engine.config.block_size)))  # a fresh pool: blocks 0.. are this prompt's
    long = None if switch is None else [n > switch] * n  # (HF's phase for the whole sequence)
    ours = engine.runner.replay((ids, list(range(n)), list(range(n)), [0, n], [n], [table], n, long, list(range(n))))
    with torch.inference_mode():
        theirs = hf_model(name)(torch.tensor([ids])).logits[0].float()
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=LOGITS_ATOL, rtol=0)


def test_sliding_windows_with_prefix_hits_chunked_prefill_and_preemption_match_hf():
    # prompts far longer than the 6-key window, chunks of 9 tokens, a pool too small for all at once
    engine = make_engine("gemma3", num_kv_blocks=16, max_num_batched_tokens=9)
    prompts = [PROMPTS[4], PROMPTS[4] + "x = 1", PROMPTS[1], PROMPTS[2]]
    check_parity(engine, "gemma3", prompts, max_tokens=16)
    assert engine.block_manager.num_hit_tokens > 0 and engine.scheduler.num_preemptions > 0
    assert engine.runner.model.args.windows == (6, 6, None)
    assert engine.config.max_model_len == 512  # a window no longer caps the context
    # the window is what HF applied: the same weights with a window past every prompt decode otherwise
    ids = [engine.tokenizer.encode(p) for p in PROMPTS]
    assert any(hf_greedy("gemma3", p, 12) != hf_greedy("gemma3-full", p, 12) for p in ids)
    engine = make_engine("qwen2-window", max_num_batched_tokens=7)
    check_parity(engine, "qwen2-window", PROMPTS, max_tokens=16)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_guided_request_on_each_family_finishes_valid(name):
    import json

    import jsonschema

    from guided.constraints import JsonSchema
    from guided.engine.sampling_params import SamplingParams
    from guided.llm import LLM

    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {
        "enum": ["a", "b"]}, "maxItems": 3}}, "required": ["id", "tags"], "additionalProperties": False}  # fmt: skip
    llm = LLM(model_dir(name), tokenizer=tokenizer(), device="cpu", max_model_len=512)
    outs = llm.generate(["Record:", PROMPTS[4]], SamplingParams(temperature=0.8, seed=3, max_tokens=64),
                        use_tqdm=False, response_format=JsonSchema(schema))  # fmt: skip
    for out in outs:
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), schema)


def generate(hf, ids: list[int], n: int, vocab: int) -> list[int]:
    """``n`` greedy tokens of a transformers model that has no engine_testlib name, never stopping."""
    with torch.inference_mode():
        out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          do_sample=False, max_new_tokens=n, eos_token_id=None, pad_token_id=0,
                          suppress_tokens=list(range(len(tokenizer()), vocab)))  # fmt: skip
    return out[0, len(ids) :].tolist()


def test_multimodal_gemma3_checkpoint_runs_its_language_model(tmp_path):
    import json

    import transformers

    path = gemma3_multimodal_checkpoint(tmp_path / "gemma3-mm")
    assert json.loads((tmp_path / "gemma3-mm" / "config.json").read_text())["model_type"] == "gemma3"
    engine = LLMEngine.from_model(path, tokenizer=tokenizer(), device="cpu", max_model_len=512, block_size=4)
    hf = transformers.Gemma3ForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    vocab = hf.config.text_config.vocab_size
    for i, prompt in enumerate(PROMPTS):
        ids = engine.tokenizer.encode(prompt)
        engine.add_request(ids, greedy(12), request_id=str(i))
        assert run_all(engine)[str(i)].token_ids == generate(hf, ids, 12, vocab), f"prompt {i}"


def test_moe_checkpoint_with_stacked_experts_or_a_missing_expert(tmp_path):
    from guided.errors import ModelLoadError

    missing = moe_checkpoint(tmp_path / "missing", drop="experts.3.up_proj.weight")
    with pytest.raises(ModelLoadError, match="experts.3.up_proj"):
        LLMEngine.from_model(missing, tokenizer=tokenizer(), device="cpu", max_model_len=512)
    stacked = moe_checkpoint(tmp_path / "stacked", stacked=True)
    engine = LLMEngine.from_model(stacked, tokenizer=tokenizer(), device="cpu", max_model_len=512, block_size=4)
    check_parity(engine, "qwen3_moe", PROMPTS[:3])


def test_preemption_by_tiny_kv_pool_matches_hf():
    # 10 blocks of 4 tokens: each request fits alone, all of them together do not
    engine = make_engine("llama", num_kv_blocks=10, enable_prefix_caching=False)
    prompts = [PROMPTS[0], PROMPTS[3], "while True:", "return None"]
    check_parity(engine, "llama", prompts, max_tokens=20)
    assert engine.scheduler.num_preemptions > 0
    assert engine.block_manager.num_free_blocks == 10


def test_preemption_with_prefix_cache_matches_hf():
    engine = make_engine("qwen3", num_kv_blocks=14, max_num_batched_tokens=9)
    prompts = [PROMPTS[1], PROMPTS[1] + "x", PROMPTS[0], "y = 1"]
    check_parity(engine, "qwen3", prompts, max_tokens=16)
    assert engine.scheduler.num_preemptions > 0


def test_requests_arriving_while_others_run_match_hf():
    engine = make_engine("llama", max_num_batched_tokens=16)
    ids = [engine.tokenizer.encode(p) for p in PROMPTS]
    finals = {}
    arrivals = {0: [0, 1], 3: [2], 5: [3, 4]}  # step -> prompts added before it
    step = 0
    while step <= max(arrivals) or engine.has_unfinished():
        for i in arrivals.get(step, []):
            engine.add_request(ids[i], greedy(MAX_TOKENS), request_id=str(i))
        finals.update({o.request_id: o for o in engine.step() if o.finished})
        step += 1
    for i, p in enumerate(ids):
        assert finals[str(i)].token_ids == hf_greedy("llama", p, MAX_TOKENS)


def test_repetition_penalty_matches_hf():
    engine = make_engine("llama")
    p = engine.tokenizer.encode(PROMPTS[2])
    engine.add_request(p, greedy(MAX_TOKENS, repetition_penalty=1.5), request_id="r")
    out = run_all(engine)["r"]
    assert out.token_ids == hf_greedy("llama", p, MAX_TOKENS, repetition_penalty=1.5)


@pytest.mark.gpu
@pytest.mark.parametrize("enforce_eager", [True, False])
def test_cuda_fp32_matches_hf(enforce_eager):
    """The Triton kernels (and the decode CUDA graphs) in fp32 against HF on CPU."""
    engine = make_engine("llama", device="cuda", dtype="float32", enforce_eager=enforce_eager)
    check_parity(engine, "llama", PROMPTS, max_tokens=8)
    engine = make_engine("qwen3", device="cuda", dtype="float32", enforce_eager=enforce_eager,
                         max_num_batched_tokens=9, num_kv_blocks=14)  # fmt: skip
    check_parity(engine, "qwen3", PROMPTS[:4], max_tokens=8)
    # the kernel's sliding window, in prefill chunks, decodes and CUDA graphs
    engine = make_engine("gemma3", device="cuda", dtype="float32", enforce_eager=enforce_eager, max_num_batched_tokens=9)
    check_parity(engine, "gemma3", PROMPTS, max_tokens=12)
    engine = make_engine("qwen3_moe", device="cuda", dtype="float32")  # the experts' grouped GEMM
    check_parity(engine, "qwen3_moe", PROMPTS, max_tokens=12)


@pytest.mark.parametrize("seed", range(4))
def test_random_schedules_match_hf(seed):
    """Random pools, budgets, shared prefixes, arrivals and an abort: greedy still equals HF, blocks all return."""
    rng = random.Random(seed)
    max_tokens = 10
    engine = make_engine(
        "llama",
        num_kv_blocks=rng.randint(13, 30),  # >= 52 tokens: the longest request fits alone
        max_num_batched_tokens=rng.randint(3, 24),
        max_num_seqs=rng.randint(2, 6),
        enable_prefix_caching=rng.random() < 0.7,
    )
    base = engine.tokenizer.encode(PROMPTS[4])
    prompts = [base[: rng.randint(1, len(base))] + [rng.randrange(300, 4000) for _ in range(rng.randint(0, 6))]
               for _ in range(6)]  # fmt: skip
    arrivals = {i: rng.randint(0, 8) for i in range(len(prompts))}
    victim, abort_at = str(rng.randrange(len(prompts))), rng.randint(1, 12)
    finals, step = {}, 0
    while step <= 8 or engine.has_unfinished():
        for i, at in arrivals.items():
            if at == step:
                engine.add_request(prompts[i], greedy(max_tokens), request_id=str(i))
        if step == abort_at:
            engine.abort(victim)
        finals.update({o.request_id: o for o in engine.step() if o.finished})
        step += 1
    for i, p in enumerate(prompts):
        if str(i) in finals:
            assert finals[str(i)].token_ids == hf_greedy("llama", p, max_tokens), f"prompt {i}"
        else:
            assert str(i) == victim
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def mxfp4_checkpoints(out) -> tuple[str, str]:
    """The tiny gpt-oss with its experts in MXFP4 (random 4-bit codes and block exponents, stored as
    published: ``*_blocks`` and ``*_scales``, a ``quantization_config``), and the same model with those
    experts dequantized by transformers (``convert_moe_packed_tensors``) into its own layout: the
    checkpoint transformers' generate runs as the oracle."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    source = model_dir("gpt_oss")
    tensors = load_file(f"{source}/model.safetensors")
    gen = torch.Generator().manual_seed(23)
    packed, dense = {}, {}
    for name, t in tensors.items():
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            packed[name] = dense[name] = t
            continue
        e, k, n = t.shape  # transformers' [experts, in, out]
        blocks = torch.randint(0, 256, (e, n, k // 32, 16), generator=gen, dtype=torch.uint8)
        scales = torch.randint(120, 126, (e, n, k // 32), generator=gen, dtype=torch.uint8)  # 2^-7 .. 2^-2
        packed[f"{name}_blocks"], packed[f"{name}_scales"] = blocks, scales
        dense[name] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    paths = []
    for kind, weights in (("mxfp4", packed), ("dense", dense)):
        path = out / kind
        shutil.copytree(source, path)
        save_file(weights, str(path / "model.safetensors"))
        if kind == "mxfp4":
            config = json.loads((path / "config.json").read_text())
            config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["router", "lm_head"]}
            (path / "config.json").write_text(json.dumps(config))
        paths.append(str(path))
    return paths[0], paths[1]


def test_gpt_oss_mxfp4_experts_load_and_match_hf_on_their_dequantized_weights(tmp_path):
    import transformers

    from guided.engine.models.gpt_oss import dequantize_mxfp4
    from guided.errors import ModelLoadError

    packed, dense = mxfp4_checkpoints(tmp_path)
    engine = LLMEngine.from_model(packed, tokenizer=tokenizer(), device="cpu", max_model_len=512, block_size=4)
    hf = transformers.AutoModelForCausalLM.from_pretrained(dense, dtype=torch.float32).eval()
    vocab = hf.config.vocab_size
    for i, prompt in enumerate(PROMPTS[:3]):
        ids = engine.tokenizer.encode(prompt)
        engine.add_request(ids, greedy(10), request_id=str(i))
        assert run_all(engine)[str(i)].token_ids == generate(hf, ids, 10, vocab), prompt
    # the dequantization itself, on odd codes and exponents, in transformers' layout after a transpose
    blocks = torch.randint(0, 256, (2, 3, 2, 16), dtype=torch.uint8)
    scales = torch.randint(100, 140, (2, 3, 2), dtype=torch.uint8)
    torch.testing.assert_close(dequantize_mxfp4(blocks, scales, torch.float32).transpose(1, 2),
                               convert_moe_packed_tensors_ref(blocks, scales), atol=0, rtol=0)  # fmt: skip
    # a checkpoint with one half of a pair, and a quantization this family does not load
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    half = tmp_path / "half"
    shutil.copytree(packed, half)
    weights = load_file(str(half / "model.safetensors"))
    del weights["model.layers.1.mlp.experts.down_proj_scales"]
    save_file(weights, str(half / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="down_proj_scales"):
        LLMEngine.from_model(str(half), tokenizer=tokenizer(), device="cpu", max_model_len=512)
    config = json.loads((half / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq"}
    (half / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="'gptq' are not supported"):
        LLMEngine.from_model(str(half), tokenizer=tokenizer(), device="cpu", max_model_len=512)


def convert_moe_packed_tensors_ref(blocks, scales):
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    return convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
