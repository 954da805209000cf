"""The compiler's warm-up (numba's JIT in a cold process, about a minute) says why a first start is long."""

from __future__ import annotations

import logging

from guided.grammar import compiler


def _warm_again(monkeypatch, vocab, after_s: float) -> None:
    monkeypatch.setattr(compiler, "_WARM", set())  # as in a new process: this vocabulary not warmed yet
    monkeypatch.setattr(compiler, "NOTICE_AFTER_S", after_s)
    compiler.warm_up(vocab)


def test_a_long_warm_up_logs_that_it_is_compiling(monkeypatch, caplog, vocab_builtin):
    with caplog.at_level(logging.WARNING, logger="guided.grammar.compiler"):
        _warm_again(monkeypatch, vocab_builtin, 0.0)  # the notice's timer fires while the warm-up runs
    notices = [r.getMessage() for r in caplog.records if r.name == "guided.grammar.compiler"]
    assert notices == [compiler.COMPILING]
    assert "guided warm-up" in notices[0]


def test_a_quick_warm_up_says_nothing(monkeypatch, caplog, vocab_builtin):
    with caplog.at_level(logging.WARNING, logger="guided.grammar.compiler"):
        _warm_again(monkeypatch, vocab_builtin, 60.0)
    assert not [r for r in caplog.records if r.name == "guided.grammar.compiler"]
