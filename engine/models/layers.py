"""The layers every model family shares, over the paged KV cache: the config's arguments
(``ModelArgs``), RMSNorm, the rotary embedding (default, linear, llama3, LongRoPE; partial), attention
(fused q/k/v, optional biases and q/k norms; the Triton kernels on CUDA, the torch references on CPU),
the gated MLP and the decoder layer. A family's file (``llama.py``, ``phi3.py``, ``qwen3_moe.py``)
assembles them and says how its checkpoint's names map onto them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from guided.errors import ModelLoadError
from guided.kernels.attention import paged_attention
from guided.kernels.kv_store import store_kv, store_kv_ref

from ..parallel import SINGLE, TensorParallel
from ..step_context import StepContext
from .cpu_attention import attention_cpu, decode_attention_cpu


@dataclass(slots=True)
class ModelArgs:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    partial_rotary_factor: float = 1.0  # the rotary embedding turns the first head_dim * this of each head
    # mixture of experts (Qwen3-MoE): experts per layer (0: dense), chosen per token, their width, whether
    # the chosen ones' weights are renormalised, every how many layers one is sparse, the dense ones
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    # per layer: its sliding window (the last N keys; None: full attention); () for none anywhere
    windows: tuple[int | None, ...] = ()
    sliding_layers: tuple[bool, ...] = ()  # the layers of type "sliding_attention" (Gemma 3's local rotary)
    attention_scale: float | None = None  # Gemma 3: query_pre_attn_scalar ** -0.5 (None: head_dim ** -0.5)
    hidden_act: str = "silu"  # the gated MLP's activation: silu or gelu_pytorch_tanh
    local_rope_theta: float | None = None  # Gemma 3: the rotary base of the sliding-window layers
    final_logit_softcapping: float | None = None  # Gemma 3: logits = cap * tanh(logits / cap)
    # gpt-oss: attention sinks (a logit per head), a bias on o_proj, the experts' clamped SwiGLU
    attention_sinks: bool = False
    o_bias: bool = False
    swiglu_limit: float = 7.0
    swiglu_alpha: float = 1.702
    tp: TensorParallel = SINGLE  # this process's place in a tensor-parallel group (engine.parallel)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    # this rank's shares (all of it without tensor parallelism); a ConfigError where the size does not divide
    @property
    def local_heads(self) -> int:
        return self.tp.split(self.num_heads, "num_attention_heads")

    @property
    def local_kv_heads(self) -> int:
        return self.tp.split(self.num_kv_heads, "num_key_value_heads")

    @property
    def local_intermediate(self) -> int:
        return self.tp.split(self.intermediate_size, "intermediate_size")

    @property
    def local_moe_intermediate(self) -> int:
        return self.tp.split(self.moe_intermediate_size, "moe_intermediate_size")

    def check_split(self) -> None:
        """A ConfigError unless every size the tensor-parallel split divides is divisible."""
        _ = self.local_heads, self.local_kv_heads, self.local_intermediate
        if self.num_experts:
            _ = self.local_moe_intermediate

    def window(self, layer: int) -> int | None:
        return self.windows[layer] if self.windows else None

    @classmethod
    def from_hf(cls, cfg: dict) -> ModelArgs:
        model_type = cfg.get("model_type", "")
        heads = cfg["num_attention_heads"]
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        local = None
        if "full_attention" in rope or "sliding_attention" in rope:  # per layer type (Gemma 3, transformers 5)
            local = (rope.get("sliding_attention") or {}).get("rope_theta")
            rope = dict(rope.get("full_attention") or {})
        elif model_type == "gemma3_text":  # published configs: global base, local base, scaling of the global
            rope = dict(cfg.get("rope_scaling") or {})
            rope.setdefault("rope_theta", cfg.get("rope_theta", 1_000_000.0))
        if model_type == "gemma3_text":
            local = float(local or cfg.get("rope_local_base_freq") or 10_000.0)
        theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
        kind = rope.get("rope_type", rope.get("type", "default"))
        kind = "longrope" if kind == "su" else kind  # early Phi-3-128k configs name LongRoPE "su", as transformers reads them
        if kind == "longrope":  # Phi-3: where the pre-training length is kept
            rope.setdefault("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        return cls(
            model_type=model_type,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling=None if kind == "default" else {**rope, "rope_type": kind},
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2" or bool(cfg.get("attention_bias", False)),
            qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text"),
            partial_rotary_factor=float(rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))),
            num_experts=int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0),  # (transformers 5 writes the latter)
            num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0),
            moe_intermediate_size=int(cfg.get("moe_intermediate_size")
                                      or (cfg["intermediate_size"] if model_type in ("mixtral", "gpt_oss") else 0)),
            norm_topk_prob=model_type == "mixtral" or bool(cfg.get("norm_topk_prob", False)),
            decoder_sparse_step=int(cfg.get("decoder_sparse_step") or 1),
            mlp_only_layers=tuple(cfg.get("mlp_only_layers") or ()),
            windows=layer_windows(cfg),
            sliding_layers=tuple(t == "sliding_attention" for t in layer_types(cfg)),
            attention_scale=float(cfg["query_pre_attn_scalar"]) ** -0.5 if cfg.get("query_pre_attn_scalar") else None,
            hidden_act=cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu",
            local_rope_theta=local,
            final_logit_softcapping=cfg.get("final_logit_softcapping"),
            attention_sinks=model_type == "gpt_oss",
            o_bias=model_type == "gpt_oss" and bool(cfg.get("attention_bias", False)),
            swiglu_limit=float(cfg.get("swiglu_limit") or 7.0),
            swiglu_alpha=float(cfg.get("swiglu_alpha") or 1.702),
        )


def layer_types(cfg: dict) -> list[str]:
    """Each layer's type as transformers reads the config: its ``layer_types`` where it has them,
    else Gemma 3's pattern (every ``sliding_window_pattern``-th layer "full_attention", the others
    "sliding_attention"), Qwen2/Qwen3's (sliding from ``max_window_layers`` on, when
    ``use_sliding_window``), or every layer sliding when there is a ``sliding_window`` (Mistral,
    Phi-3, Mixtral)."""
    n = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    model_type = cfg.get("model_type", "")
    window = cfg.get("sliding_window") and cfg.get("use_sliding_window") is not False
    if types is None:
        if model_type == "gemma3_text":
            pattern = int(cfg.get("sliding_window_pattern") or 6)
            types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
        elif model_type in ("qwen2", "qwen3"):
            first = int(cfg.get("max_window_layers") or 0)
            types = ["sliding_attention" if window and i >= first else "full_attention" for i in range(n)]
        else:
            types = ["sliding_attention" if window else "full_attention"] * n
    if len(types) != n:
        raise ModelLoadError(f"layer_types has {len(types)} entries for {n} layers")
    return list(types)


def layer_windows(cfg: dict) -> tuple[int | None, ...]:
    """Each layer's sliding window as transformers applies it ("sliding_attention" layers take
    ``sliding_window``); () when no layer has one."""
    window = cfg.get("sliding_window")
    if not window or cfg.get("use_sliding_window") is False:
        return ()
    return tuple(int(window) if t == "sliding_attention" else None for t in layer_types(cfg))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm: the weight is an offset from 1, applied in float32 before the cast back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class RotaryEmbedding(nn.Module):
    """cos/sin tables by position, applied to the first ``rotary_dim`` of each head (all of it unless
    the config's ``partial_rotary_factor`` says less; the rest passes through, as HF's Phi-3 does).

    LongRoPE (Phi-3's ``longrope``) has two tables, of its short and its long factors (both scaled by
    its attention factor). As in HF, a sequence of at most ``switch`` tokens
    (``original_max_position_embeddings``) takes the short one at every position, a longer one the
    long one at every position: the scheduler computes a sequence's whole KV again when it grows
    past the switch (HF drops its cache there), and tells each step's phases (``StepContext``)."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.rotary_dim = args.rotary_dim
        rs = args.rope_scaling
        self.switch = None
        if rs is not None and rs["rope_type"] == "longrope":
            self.switch = int(rs["original_max_position_embeddings"])
            scale = _longrope_attention_factor(args, rs)
            self.register_buffer("cos_sin", _cos_sin(args, _inv_freq(args, "short_factor"), scale), persistent=False)
            self.register_buffer("long_cos_sin", _cos_sin(args, _inv_freq(args, "long_factor"), scale),
                                 persistent=False)  # fmt: skip
        else:
            scale = _yarn_attention_factor(rs) if rs is not None and rs["rope_type"] == "yarn" else 1.0
            self.register_buffer("cos_sin", _cos_sin(args, _inv_freq(args), scale), persistent=False)

    def long_tokens(self, positions: torch.Tensor, ctx: StepContext) -> torch.Tensor | None:
        """bool [num_tokens]: the tokens that take the long table (None without LongRoPE)."""
        if self.switch is None:
            return None
        return ctx.rope_long if ctx.rope_long is not None else positions >= self.switch

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, long: torch.Tensor | None = None):
        # q: [num_tokens, num_heads, head_dim]; k: [num_tokens, num_kv_heads, head_dim]
        cs = self.cos_sin[positions]
        if long is not None:
            cs = torch.where(long[:, None, None], self.long_cos_sin[positions], cs)
        cs = cs.to(q.dtype)
        cos, sin = cs[:, 0].unsqueeze(1), cs[:, 1].unsqueeze(1)
        d = self.rotary_dim
        if d == q.shape[-1]:
            return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        q_rot, k_rot = q[..., :d], k[..., :d]
        return (torch.cat([q_rot * cos + _rotate_half(q_rot) * sin, q[..., d:]], dim=-1),
                torch.cat([k_rot * cos + _rotate_half(k_rot) * sin, k[..., d:]], dim=-1))  # fmt: skip


def _cos_sin(args: ModelArgs, inv_freq: torch.Tensor, scale: float) -> torch.Tensor:
    """[max_positions, 2, rotary_dim] float32 (cast to the activations' dtype at use, as HF does)."""
    t = torch.arange(args.max_position_embeddings, dtype=torch.float32)
    freqs = t[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return torch.stack([emb.cos() * scale, emb.sin() * scale], dim=1)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _inv_freq(args: ModelArgs, longrope_factors: str = "short_factor") -> torch.Tensor:
    dim = args.rotary_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = args.rope_scaling
    if rs is None:
        return inv_freq
    if rs["rope_type"] == "linear":
        return inv_freq / rs["factor"]
    if rs["rope_type"] == "llama3":
        return _llama3_inv_freq(inv_freq, rs)
    if rs["rope_type"] == "longrope":
        factors = torch.tensor(rs[longrope_factors], dtype=torch.float32)
        if factors.shape != (dim // 2,):
            raise ModelLoadError(f"longrope {longrope_factors} has {len(factors)} entries, expected {dim // 2}")
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        return 1.0 / (factors * args.rope_theta**shape)
    if rs["rope_type"] == "yarn":
        return _yarn_inv_freq(args, rs)
    raise ModelLoadError(f"rope type {rs['rope_type']!r} is not supported (supported: default, linear, llama3, "
                         "longrope, yarn)")  # fmt: skip


def _yarn_inv_freq(args: ModelArgs, rs: dict) -> torch.Tensor:
    """YaRN (gpt-oss, Qwen long-context configs): each frequency between its interpolated (divided by
    ``factor``) and its original value by a linear ramp over the dimensions whose wavelength fits
    between ``beta_fast`` and ``beta_slow`` rotations of the original context (floored and ceiled
    unless ``truncate`` is false), as transformers computes it."""
    dim, base, factor = args.rotary_dim, args.rope_theta, float(rs["factor"])
    original = int(rs.get("original_max_position_embeddings") or args.max_position_embeddings)
    beta_fast, beta_slow = float(rs.get("beta_fast") or 32), float(rs.get("beta_slow") or 1)

    def correction(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(beta_fast), correction(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp  # the share of the original frequency
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def _yarn_attention_factor(rs: dict) -> float:
    """YaRN's cos/sin scale: ``attention_factor``, else 0.1 ln(factor) + 1 (with DeepSeek's ``mscale`` /
    ``mscale_all_dim`` ratio when both are set)."""
    if rs.get("attention_factor") is not None:
        return float(rs["attention_factor"])
    factor = float(rs["factor"])

    def mscale(m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if rs.get("mscale") and rs.get("mscale_all_dim"):
        return mscale(float(rs["mscale"])) / mscale(float(rs["mscale_all_dim"]))
    return mscale()


def _longrope_attention_factor(args: ModelArgs, rs: dict) -> float:
    """The cos/sin scale of LongRoPE: the config's ``attention_factor``, else sqrt(1 + ln(f) / ln(L0)) with
    f the extension factor (``factor``, else max_position_embeddings / L0) and L0 the original length."""
    if rs.get("attention_factor") is not None:
        return float(rs["attention_factor"])
    original = int(rs["original_max_position_embeddings"])
    factor = rs.get("factor") or args.max_position_embeddings / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def _llama3_inv_freq(inv_freq: torch.Tensor, rs: dict) -> torch.Tensor:
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) * ~(wavelen > old_len / low)
    return torch.where(medium, smoothed, scaled)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, window: int | None = None, norm: type[RMSNorm] = RMSNorm):
        """``window``: this layer's sliding window (None: full attention); ``norm``: the q/k norms' kind."""
        super().__init__()
        self.window = window
        self.tp = args.tp
        # this rank's heads (all of them without tensor parallelism)
        self.num_heads, self.num_kv_heads, self.head_dim = args.local_heads, args.local_kv_heads, args.head_dim
        self.q_size = self.num_heads * args.head_dim
        self.kv_size = self.num_kv_heads * args.head_dim
        self.scale = args.attention_scale or args.head_dim**-0.5
        self.qkv_proj = split_rows(nn.Linear(args.hidden_size, self.q_size + 2 * self.kv_size, bias=args.qkv_bias))
        self.o_proj = split_columns(nn.Linear(self.q_size, args.hidden_size, bias=args.o_bias))
        if args.o_bias:
            add_once(self.o_proj.bias)
        self.sinks = None
        if args.attention_sinks:  # gpt-oss: this rank's heads' sink logits
            self.sinks = nn.Parameter(torch.empty(self.num_heads))
            self.sinks.tp_dim = 0
        self.qk_norm = args.qk_norm
        if args.qk_norm:
            self.q_norm = norm(args.head_dim, args.rms_norm_eps)
            self.k_norm = norm(args.head_dim, args.rms_norm_eps)
        self.k_cache = self.v_cache = torch.empty(0)  # [num_blocks, block_size, num_kv_heads, head_dim]

    def forward(self, x: torch.Tensor, positions: torch.Tensor, rotary: RotaryEmbedding, ctx: StepContext,
                long: torch.Tensor | None = None):  # fmt: skip
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotary(positions, q, k, long)
        if q.is_cuda:  # the Triton kernels
            store_kv(k, v, self.k_cache, self.v_cache, ctx.slot_mapping)
            out = paged_attention(q, self.k_cache, self.v_cache, ctx.block_tables, ctx.cu_seqlens_q, ctx.seq_lens,
                                  self.scale, ctx.max_seqlen_q, self.window, self._sinks())  # fmt: skip
        else:  # CPU: the torch references (never Triton's interpreter), batched for pure decodes
            store_kv_ref(k, v, self.k_cache, self.v_cache, ctx.slot_mapping)
            out = self._attend_cpu(q, ctx)
        return self.tp.all_reduce(self.o_proj(out.view(-1, self.q_size)))

    def _sinks(self) -> torch.Tensor | None:
        return None if self.sinks is None else self.sinks.float()

    def _attend_cpu(self, q: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if ctx.max_seqlen_q == 1:
            return decode_attention_cpu(q, self.k_cache, self.v_cache, ctx.block_tables, ctx.seq_lens, self.scale,
                                        self.window, self._sinks())  # fmt: skip
        return attention_cpu(q, self.k_cache, self.v_cache, ctx.block_tables, ctx.cu_seqlens_q, ctx.seq_lens,
                             self.scale, self.window, self._sinks())  # fmt: skip


class MLP(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tp = args.tp
        self.intermediate_size = args.local_intermediate
        self.gate_up_proj = split_rows(nn.Linear(args.hidden_size, 2 * self.intermediate_size, bias=False))
        self.down_proj = split_columns(nn.Linear(self.intermediate_size, args.hidden_size, bias=False))
        self.act = activation(args.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.tp.all_reduce(self.down_proj(self.act(gate) * up))


def activation(name: str):
    """The gated MLP's activation by its config name."""
    if name == "silu":
        return F.silu
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return functools.partial(F.gelu, approximate="tanh")
    raise ModelLoadError(f"activation {name!r} is not supported (supported: silu, gelu_pytorch_tanh)")


class VocabEmbedding(nn.Module):
    """The token embedding, split by vocabulary rows under tensor parallelism: a rank looks up the
    ids in its block and adds zeros for the others, and the all-reduce sums the one row each id has."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tp = args.tp
        self.first, rows = args.tp.vocab_rows(args.vocab_size)
        self.weight = vocab_rows(nn.Parameter(torch.empty(rows, args.hidden_size)), self.first)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.first
        inside = (local >= 0) & (local < self.weight.shape[0])
        x = F.embedding(torch.where(inside, local, 0), self.weight) * inside.unsqueeze(-1).to(self.weight.dtype)
        return self.tp.all_reduce(x)


# How a parameter is split across tensor-parallel ranks (read by ``rank_part`` when loading):
# ``tp_dim`` 0 (column-parallel: output rows) or 1 (row-parallel: input columns), or ``tp_rows``
# (first vocabulary row of this rank's block, padded with zero rows past the vocabulary).
def split_rows(linear: nn.Linear) -> nn.Linear:
    linear.weight.tp_dim = 0
    if linear.bias is not None:
        linear.bias.tp_dim = 0
    return linear


def split_columns(linear: nn.Linear) -> nn.Linear:
    linear.weight.tp_dim = 1  # (a bias is added once: ``add_once``)
    return linear


def add_once(param: nn.Parameter) -> nn.Parameter:
    """A bias of a row-parallel output: rank 0 holds it, the others zeros, so the sum adds it once."""
    param.tp_once = True
    return param


def vocab_rows(param: nn.Parameter, first: int) -> nn.Parameter:
    param.tp_rows = first
    return param


def rank_part(param: torch.Tensor, tensor: torch.Tensor, tp: TensorParallel) -> torch.Tensor:
    """This rank's part of the checkpoint ``tensor`` of the whole ``param``."""
    first = getattr(param, "tp_rows", None)
    if first is not None:
        part = tensor[first : first + param.shape[0]]
        if part.shape[0] < param.shape[0]:  # the last block's padding rows (never sampled)
            part = torch.cat([part, part.new_zeros(param.shape[0] - part.shape[0], *part.shape[1:])])
        return part
    if getattr(param, "tp_once", False):
        return tensor if tp.rank == 0 else torch.zeros_like(tensor)
    dim = getattr(param, "tp_dim", None)
    return tensor if dim is None else tp.shard(tensor, dim)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, mlp: nn.Module | None = None, window: int | None = None):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, window)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = mlp if mlp is not None else MLP(args)

    def forward(self, x, positions, rotary, ctx, long=None):
        x = x + self.self_attn(self.input_layernorm(x), positions, rotary, ctx, long)
        return x + self.mlp(self.post_attention_layernorm(x))


def copy_weight(dst: torch.Tensor, src: torch.Tensor, name: str) -> bool:
    """Copy a checkpoint tensor into a parameter (or its slice); a shape mismatch is a clear error."""
    if dst.shape != src.shape:
        raise ModelLoadError(f"weight {name!r} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
    dst.copy_(src)
    return True
