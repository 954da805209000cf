"""Compile-time language questions (emptiness, inclusion, equivalence) and the explicit minimal DFA,
checked against interegular's FSMs and Python `re`."""

from __future__ import annotations

import re

from grammar_oracle import fsm_of
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.grammar import parse_regex
from guided.grammar.languages import equivalent, is_empty, is_subset, matches, to_dfa
from guided.grammar.regex_ast import complement, intersect, literal

ASCII_REGEX = st.recursive(
    st.sampled_from(["a", "b", "[ab]", "[^a]", "c"]),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{1,3}"])).map(lambda t: f"({t[0]}){t[1]}"),
    ),
    max_leaves=5,
)


@settings(max_examples=60, deadline=None)
@given(a=ASCII_REGEX, b=ASCII_REGEX, text=st.text("abcé", max_size=6))
def test_against_interegular(a, b, text):
    na, nb = parse_regex(a), parse_regex(b)
    fa, fb = fsm_of(a), fsm_of(b)
    assert is_subset(na, nb) == fa.issubset(fb)
    assert equivalent(na, nb) == fa.equivalent(fb)
    assert is_empty(intersect(na, nb)) == (fa & fb).empty()
    dfa = to_dfa(na)
    assert dfa.accepts(text.encode()) == bool(re.fullmatch(a, text)) == matches(na, text)
    if "[^" not in a:  # ASCII only: the byte DFA and the character DFA coincide
        reduced = fa.reduce()
        assert dfa.n_states == len([s for s in reduced.states if reduced.islive(s)])  # minimal, trimmed


def test_complement_is_over_valid_utf8():
    not_a = complement(literal("a"))
    assert matches(not_a, "é") and matches(not_a, "") and not matches(not_a, "a")
    assert not matches(not_a, b"\xff")  # not text: outside every language here
    assert is_empty(intersect(not_a, literal("a")))
