"""Llama 2/3, Mistral, Qwen2 and Qwen3 in one implementation over the paged KV cache.

Differences are flags read from config.json: Qwen2 has biases on q/k/v, Qwen3 RMS-normalises q and k
per head before the rotary embedding. q/k/v and gate/up are fused into one matmul each; the loader
writes the checkpoint's separate weights into their slices (``load_weight``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..step_context import StepContext
from .layers import (
    Attention,
    DecoderLayer,
    ModelArgs,
    RMSNorm,
    RotaryEmbedding,
    VocabEmbedding,
    copy_weight,
    rank_part,  # fmt: skip
    vocab_rows,
)


class LlamaForCausalLM(nn.Module):
    """Decoder-only transformer; ``forward`` maps packed tokens to hidden states, ``logits`` to the vocabulary."""

    GRAPH_SAFE = True  # the forward pass is the same kernels whatever the data (CUDA graphs can replay it)
    QUANTIZATIONS: tuple[str, ...] = ()  # the config quantization_config quant_method values it loads
    # checkpoint name -> (fused parameter, shard index)
    STACKED = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.embed_tokens = VocabEmbedding(args)
        self.layers = nn.ModuleList([self.make_layer(args, i) for i in range(args.num_layers)])
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = RotaryEmbedding(args)
        # this rank's block of vocabulary rows (all of them without tensor parallelism)
        self.lm_head = nn.Linear(args.hidden_size, self.embed_tokens.weight.shape[0], bias=False)
        vocab_rows(self.lm_head.weight, self.embed_tokens.first)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """A ModelLoadError for a config this implementation would not run exactly (none here)."""

    def checkpoint_name(self, name: str) -> str | None:
        """A checkpoint tensor's name as ``load_weight`` reads it; None to skip the tensor."""
        return name

    def make_layer(self, args: ModelArgs, index: int) -> DecoderLayer:
        """Decoder layer ``index`` (a family whose layers differ says how here)."""
        return DecoderLayer(args, window=args.window(index))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        # input_ids, positions: [num_tokens] -> hidden: [num_tokens, hidden_size]
        x = self.embed_tokens(input_ids)
        long = self.rotary.long_tokens(positions, ctx)  # LongRoPE's phase of each token (None: no LongRoPE)
        for layer in self.layers:
            x = layer(x, positions, self.rotary, ctx, long)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """hidden: [rows, hidden_size] -> float32 [rows, vocab_size] (the checkpoint's lm_head width);
        under tensor parallelism the ranks' blocks gathered on rank 0 (None on the others)."""
        logits = self.args.tp.gather_columns(self.lm_head(hidden).float())
        if logits is not None and logits.shape[-1] != self.args.vocab_size:
            logits = logits[:, : self.args.vocab_size]  # the last block's padding
        return logits

    def attention_layers(self) -> list[Attention]:
        return [layer.self_attn for layer in self.layers]

    def load_weight(self, name: str, tensor: torch.Tensor) -> bool:
        """Copy one checkpoint tensor (this rank's part of it) into its (possibly fused) parameter;
        False if it has no place."""
        name = name.removeprefix("model.")
        if self.args.tie_word_embeddings and name == "lm_head.weight":
            return True  # some tied checkpoints store it anyway
        for part, (fused, shard) in self.STACKED.items():
            if f".{part}." in name:
                param = self.get_parameter(name.replace(part, fused))
                start, size = self._shard_range(fused, shard)
                return copy_weight(param.data.narrow(0, start, size), self.args.tp.shard(tensor, 0), name)
        try:
            param = self.get_parameter(name)
        except AttributeError:
            return False
        return copy_weight(param.data, rank_part(param, tensor, self.args.tp), name)

    def missing_weights(self, loaded: set[str]) -> list[str]:
        """Checkpoint names (without "model.") that ``loaded`` lacks: every parameter's, a fused one's as
        all its shards (q/k/v, gate/up) unless the checkpoint stores it fused (``loaded`` has it)."""
        expected = set()
        for name, _ in self.named_parameters():  # a tied lm_head is not listed (it is embed_tokens)
            parts = [part for part, (fused, _) in self.STACKED.items() if f".{fused}." in name]
            if parts and name not in loaded:
                fused = self.STACKED[parts[0]][0]
                expected.update(name.replace(fused, part) for part in parts)
            else:
                expected.add(name)
        return sorted(expected - loaded)

    def _shard_range(self, fused: str, shard: int) -> tuple[int, int]:
        """(start, size) of one checkpoint weight's rows in this rank's fused parameter."""
        a = self.args
        if fused == "gate_up_proj":
            return shard * a.local_intermediate, a.local_intermediate
        q, kv = a.local_heads * a.head_dim, a.local_kv_heads * a.head_dim
        return [(0, q), (q, kv), (q + kv, kv)][shard]
