"""Incremental detokenization: the deltas add up to the full decode."""

from __future__ import annotations

import random

import pytest
from engine_testlib import tokenizer

from guided.engine.detokenizer import IncrementalDetokenizer


@pytest.mark.parametrize("seed", range(5))
def test_deltas_add_up_to_full_decode(seed):
    tok = tokenizer()
    rng = random.Random(seed)
    text = "héllo wörld — ünïcödé 😀 " + "".join(rng.choice("abc xyz\n😀é€") for _ in range(60))
    ids = tok.encode(text)
    prompt, output = ids[:5], ids[5:]
    detok = IncrementalDetokenizer(tok, prompt)
    pieces = [detok.add([t]) for t in output] + [detok.flush()]
    assert "".join(pieces) == detok.text == tok.decode(output)
    assert all("\ufffd" not in p for p in pieces[:-1])


def test_random_ids_flush_everything():
    tok = tokenizer()
    rng = random.Random(0)
    ids = [rng.randrange(len(tok) - 10) for _ in range(50)]
    detok = IncrementalDetokenizer(tok, [1, 2, 3])
    text = "".join(detok.add([t]) for t in ids) + detok.flush()
    assert text == tok.decode(ids, skip_special_tokens=True)
