"""Tiny random-weight models, engines over them, and HF transformers' greedy generate as the oracle."""

from __future__ import annotations

import functools
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from guided.builtin.tiny_model import TinyModelSpec, tiny_model_dir  # noqa: E402
from guided.builtin.tokenizers import load_tokenizer  # noqa: E402
from guided.engine.llm_engine import LLMEngine  # noqa: E402
from guided.engine.sampling_params import SamplingParams  # noqa: E402

SPECS = {
    "llama": TinyModelSpec(arch="llama"),
    "qwen2": TinyModelSpec(arch="qwen2"),
    "qwen3": TinyModelSpec(arch="qwen3"),
    "llama-tied": TinyModelSpec(arch="llama", tie_word_embeddings=True, num_kv_heads=1, seed=3),
    "phi3": TinyModelSpec(arch="phi3", seed=5),
    "qwen3_moe": TinyModelSpec(arch="qwen3_moe", num_experts=4, num_layers=3, seed=9),
    "mixtral": TinyModelSpec(arch="mixtral", num_experts=4, seed=11),
    # Gemma 3: local layers (a 6-key window) and each third global, four norms a layer, tied embeddings;
    # "gemma3-full" has the same weights and a window longer than any prompt; "-softcap" caps the logits
    "gemma3": TinyModelSpec(arch="gemma3_text", num_layers=3, sliding_window=6, tie_word_embeddings=True, seed=13),
    "gemma3-full": TinyModelSpec(arch="gemma3_text", num_layers=3, sliding_window=4096, tie_word_embeddings=True,
                                 seed=13),  # fmt: skip
    "gemma3-softcap": TinyModelSpec(arch="gemma3_text", num_layers=3, sliding_window=6, final_logit_softcapping=3.0,
                                    seed=15),  # fmt: skip
    # Qwen2 with use_sliding_window: layer 0 global, layer 1 over the last 5 keys
    "qwen2-window": TinyModelSpec(arch="qwen2", sliding_window=5, seed=17),
    # gpt-oss: sinks, biases, YaRN, a window of 5 on even layers, 4 experts with a clamped SwiGLU
    "gpt_oss": TinyModelSpec(arch="gpt_oss", num_experts=4, sliding_window=5, seed=19),
    # Phi-4-mini's shape: a partial rotary embedding under LongRoPE, whose long factors take over past
    # 32 tokens here (the prompts below cross it while they decode)
    "phi3-longrope": TinyModelSpec(arch="phi3", seed=7, max_position_embeddings=512, rope=(
        ("rope_type", "longrope"), ("original_max_position_embeddings", 32), ("partial_rotary_factor", 0.5),
        ("short_factor", (1.0, 1.5, 2.0, 3.0)), ("long_factor", (2.0, 4.0, 8.0, 16.0)))),
}

PROMPTS = [
    "import os",
    "def main(argv):\n    parser = argparse.ArgumentParser()\n",
    "class Point:\n    x: int\n    y: int\n\n    def norm(self):",
    "x",
    "for i, line in enumerate(open(path)):\n    if not line.strip():\n        continue\n"
    "    fields = line.split(',')\n    total += float(fields[2])\n",
]


@functools.cache
def model_dir(name: str) -> str:
    return str(tiny_model_dir("builtin", SPECS[name]))


@functools.cache
def tokenizer():
    return load_tokenizer("builtin")


@functools.cache
def hf_model(name: str):
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir(name), dtype=torch.float32)
    return model.eval()


@functools.cache
def _hf_greedy(name: str, prompt: tuple[int, ...], max_new_tokens: int, repetition_penalty: float) -> tuple:
    model = hf_model(name)
    vocab = model.config.vocab_size
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            repetition_penalty=repetition_penalty,
            suppress_tokens=list(range(len(tokenizer()), vocab)),  # the engine never samples padded ids
            eos_token_id=None,
            pad_token_id=0,
        )
    return tuple(out[0, len(prompt) :].tolist())


def hf_greedy(name: str, prompt_ids: list[int], max_new_tokens: int, repetition_penalty: float = 1.0) -> list[int]:
    """HF transformers' greedy ``generate`` of one prompt, never stopping at EOS (the oracle)."""
    return list(_hf_greedy(name, tuple(prompt_ids), max_new_tokens, repetition_penalty))


def moe_checkpoint(out, stacked: bool = False, drop: str | None = None) -> str:
    """The tiny qwen3_moe checkpoint copied to ``out``: its experts stacked as transformers' own
    modules name them ([experts, 2 x width, hidden] and [experts, hidden, width]), or with the
    weights whose names end with ``drop`` left out."""
    import shutil

    from safetensors.torch import load_file, save_file

    source = model_dir("qwen3_moe")
    per_expert = load_file(f"{source}/model.safetensors")
    tensors = {k: v for k, v in per_expert.items() if drop is None or not k.endswith(drop)}
    if stacked:
        tensors = {k: v for k, v in per_expert.items() if ".experts." not in k}
        for p in {k.split(".experts.")[0] for k in per_expert if ".experts." in k}:
            n = sum(1 for k in per_expert if k.startswith(f"{p}.experts.") and k.endswith("down_proj.weight"))
            tensors[f"{p}.experts.gate_up_proj"] = torch.stack([torch.cat(
                [per_expert[f"{p}.experts.{e}.gate_proj.weight"], per_expert[f"{p}.experts.{e}.up_proj.weight"]])
                for e in range(n)])  # fmt: skip
            tensors[f"{p}.experts.down_proj"] = torch.stack([per_expert[f"{p}.experts.{e}.down_proj.weight"]
                                                             for e in range(n)])  # fmt: skip
    shutil.copytree(source, out)
    save_file(tensors, str(out / "model.safetensors"))
    return str(out)


def gemma3_multimodal_checkpoint(out) -> str:
    """A multimodal Gemma 3 checkpoint (``gemma3``: the "gemma3" spec's text config beside a one-layer
    vision tower), written by transformers' Gemma3ForConditionalGeneration with random weights."""
    import shutil

    source = model_dir("gemma3")
    config = transformers.Gemma3Config(
        text_config=transformers.AutoConfig.from_pretrained(source).to_dict(), mm_tokens_per_image=4,
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 28, "patch_size": 14})  # fmt: skip
    torch.manual_seed(21)
    model = transformers.Gemma3ForConditionalGeneration(config)
    for p in model.parameters():
        p.data.normal_(0, 0.5)
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("*.safetensors", "config.json"))
    model.save_pretrained(out)
    return str(out)


def make_engine(name: str = "llama", **config) -> LLMEngine:
    config.setdefault("device", "cpu")  # the CPU tier: fp32, exact parity with HF on CPU
    config.setdefault("block_size", 4)
    config.setdefault("max_model_len", 512)
    return LLMEngine.from_model(model_dir(name), tokenizer=tokenizer(), **config)


def greedy(max_tokens: int = 12, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)


def run_all(engine: LLMEngine) -> dict[str, object]:
    """Step until done; the final output of each request by id."""
    final = {}
    while engine.has_unfinished():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
    return final


def check_parity(engine: LLMEngine, name: str, prompts: list[str], max_tokens: int = 12) -> dict:
    """Greedy outputs of ``prompts`` on ``engine`` equal HF's for model ``name``; the outputs by id."""
    ids = {str(i): engine.tokenizer.encode(p) for i, p in enumerate(prompts)}
    for rid, p in ids.items():
        engine.add_request(p, greedy(max_tokens), request_id=rid)
    outputs = run_all(engine)
    for rid, p in ids.items():
        assert outputs[rid].token_ids == hf_greedy(name, p, max_tokens), f"prompt {rid}"
        assert outputs[rid].finish_reason == "length"
    return outputs


class SlowMatcher:
    """A real matcher whose masks take ``delay`` seconds each (and are never reported as cached)."""

    def __init__(self, inner, delay: float):
        self.inner = inner
        self.delay = delay

    def fill_bitmask(self, bitmask, row=0):
        time.sleep(self.delay)
        return self.inner.fill_bitmask(bitmask, row)

    def __getattr__(self, name):
        if name in ("has_cached_mask", "fill_bitmask_if_cached"):
            raise AttributeError(name)
        return getattr(self.inner, name)


class SlowGrammar:
    """A compiled grammar whose matchers are ``SlowMatcher``s."""

    def __init__(self, compiled, delay: float):
        self.compiled = compiled
        self.delay = delay

    def matcher(self):
        return SlowMatcher(self.compiled.matcher(), self.delay)
