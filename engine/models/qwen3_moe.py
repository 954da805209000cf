"""Qwen3-MoE (config ``model_type`` "qwen3_moe", e.g. Qwen3-30B-A3B): Qwen3's attention, and in its
sparse layers a mixture of experts in place of the MLP.

Routing as transformers does it: router logits, a float32 softmax, the ``num_experts_per_tok`` largest,
renormalised when ``norm_topk_prob``. Experts run grouped: one pass per expert over the tokens routed
to it (no loop over tokens), their outputs weighted and summed into the tokens' rows in the same order
as transformers, so fp32 outputs match its greedy generate. A layer is sparse unless listed in
``mlp_only_layers`` or off the ``decoder_sparse_step`` beat. The experts' weights are kept stacked
(``gate_up_proj`` [experts, 2 x width, hidden], ``down_proj`` [experts, hidden, width]); checkpoints
store them per expert (``mlp.experts.E.gate_proj.weight``, ...), or stacked as transformers' own
modules name them. Not yet: a Triton grouped-GEMM kernel (experts run as torch matmuls), and CUDA
graphs (the routing decides which experts run, so steps run eagerly).
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from .llama import DecoderLayer, LlamaForCausalLM, ModelArgs, _copy

_EXPERT = re.compile(r"^(layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


class Experts(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        e, width, hidden = args.num_experts, args.moe_intermediate_size, args.hidden_size
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * width, hidden))
        self.down_proj = nn.Parameter(torch.empty(e, hidden, width))


class SparseMoeBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = args.num_experts, args.num_experts_per_tok, args.norm_topk_prob
        self.gate = nn.Linear(args.hidden_size, args.num_experts, bias=False)
        self.experts = Experts(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, hidden]
        logits = self.gate(x)
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [num_tokens, top_k]
        if self.norm_topk_prob:
            weights /= weights.sum(dim=-1, keepdim=True)
        weights = weights.to(logits.dtype)
        out = torch.zeros_like(x)
        routed = F.one_hot(chosen, num_classes=self.num_experts).permute(2, 1, 0)  # [experts, top_k, tokens]
        for e in torch.greater(routed.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
            slot, token = torch.where(routed[e])
            gate, up = F.linear(x[token], self.experts.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.experts.down_proj[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out


class Qwen3MoeForCausalLM(LlamaForCausalLM):
    """Qwen3 layers whose MLP is a ``SparseMoeBlock`` where the config makes them sparse."""

    GRAPH_SAFE = False  # which experts run depends on the tokens: no CUDA graphs

    def make_layer(self, args: ModelArgs, index: int) -> DecoderLayer:
        sparse = (args.num_experts > 0 and index not in args.mlp_only_layers
                  and (index + 1) % args.decoder_sparse_step == 0)  # fmt: skip
        return DecoderLayer(args, SparseMoeBlock(args) if sparse else None)

    def load_weight(self, name: str, tensor: torch.Tensor) -> bool:
        """Per-expert checkpoint weights into their expert's slice; the rest as Qwen3's."""
        m = _EXPERT.match(name.removeprefix("model."))
        if m is None:
            return super().load_weight(name, tensor)
        prefix, expert, kind = m.group(1), int(m.group(2)), m.group(3)
        if kind == "down":
            return _copy(self.get_parameter(f"{prefix}.down_proj").data[expert], tensor, name)
        width = self.args.moe_intermediate_size
        fused = self.get_parameter(f"{prefix}.gate_up_proj").data[expert]
        return _copy(fused.narrow(0, 0 if kind == "gate" else width, width), tensor, name)

    def missing_weights(self, loaded: set[str]) -> list[str]:
        """As ``LlamaForCausalLM``'s, stacked experts counted present stacked or expert by expert."""
        expected = set(super().missing_weights(loaded))
        for name, _ in self.named_parameters():
            if ".mlp.experts." in name and name in expected:
                expected.discard(name)
                prefix, stacked = name.rsplit(".", 1)
                parts = ("down",) if stacked == "down_proj" else ("gate", "up")
                expected.update(f"{prefix}.{e}.{p}_proj.weight" for e in range(self.args.num_experts) for p in parts)
        return sorted(expected - loaded)
