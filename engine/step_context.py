"""StepContext: the attention metadata of one step, built once by the model runner."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class StepContext:
    slot_mapping: torch.Tensor  # int64 [num_tokens]: block_id * block_size + offset, -1 = padding
    block_tables: torch.Tensor  # int32 [num_seqs, max_blocks]
    cu_seqlens_q: torch.Tensor  # int32 [num_seqs + 1]: query tokens of seq i are cu[i]:cu[i+1]
    seq_lens: torch.Tensor  # int32 [num_seqs]: context length including this step's tokens
    max_seqlen_q: int  # longest query chunk (1 for a pure decode step)
    # LongRoPE: bool [num_tokens], the tokens of sequences in their long phase (None: tokens past the
    # switch length, which is the same for the steps CUDA graphs run: chunks after a computed prompt)
    rope_long: torch.Tensor | None = None
