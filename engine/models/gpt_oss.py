"""gpt-oss (config ``model_type`` "gpt_oss": gpt-oss-20b and -120b).

What differs from Llama, all read from config.json:

* attention with biases on q/k/v and o, and **sinks**: a learned logit per head that joins the
  softmax as a key with no value (``paged_attention(sinks=)``); every other layer attends to the
  last ``sliding_window`` keys (``layer_types``);
* YaRN rotary scaling (``layers._yarn_inv_freq``);
* a mixture of experts in every layer: a router with a bias, whose ``num_experts_per_tok`` largest
  logits are softmaxed into the weights (no softmax over all experts first), and experts with
  biases whose gate/up output interleaves gate and up columns, through a clamped SwiGLU:
  ``(clamp(up, -L, L) + 1) * g * sigmoid(alpha g)`` with ``g = min(gate, L)`` (``swiglu_limit`` L,
  alpha 1.702);
* checkpoints store the experts stacked as transformers' ``GptOssExperts`` does (``gate_up_proj``
  [experts, hidden, 2 x width], ``down_proj`` [experts, width, hidden], with ``_bias`` tensors), or
  quantized in MXFP4 as published (``*_blocks``: two 4-bit e2m1 values per byte, 32 to a block;
  ``*_scales``: one power-of-two exponent per block, biased by 127), dequantized at load into the
  model's dtype (``dequantize_mxfp4``).

The experts run as the MoE families' do (``qwen3_moe``): a loop over experts on CPU in
transformers' order, the Triton grouped GEMM on CUDA. Under tensor parallelism the heads (and their
sinks) and each expert's width split across the ranks; the o and down biases are added once (by
rank 0) before the sum.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from guided.errors import ModelLoadError
from guided.kernels.grouped_gemm import grouped_gemm, moe_align

from .layers import DecoderLayer, ModelArgs, add_once, copy_weight, rank_part
from .llama import LlamaForCausalLM
from .qwen3_moe import ExpertBlock

__all__ = ["GptOssForCausalLM", "dequantize_mxfp4"]

# e2m1: the 16 values a 4-bit code stands for (sign bit, two exponent bits, one mantissa bit)
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_STACKED = ("gate_up_proj", "down_proj")


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """MXFP4 -> ``dtype``: ``blocks`` uint8 [..., groups, 16] (low nibble first), ``scales`` uint8
    [..., groups] (exponents biased by 127) -> [..., groups * 32]."""
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8 or blocks.shape[:-1] != scales.shape:
        raise ModelLoadError(f"MXFP4 blocks {tuple(blocks.shape)} {blocks.dtype} and scales {tuple(scales.shape)} "
                             f"{scales.dtype} do not match (uint8 [..., groups, 16] and [..., groups])")  # fmt: skip
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    values = torch.stack([lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]], dim=-1).flatten(-2)
    values = torch.ldexp(values, scales.to(torch.int32).unsqueeze(-1) - 127)
    return values.flatten(-2).to(dtype)


class GptOssExperts(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        e, width, hidden = args.num_experts, args.local_moe_intermediate, args.hidden_size
        # F.linear's layout (rows out): gate_up's rows interleave gate and up, this rank's pairs
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * width, hidden))
        self.gate_up_proj_bias = nn.Parameter(torch.empty(e, 2 * width))
        self.down_proj = nn.Parameter(torch.empty(e, hidden, width))
        self.down_proj_bias = add_once(nn.Parameter(torch.empty(e, hidden)))


class GptOssMoE(ExpertBlock):
    def __init__(self, args: ModelArgs):
        super().__init__(args)
        self.limit, self.alpha = args.swiglu_limit, args.swiglu_alpha
        self.router = nn.Linear(args.hidden_size, args.num_experts, bias=True)
        self.experts = GptOssExperts(args)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, experts) ``[num_tokens, top_k]``: the largest router logits, softmaxed among themselves."""
        top, chosen = torch.topk(self.router(x), self.top_k, dim=-1)
        return F.softmax(top, dim=1, dtype=top.dtype), chosen

    def swiglu(self, y: torch.Tensor) -> torch.Tensor:
        gate, up = y[..., ::2].clamp(max=self.limit), y[..., 1::2].clamp(-self.limit, self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def looped(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """One pass per expert over its tokens, summed in transformers' order (CPU)."""
        ex = self.experts
        out = torch.zeros_like(x)
        routed = F.one_hot(chosen, num_classes=self.num_experts).permute(2, 1, 0)  # [experts, top_k, tokens]
        for e in torch.greater(routed.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
            slot, token = torch.where(routed[e])
            y = self.swiglu(F.linear(x[token], ex.gate_up_proj[e], ex.gate_up_proj_bias[e]))
            y = F.linear(y, ex.down_proj[e], ex.down_proj_bias[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out

    def grouped(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The Triton grouped GEMM (CUDA), each routed row's expert bias added after its GEMM."""
        ex = self.experts
        order, rows, counts = moe_align(chosen, self.num_experts)
        expert = chosen.flatten()[order]  # the expert of each sorted row
        y = self.swiglu(grouped_gemm(x, ex.gate_up_proj, counts, rows) + ex.gate_up_proj_bias[expert])
        y = grouped_gemm(y.contiguous(), ex.down_proj, counts) + ex.down_proj_bias[expert]
        y = y * weights.flatten()[order, None]
        return torch.zeros_like(x).index_add_(0, rows, y.to(x.dtype))


class GptOssForCausalLM(LlamaForCausalLM):
    """gpt-oss over the shared layers: Llama's decoder layer with sinks, biases and ``GptOssMoE``."""

    GRAPH_SAFE = False  # which experts run depends on the tokens: no CUDA graphs
    QUANTIZATIONS = ("mxfp4",)

    def __init__(self, args: ModelArgs):
        super().__init__(args)
        self._packed: dict[str, dict[str, torch.Tensor]] = {}  # MXFP4 halves waiting for their other half

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        if not cfg.get("num_local_experts") or not cfg.get("num_experts_per_tok"):
            raise ModelLoadError("a gpt_oss config needs num_local_experts and num_experts_per_tok")

    def make_layer(self, args: ModelArgs, index: int) -> DecoderLayer:
        return DecoderLayer(args, GptOssMoE(args), window=args.window(index))

    def load_weight(self, name: str, tensor: torch.Tensor) -> bool:
        """The experts' stacked (or MXFP4) tensors into this rank's part of their parameters; the rest
        as the dense model's."""
        name = name.removeprefix("model.")
        prefix, _, last = name.rpartition(".")
        if not prefix.endswith(".mlp.experts"):
            return super().load_weight(name, tensor)
        for kind in ("blocks", "scales"):
            if last.endswith(f"_{kind}") and last.removesuffix(f"_{kind}") in _STACKED:
                stem = f"{prefix}.{last.removesuffix(f'_{kind}')}"
                halves = self._packed.setdefault(stem, {})
                halves[kind] = tensor
                if len(halves) == 2:
                    del self._packed[stem]
                    weight = dequantize_mxfp4(halves["blocks"], halves["scales"], torch.float32)
                    self._copy_stacked(stem, weight, name)  # (MXFP4 is stored rows-out already)
                return True
        if last in _STACKED:  # transformers' layout [experts, in, out]
            return self._copy_stacked(name, tensor.transpose(1, 2), name)
        if last == "gate_up_proj_bias":
            return copy_weight(self.get_parameter(name).data, self.args.tp.shard(tensor, 1), name)
        if last == "down_proj_bias":
            param = self.get_parameter(name)
            return copy_weight(param.data, rank_part(param, tensor, self.args.tp), name)
        return False

    def _copy_stacked(self, stem: str, weight: torch.Tensor, name: str) -> bool:
        """``weight`` [experts, out, in] (the whole checkpoint tensor) into this rank's rows (gate_up:
        contiguous gate/up pairs) or columns (down)."""
        tp = self.args.tp
        part = tp.shard(weight, 1) if stem.endswith("gate_up_proj") else tp.shard(weight, 2)
        return copy_weight(self.get_parameter(stem).data, part.contiguous(), name)

    def missing_weights(self, loaded: set[str]) -> list[str]:
        """As ``LlamaForCausalLM``'s, an expert tensor counted present when stored whole or as both MXFP4
        halves; an MXFP4 half without the other is reported."""
        missing = []
        for name in super().missing_weights(loaded):
            if name.rpartition(".")[2] in _STACKED and {f"{name}_blocks", f"{name}_scales"} <= loaded:
                continue
            missing.append(name)
        return missing + [f"{stem}_{next(iter({'blocks', 'scales'} - set(h)))}" for stem, h in self._packed.items()]
