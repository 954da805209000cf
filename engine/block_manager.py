"""BlockManager: fixed-size KV blocks with reference counts and a prefix cache.

Pure Python, never touches tensors. A full block whose KV has been computed is registered under the
hash chain of its tokens (hash of the previous block's hash and this block's token ids), so a later
sequence with the same prefix reuses it. Freed blocks keep their hash and sit in an LRU free list:
they are reused by a prefix hit, or evicted (least recently freed first) when a new block is needed.
"""

from __future__ import annotations

from collections import OrderedDict

from .sequence import Sequence

# the start of the hash chain of a sequence in LongRoPE's long phase (not -2: hash(-1) == hash(-2))
_LONG_ROPE = ("long rope",)


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "token_ids")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.hash: int | None = None
        self.token_ids: tuple[int, ...] = ()  # checked on a hit, so a hash collision is never a hit


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.hash_to_block_id: dict[int, int] = {}
        self.num_hit_tokens = 0  # statistics: prompt tokens served from the cache
        self.num_queried_tokens = 0

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # ------------------------------------------------------------------ prefix cache
    def num_cached_tokens(self, seq: Sequence) -> int:
        """Tokens at the start of ``seq`` whose KV is in the cache (always leaves one to compute)."""
        return len(self._cached_prefix(seq)) * self.block_size

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        if not self.enable_prefix_caching:
            return []
        hashes = self._block_hashes(seq)
        # the last token must be computed to get logits, so a fully cached sequence drops its last block
        usable = min(len(hashes), (seq.num_tokens - 1) // self.block_size)
        hits = []
        for i in range(usable):
            block_id = self.hash_to_block_id.get(hashes[i])
            if block_id is None or self.blocks[block_id].token_ids != self._block_tokens(seq, i):
                break
            hits.append(block_id)
        return hits

    def _block_hashes(self, seq: Sequence) -> list[int]:
        hashes = seq.block_hashes
        for i in range(len(hashes), seq.num_tokens // self.block_size):
            prev = hashes[i - 1] if i else (_LONG_ROPE if seq.rope_long else -1)  # LongRoPE's phases share no KV
            hashes.append(hash((prev, self._block_tokens(seq, i))))
        return hashes

    def _block_tokens(self, seq: Sequence, i: int) -> tuple[int, ...]:
        return tuple(seq.token_ids[i * self.block_size : (i + 1) * self.block_size])

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Register the full blocks of ``seq`` whose KV is now computed."""
        if not self.enable_prefix_caching:
            return
        full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        if full <= seq.num_hashed_blocks:
            return
        hashes = self._block_hashes(seq)
        for i in range(seq.num_hashed_blocks, full):
            block = self.blocks[seq.block_table[i]]
            if block.hash is None and hashes[i] not in self.hash_to_block_id:
                block.hash = hashes[i]
                block.token_ids = self._block_tokens(seq, i)
                self.hash_to_block_id[block.hash] = block.block_id
        seq.num_hashed_blocks = full

    # ------------------------------------------------------------------ allocate / append / free
    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Whether a new sequence can get blocks for its first ``num_tokens`` tokens (cached ones included)."""
        hits = self._cached_prefix(seq)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return self.blocks_needed(num_tokens) - len(hits) + revived <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        """Give a new sequence its cached prefix blocks and fresh blocks up to ``num_tokens`` tokens."""
        assert not seq.block_table
        hits = self._cached_prefix(seq)
        for block_id in hits:
            self._ref(block_id)
        seq.block_table = hits
        seq.num_hashed_blocks = len(hits)
        seq.num_cached_tokens = seq.num_computed_tokens = len(hits) * self.block_size
        self.num_hit_tokens += seq.num_cached_tokens
        self.num_queried_tokens += seq.num_tokens
        self.append(seq, num_tokens - seq.num_computed_tokens)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Whether ``seq`` can grow to hold ``num_new_tokens`` more computed tokens."""
        need = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        return need <= self.num_free_blocks

    def append(self, seq: Sequence, num_new_tokens: int) -> None:
        """Add the blocks ``seq`` needs for ``num_new_tokens`` more computed tokens."""
        need = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        for _ in range(need):
            seq.block_table.append(self._take_free_block())

    def free(self, seq: Sequence) -> None:
        """Release every block of ``seq``; the tail first, so the LRU keeps shared prefixes longest."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
        seq.block_table = []
        seq.num_hashed_blocks = 0

    def _ref(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free_block_ids[block_id]
        block.ref_count += 1

    def _take_free_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)  # least recently freed
        block = self.blocks[block_id]
        if block.hash is not None:  # evict it from the prefix cache
            if self.hash_to_block_id.get(block.hash) == block_id:
                del self.hash_to_block_id[block.hash]
            block.hash, block.token_ids = None, ()
        block.ref_count = 1
        return block_id

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (blocks in use keep their contents)."""
        for block in self.blocks:
            block.hash, block.token_ids = None, ()
        self.hash_to_block_id.clear()
