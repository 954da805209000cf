"""Random-weight HF checkpoints the project builds for itself: test models and the embedded default.

``write_tiny_model`` writes a complete local model directory (config.json, model.safetensors,
generation_config.json, tokenizer files) for a Llama, Qwen2/Qwen3, Phi-3, mixture-of-experts or
Gemma 3 architecture, seeded and
reproducible: the same arguments always give the same bytes. ``default_model_dir()`` is the embedded
default model the CLI uses when no ``--model`` is given: its text is meaningless, but guided generation
keeps it valid under any constraint.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from guided.builtin.tokenizers import cache_dir, cached_dir, tokenizer_dir
from guided.errors import ConfigError

__all__ = ["TinyModelSpec", "write_tiny_model", "tiny_model_dir", "default_model_dir"]

ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
}


@dataclass(frozen=True, slots=True)
class TinyModelSpec:
    """Shape of a random-weight model. ``vocab_multiple`` pads the lm_head past the tokenizer."""

    arch: str = "llama"
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    vocab_multiple: int = 64
    dtype: str = "float32"
    seed: int = 0
    init_std: float = 0.5
    # where the random weights are drawn: "cuda" draws a multi-billion-parameter model in seconds (the
    # values differ from a CPU draw of the same seed, so it is part of the cache key)
    init_device: str = "cpu"
    # rope_parameters entries beyond rope_theta, as (key, value) pairs (lists as tuples), e.g.
    # (("partial_rotary_factor", 0.5),) or a LongRoPE's type, factors and original length
    rope: tuple = ()
    # qwen3_moe: experts per sparse layer (2 chosen per token, each intermediate_size // 2 wide, unless
    # the next two fields say otherwise); the last layer stays dense
    num_experts: int = 0
    experts_per_token: int = 0  # (0: 2)
    moe_intermediate_size: int = 0  # (0: intermediate_size // 2)
    # sliding-window attention (0: none): Gemma 3's local layers (every layer but each third), Qwen2's
    # layers past the first
    sliding_window: int = 0
    final_logit_softcapping: float = 0.0  # Gemma 3 (0: none)

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ConfigError(f"arch must be one of {sorted(ARCHITECTURES)}, got {self.arch!r}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("num_heads must be a multiple of num_kv_heads")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {self.dtype!r}")


def write_tiny_model(out_dir: str | Path, tokenizer: str = "builtin", spec: TinyModelSpec | None = None) -> Path:
    """Write a random-weight HF checkpoint for ``spec`` using the tokenizer ``tokenizer``.

    Parameters
    ----------
    out_dir : path
        Directory to create (overwritten files if it exists).
    tokenizer : str
        Anything ``guided.load_tokenizer`` takes: "builtin", a tokenizer directory, a .model file.
    spec : TinyModelSpec
        Architecture, sizes, dtype and seed.
    """
    import torch
    import transformers
    from safetensors.torch import save_file

    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok_dir = tokenizer_dir(tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json", "chat_template.jinja"):
        if (tok_dir / name).exists():
            shutil.copy(tok_dir / name, out / name)
    tok = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    config = _config(spec, tok)
    with torch.device("meta"):
        model_cls = getattr(transformers, ARCHITECTURES[spec.arch][1])
        shapes = {k: (v.shape, v.dtype) for k, v in model_cls(config).state_dict().items()}
    dtype = getattr(torch, spec.dtype)
    tensors = {}
    device = torch.device(spec.init_device)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    for name in sorted(shapes):
        if spec.tie_word_embeddings and name == "lm_head.weight":
            continue
        shape = shapes[name][0]
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, device=device)
        elif spec.arch == "gpt_oss" and (name.endswith("sinks") or name.endswith("bias")):
            # sinks and biases large enough that leaving one out changes the greedy tokens
            t = torch.randn(shape, generator=gen, device=device) * (1.0 if name.endswith("sinks") else 0.3)
        else:
            fan_in = shape[-1] if len(shape) > 1 else 1
            std = spec.init_std / (fan_in**0.5) if len(shape) > 1 else 0.02
            t = torch.randn(shape, generator=gen, device=device) * std
        tensors[name] = t.to(dtype).cpu().contiguous()
    if spec.arch != "gpt_oss":  # (published gpt-oss checkpoints keep transformers' stacked experts)
        tensors = _experts_one_by_one(tensors, spec.arch)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(str(out))
    eos = [i for i in [tok.eos_token_id] if i is not None]
    gen_cfg = {"bos_token_id": tok.bos_token_id, "eos_token_id": eos[0] if len(eos) == 1 else eos}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=1))
    (out / "guided_tiny_model.json").write_text(json.dumps({"tokenizer": str(tokenizer), **asdict(spec)}))
    return out


def _experts_one_by_one(tensors: dict, arch: str) -> dict:
    """transformers' stacked expert weights (``mlp.experts.gate_up_proj`` [E, 2I, H], ``down_proj``
    [E, H, I]) as published checkpoints store them: ``mlp.experts.E.{gate,up,down}_proj.weight``, or
    Mixtral's ``block_sparse_moe.experts.E.{w1,w3,w2}.weight`` (its router ``block_sparse_moe.gate``)."""
    at, (gate_name, up_name, down_name) = (("block_sparse_moe", ("w1", "w3", "w2")) if arch == "mixtral"
                                           else ("mlp", ("gate_proj", "up_proj", "down_proj")))  # fmt: skip
    out = {}
    for name, t in tensors.items():
        prefix, _, last = name.rpartition(".")
        layer = prefix.rsplit(".mlp", 1)[0]
        if prefix.endswith(".mlp.gate") and arch == "mixtral":
            out[f"{layer}.{at}.gate.weight"] = t
        elif not prefix.endswith("mlp.experts"):
            out[name] = t
        elif last == "gate_up_proj":
            for e, (gate, up) in enumerate(zip(*t.chunk(2, dim=1), strict=True)):
                out[f"{layer}.{at}.experts.{e}.{gate_name}.weight"] = gate.contiguous()
                out[f"{layer}.{at}.experts.{e}.{up_name}.weight"] = up.contiguous()
        else:
            for e in range(t.shape[0]):
                out[f"{layer}.{at}.experts.{e}.{down_name}.weight"] = t[e].contiguous()
    return out


def tiny_model_dir(tokenizer: str = "builtin", spec: TinyModelSpec | None = None) -> Path:
    """A cached tiny model for (tokenizer, spec), built on first use (atomically)."""
    spec = spec or TinyModelSpec()
    fields = asdict(spec)
    if fields["init_device"] == "cpu":  # the keys of models drawn before the field existed stay the same
        del fields["init_device"]
    for name in ("rope", "num_experts", "sliding_window", "final_logit_softcapping", "experts_per_token",
                 "moe_intermediate_size"):  # (as for init_device)  # fmt: skip
        if not fields[name]:
            del fields[name]
    key_src = json.dumps({"tokenizer": str(tokenizer), **fields, "v": 2}, sort_keys=True)
    key = f"{spec.arch}-{hashlib.sha256(key_src.encode()).hexdigest()[:12]}"
    return cached_dir(cache_dir() / "models" / key, lambda out: write_tiny_model(out, tokenizer, spec),
                      ("model.safetensors",))  # fmt: skip


# The embedded default: small enough to run anywhere on a CPU, big enough to look like a model.
DEFAULT_SPEC = TinyModelSpec(
    arch="llama", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32, intermediate_size=256
)


def default_model_dir() -> Path:
    """The embedded default model: random weights on the builtin tokenizer (meaningless text)."""
    return tiny_model_dir("builtin", DEFAULT_SPEC)


def _config(spec: TinyModelSpec, tok):
    import transformers

    # Always padded past the tokenizer (as real checkpoints often are), so the padded-lm_head path is
    # exercised by every test that uses a tiny model.
    n = len(tok) + 1
    vocab_size = -(-n // spec.vocab_multiple) * spec.vocab_multiple
    cls = getattr(transformers, ARCHITECTURES[spec.arch][0])
    kwargs = dict(
        architectures=[ARCHITECTURES[spec.arch][1]],
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        rms_norm_eps=1e-6,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype=spec.dtype,
    )
    if spec.arch == "llama":
        kwargs["rope_theta"] = 500000.0
    elif spec.arch == "qwen3_moe":
        kwargs.update(num_experts=spec.num_experts, num_experts_per_tok=spec.experts_per_token or 2, norm_topk_prob=True,
                      moe_intermediate_size=spec.moe_intermediate_size or spec.intermediate_size // 2, decoder_sparse_step=1,
                      mlp_only_layers=[spec.num_layers - 1], use_sliding_window=False)  # fmt: skip
    elif spec.arch == "mixtral":
        kwargs.update(num_local_experts=spec.num_experts, num_experts_per_tok=spec.experts_per_token or 2,
                      sliding_window=None)  # fmt: skip
    elif spec.arch == "phi3":
        rope = {k: list(v) if isinstance(v, tuple) else v for k, v in spec.rope}
        kwargs["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "default", **rope}
        if "original_max_position_embeddings" in rope:
            kwargs["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
    elif spec.arch == "gemma3_text":
        kwargs.update(
            sliding_window=spec.sliding_window or 4096, query_pre_attn_scalar=spec.head_dim // 2,
            # every sixth layer global as published (every third in models of fewer than six layers); the
            # scalar off head_dim so that the attention scale it sets is exercised
            layer_types=["full_attention" if (i + 1) % (6 if spec.num_layers >= 6 else 3) == 0 else "sliding_attention"
                         for i in range(spec.num_layers)],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
            final_logit_softcapping=spec.final_logit_softcapping or None, hidden_activation="gelu_pytorch_tanh",
        )  # fmt: skip
    elif spec.arch == "gpt_oss":
        # YaRN past a short original context, every other layer windowed, a SwiGLU limit the activations
        # reach (7.0 as published would rarely clamp at these sizes)
        kwargs.update(
            num_local_experts=spec.num_experts or 4, num_experts_per_tok=spec.experts_per_token or 2,
            sliding_window=spec.sliding_window or 4096, attention_bias=True, swiglu_limit=1.0,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(spec.num_layers)],
            rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64},
        )  # fmt: skip
    elif spec.sliding_window and spec.arch == "qwen2":
        kwargs.update(use_sliding_window=True, sliding_window=spec.sliding_window, max_window_layers=1)
    else:
        kwargs["use_sliding_window"] = False
    return cls(**kwargs)
