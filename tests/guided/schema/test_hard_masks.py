"""Masks of hard MaskBench schemas whose emptiness searches once ran past the mask bound, replayed
the way ``guided bench maskbench`` does (engine defaults, the 5 s mask bound included): every test
instance gets its right answer."""

from __future__ import annotations

from shared_data import shared_path

from guided.bench.engines import make_engine
from guided.bench.maskbench import run_file


def test_oneof_exclusions_are_decided_within_the_mask_bound(tokenizer_llama3):
    """Github_hard---o21819: a meter is one of eleven kinds (``oneOf`` over ``allOf`` branches), so
    a mask inside its channel objects decided intersections of the document's rest with the
    exclusions. Ordered by min_len alone, the search for a witness wandered through additional
    properties and hit the bound (a LimitError); the second try of ``Emptiness._search`` (the parts'
    bounds summed plus the depth) found one in 3-4 s here, past the bound on a slower machine. The
    kinds are told apart by an optional ``protocol`` (``facts.discriminator``), so the oneOf is now a
    union without exclusions and its slowest mask takes tens of milliseconds."""
    path = shared_path("data", "maskbench-hard", "Github_hard---o21819.json")
    engine = make_engine("guided", tokenizer_llama3, key_order="any")
    r = run_file(engine, tokenizer_llama3, path)
    assert r["status"] == "ok", r
    assert r["tests"] == 4 and r["passed"], {k: v for k, v in r.items() if k != "tbm_s"}
