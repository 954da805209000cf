"""BlockManager and Scheduler on their own: pure Python, no model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from guided.engine.block_manager import BlockManager
from guided.engine.sampling_params import SamplingParams
from guided.engine.scheduler import Scheduler
from guided.engine.sequence import Sequence, SequenceStatus


def seq(tokens, max_tokens=4):
    return Sequence(list(tokens), SamplingParams(max_tokens=max_tokens))


def compute(bm, s, n=None):
    """Pretend a step computed ``n`` more tokens of ``s`` (all of them by default)."""
    n = s.num_uncomputed_tokens if n is None else n
    bm.append(s, n)
    s.num_computed_tokens += n
    bm.cache_computed_blocks(s)


def test_allocate_append_free_counts():
    bm = BlockManager(8, 4)
    s = seq(range(10))
    assert bm.can_allocate(s, 10)
    bm.allocate(s, 10)
    assert len(s.block_table) == 3 and bm.num_free_blocks == 5
    s.num_computed_tokens = 10
    s.append_token(99)
    s.append_token(98)
    assert bm.can_append(s, 2)
    bm.append(s, 2)
    assert len(s.block_table) == 3  # 12 tokens still fit in 3 blocks
    bm.free(s)
    assert bm.num_free_blocks == 8 and not s.block_table


def test_prefix_hit_shares_blocks_and_keeps_one_token_to_compute():
    bm = BlockManager(16, 4)
    a = seq(range(12))
    bm.allocate(a, 12)
    compute(bm, a)
    b = seq(list(range(8)) + [50, 51, 52])
    assert bm.num_cached_tokens(b) == 8
    bm.allocate(b, 11)
    assert b.block_table[:2] == a.block_table[:2] and b.num_computed_tokens == 8
    assert bm.blocks[a.block_table[0]].ref_count == 2
    same = seq(range(12))  # fully cached: the last block is recomputed so there are logits to sample
    assert bm.num_cached_tokens(same) == 8


def test_freed_cached_blocks_are_revived_then_evicted_lru():
    bm = BlockManager(4, 2)
    a = seq([1, 2, 3, 4, 5])
    bm.allocate(a, 5)
    compute(bm, a)
    bm.free(a)
    assert bm.num_free_blocks == 4
    b = seq([1, 2, 3, 4, 9])
    assert bm.num_cached_tokens(b) == 4 and bm.can_allocate(b, 5)
    bm.allocate(b, 5)
    assert bm.num_free_blocks == 1
    bm.free(b)
    c = seq([7, 7, 7, 7, 7, 7, 7, 7])  # needs every block: the cached ones are evicted
    bm.allocate(c, 8)
    assert bm.num_free_blocks == 0 and not bm.hash_to_block_id
    bm.free(c)
    assert bm.num_cached_tokens(seq([1, 2, 3, 4, 5])) == 0


def test_hash_collision_is_not_a_hit():
    bm = BlockManager(8, 2)
    a = seq([1, 2, 3])
    bm.allocate(a, 3)
    compute(bm, a)
    bm.blocks[a.block_table[0]].token_ids = (9, 9)  # as if another prefix had the same hash
    assert bm.num_cached_tokens(seq([1, 2, 3])) == 0


def config(**kw):
    base = dict(max_num_seqs=8, max_num_batched_tokens=16, enable_chunked_prefill=True, hf_config={})
    return SimpleNamespace(**{**base, **kw})


def test_scheduler_respects_budget_and_fcfs():
    bm = BlockManager(64, 4, enable_prefix_caching=False)
    sched = Scheduler(config(), bm)
    seqs = [seq(range(10)), seq(range(100, 110)), seq(range(200, 203))]
    for s in seqs:
        sched.add(s)
    batch = sched.schedule()
    assert batch.seqs == seqs[:2] and batch.num_tokens == [10, 6]  # the second is chunked
    for s, n in zip(batch.seqs, batch.num_tokens, strict=True):
        s.num_computed_tokens += n
    seqs[0].append_token(5)
    batch = sched.schedule()
    assert batch.seqs == seqs and batch.num_tokens == [1, 4, 3]


def test_scheduler_preempts_newest_and_requeues_it_first():
    bm = BlockManager(4, 4, enable_prefix_caching=False)
    sched = Scheduler(config(), bm)
    a, b = seq(range(8)), seq(range(50, 58))
    sched.add(a)
    sched.add(b)
    batch = sched.schedule()
    assert batch.seqs == [a, b] and bm.num_free_blocks == 0
    for s in (a, b):
        s.num_computed_tokens = 8
        s.append_token(1)
    batch = sched.schedule()  # a needs a third block: b is preempted, keeping its output
    assert batch.seqs == [a] and batch.preempted == [b]
    assert b.status is SequenceStatus.WAITING and b.num_computed_tokens == 0 and b.num_tokens == 9
    assert sched.waiting[0] is b and sched.num_preemptions == 1
    sched.abort([a, b])
    assert bm.num_free_blocks == 4 and not sched.has_unfinished()


@pytest.mark.parametrize("budget", [1, 3, 7])
def test_scheduler_without_chunking_waits_for_room(budget):
    bm = BlockManager(64, 4)
    sched = Scheduler(config(max_num_batched_tokens=budget, enable_chunked_prefill=False), bm)
    sched.add(seq(range(8)))
    assert len(sched.schedule()) == 0

