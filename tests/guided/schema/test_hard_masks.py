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


def test_overlapping_kinds_of_a_oneof_take_their_members_in_any_order(tokenizer_llama3):
    """Github_hard---o84330 (vzlogger): a meter is one of thirteen kinds, each ``allOf: [meter, own
    keywords]``, twelve names and more per kind. Only two pairs may overlap (``sml`` over a device
    or a host, ``d0`` alike; ``facts.pairs_apart`` proves the 76 other pairs apart), and beside
    ``sml`` over a device, the refusal of ``sml`` over a host is that of its own keywords alone
    (``meter`` is shared). Before, every kind met the complements of the twelve others, whole: the
    members then had to follow the declared order (an any-order bag under such a ``oneOf`` was too
    costly), so both valid instances, written in another order, were refused, and one mask ran to
    the 5 s bound."""
    path = shared_path("data", "maskbench-hard", "Github_hard---o84330.json")
    engine = make_engine("guided", tokenizer_llama3, key_order="any")
    r = run_file(engine, tokenizer_llama3, path)
    assert r["status"] == "ok", r
    assert r["tests"] == 7 and r["passed"], {k: v for k, v in r.items() if k != "tbm_s"}
