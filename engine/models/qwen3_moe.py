"""Mixtures of experts: Qwen3-MoE (config ``model_type`` "qwen3_moe", e.g. Qwen3-30B-A3B: Qwen3's
attention) and Mixtral ("mixtral": Llama's), with a mixture of experts in place of the MLP of their
sparse layers.

Routing as transformers does it: router logits, a float32 softmax, the ``num_experts_per_tok`` largest,
renormalised when ``norm_topk_prob`` (always for Mixtral, whose weights stay float32 as in transformers).
Experts run grouped: one pass per expert over the tokens routed
to it (no loop over tokens), their outputs weighted and summed into the tokens' rows in the same order
as transformers, so fp32 outputs match its greedy generate. A layer is sparse unless listed in
``mlp_only_layers`` or off the ``decoder_sparse_step`` beat. The experts' weights are kept stacked
(``gate_up_proj`` [experts, 2 x width, hidden], ``down_proj`` [experts, hidden, width]); checkpoints
store them per expert (``mlp.experts.E.gate_proj.weight``, ...), or stacked as transformers' own
modules name them. Under tensor parallelism every expert's width is split across the ranks (the
router is replicated) and the block's output is summed over them. On CUDA the experts run as two
Triton grouped GEMMs (``kernels/grouped_gemm.py``: every expert's rows in one launch); on CPU as torch
matmuls per expert (the reference, and transformers' summation order). No CUDA graphs: the routing
decides which experts run, so steps run eagerly.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from guided.kernels.grouped_gemm import grouped_gemm, moe_align, runs_kernel

from .layers import DecoderLayer, ModelArgs, copy_weight
from .llama import LlamaForCausalLM

_EXPERT = re.compile(r"^(layers\.\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")
_ROUTER = re.compile(r"^(layers\.\d+)\.block_sparse_moe\.gate\.weight$")


class Experts(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        # each expert's width is split across tensor-parallel ranks (this rank's share here)
        e, width, hidden = args.num_experts, args.local_moe_intermediate, args.hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * width, hidden))
        self.down_proj = nn.Parameter(torch.empty(e, hidden, width))


class ExpertBlock(nn.Module):
    """A mixture of experts' forward: ``route`` each token, run its experts (``grouped`` on the Triton
    kernel, else ``looped``), sum over the tensor-parallel ranks. Families say how in those three."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.tp = args.tp
        self.num_experts, self.top_k = args.num_experts, args.num_experts_per_tok

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, hidden]
        weights, chosen = self.route(x)
        out = self.grouped(x, weights, chosen) if runs_kernel(x) else self.looped(x, weights, chosen)
        return self.tp.all_reduce(out)


class SparseMoeBlock(ExpertBlock):
    def __init__(self, args: ModelArgs):
        super().__init__(args)
        self.norm_topk_prob = args.norm_topk_prob
        self.float_weights = args.model_type == "mixtral"  # transformers' Mixtral keeps them float32
        self.gate = nn.Linear(args.hidden_size, args.num_experts, bias=False)
        self.experts = Experts(args)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights, experts) ``[num_tokens, top_k]`` of each token, as transformers routes."""
        logits = self.gate(x)
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [num_tokens, top_k]
        if self.norm_topk_prob:
            weights /= weights.sum(dim=-1, keepdim=True)
        if not self.float_weights:
            weights = weights.to(logits.dtype)
        return weights, chosen

    def looped(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """Torch matmuls, one pass per expert over its tokens, summed in transformers' order (CPU)."""
        out = torch.zeros_like(x)
        routed = F.one_hot(chosen, num_classes=self.num_experts).permute(2, 1, 0)  # [experts, top_k, tokens]
        for e in torch.greater(routed.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
            slot, token = torch.where(routed[e])
            gate, up = F.linear(x[token], self.experts.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.experts.down_proj[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out

    def grouped(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The Triton grouped GEMM (CUDA): the routed rows sorted by expert, gate/up gathered from the
        tokens in one launch, down in a second, weighted and summed into the tokens' rows."""
        order, rows, counts = moe_align(chosen, self.num_experts)
        gate, up = grouped_gemm(x, self.experts.gate_up_proj, counts, rows).chunk(2, dim=-1)
        y = grouped_gemm((F.silu(gate) * up).contiguous(), self.experts.down_proj, counts)
        y = y * weights.flatten()[order, None]
        return torch.zeros_like(x).index_add_(0, rows, y.to(x.dtype))


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3 layers whose MLP is a ``SparseMoeBlock`` where the config makes them sparse."""

    GRAPH_SAFE = False  # which experts run depends on the tokens: no CUDA graphs
    # a published checkpoint's per-expert weight names: (gate, up, down)
    EXPERT_WEIGHTS = ("gate_proj", "up_proj", "down_proj")
    EXPERTS_AT = "mlp"  # the checkpoint's module of the experts and the router

    def make_layer(self, args: ModelArgs, index: int) -> DecoderLayer:
        sparse = (args.num_experts > 0 and index not in args.mlp_only_layers
                  and (index + 1) % args.decoder_sparse_step == 0)  # fmt: skip
        return DecoderLayer(args, SparseMoeBlock(args) if sparse else None, window=args.window(index))

    def load_weight(self, name: str, tensor: torch.Tensor) -> bool:
        """Per-expert checkpoint weights into their expert's slice; the rest as the dense model's."""
        name = name.removeprefix("model.")
        router = _ROUTER.match(name)
        if router is not None:
            return super().load_weight(f"{router.group(1)}.mlp.gate.weight", tensor)
        tp = self.args.tp
        if name.endswith(".mlp.experts.gate_up_proj") and tp.size > 1:  # stacked: this rank's gate and up
            tensor = torch.cat([tp.shard(half, 1) for half in tensor.chunk(2, dim=1)], dim=1)
        elif name.endswith(".mlp.experts.down_proj") and tp.size > 1:
            tensor = tp.shard(tensor, 2)
        m = _EXPERT.match(name)
        if m is None or m.group(3) not in self.EXPERT_WEIGHTS:
            return super().load_weight(name, tensor)
        prefix, expert, kind = f"{m.group(1)}.mlp.experts", int(m.group(2)), self.EXPERT_WEIGHTS.index(m.group(3))
        if kind == 2:
            return copy_weight(self.get_parameter(f"{prefix}.down_proj").data[expert], tp.shard(tensor, 1), name)
        width = self.args.local_moe_intermediate
        fused = self.get_parameter(f"{prefix}.gate_up_proj").data[expert]
        return copy_weight(fused.narrow(0, kind * width, width), tp.shard(tensor, 0), name)

    def missing_weights(self, loaded: set[str]) -> list[str]:
        """As ``LlamaForCausalLM``'s, the router and the stacked experts counted present under the
        checkpoint's names: stacked, or expert by expert."""
        expected = set(super().missing_weights(loaded))
        gate, up, down = self.EXPERT_WEIGHTS
        for name, _ in self.named_parameters():
            if ".mlp.experts." in name and name in expected:
                expected.discard(name)
                layer = name.split(".mlp.")[0]
                parts = (down,) if name.endswith(".down_proj") else (gate, up)
                expected.update(f"{layer}.{self.EXPERTS_AT}.experts.{e}.{p}.weight"
                                for e in range(self.args.num_experts) for p in parts)  # fmt: skip
            elif name.endswith(".mlp.gate.weight") and self.EXPERTS_AT != "mlp" and name in expected:
                layer = name.split(".mlp.")[0]
                expected.discard(name)
                expected.add(f"{layer}.{self.EXPERTS_AT}.gate.weight")
        return sorted(expected - loaded)


class MixtralForCausalLM(Qwen3MoeForCausalLM):
    """Mixtral: Llama's attention, every layer sparse; checkpoints name the experts ``w1`` (gate),
    ``w3`` (up) and ``w2`` (down) under ``block_sparse_moe``."""

    EXPERT_WEIGHTS = ("w1", "w3", "w2")
    EXPERTS_AT = "block_sparse_moe"
