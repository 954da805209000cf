"""Vocabulary: exact token bytes for byte-level BPE and SentencePiece, special flags, EOS, padding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from guided.errors import TokenizerError
from guided.grammar.vocab import Vocabulary, bytes_to_unicode

SAMPLES = [
    "Hello world",
    '{"name": "Ada", "age": 36, "tags": ["x", "y"], "pi": 3.14159e-10}',
    "日本語のテキストと中文",
    "emoji 😀🎉👩‍👩‍👧 and flags 🇫🇷",
    "   leading and trailing   ",
    "tabs\tand\nnewlines\r\n\n\nand more",
    "control \x00\x01\x1f\x7f chars",
    "  \n \t  ",
    "ünïcödé Ωμέγα кириллица عربى",
    "a" * 300,
    "if x == 1:\n    return {'a': [1, 2]}\n",
]


def roundtrip(tokenizer, vocab: Vocabulary, text: str) -> bytes:
    ids = tokenizer.encode(text, add_special_tokens=False)
    got = vocab.decode_bytes(ids)
    if vocab.add_prefix_space and not text.startswith(" "):
        # SentencePiece's dummy prefix: a space-marker is prepended unless the text starts with one
        assert got.startswith(b" ")
        got = got[1:]
    return got


@pytest.mark.parametrize("text", SAMPLES)
def test_roundtrip_samples(any_tokenizer, text):
    vocab = Vocabulary.from_tokenizer(any_tokenizer)
    ids = any_tokenizer.encode(text, add_special_tokens=False)
    assert not any(vocab.special[i] for i in ids), "plain text must not encode to special tokens"
    assert roundtrip(any_tokenizer, vocab, text) == text.encode("utf-8")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=40))
def test_roundtrip_hypothesis(any_tokenizer, text):
    vocab = _cached_vocab(any_tokenizer)
    # a special token's own text is parsed as that special token by the tokenizer; not plain text
    assume(not any(t and t in text for t in vocab.special_text.values()))
    assert roundtrip(any_tokenizer, vocab, text) == text.encode("utf-8")


_VOCABS: dict[int, Vocabulary] = {}


def _cached_vocab(tokenizer) -> Vocabulary:
    key = id(tokenizer)
    if key not in _VOCABS:
        _VOCABS[key] = Vocabulary.from_tokenizer(tokenizer)
    return _VOCABS[key]


def test_special_tokens_flagged(any_tokenizer):
    vocab = Vocabulary.from_tokenizer(any_tokenizer)
    added = any_tokenizer.backend_tokenizer.get_added_tokens_decoder()
    assert added, "every fixture tokenizer has special tokens"
    for i in added:
        assert vocab.special[i], f"added token {i} ({added[i].content}) must be flagged"
        assert vocab.tokens[i] == b""
    for name in getattr(any_tokenizer, "all_special_tokens", []):
        assert vocab.special[any_tokenizer.convert_tokens_to_ids(name)]
    assert vocab.special.sum() == len(added)


def test_llama3_facts(vocab_llama3, tokenizer_llama3):
    assert vocab_llama3.n_tokens == 128256
    assert tokenizer_llama3.encode("Hello world", add_special_tokens=False) == [9906, 1917]
    assert tokenizer_llama3.convert_tokens_to_ids("<|eot_id|>") == 128009
    assert {128001, 128009} <= set(vocab_llama3.eos_ids)  # <|end_of_text|>, <|eot_id|>
    assert vocab_llama3.special[128000:].all() and not vocab_llama3.special[:128000].any()
    assert vocab_llama3.tokens[9906] == b"Hello" and vocab_llama3.tokens[1917] == b" world"


def test_mistral_facts(vocab_mistral, tokenizer_mistral):
    assert vocab_mistral.n_tokens == 32000
    assert vocab_mistral.add_prefix_space
    assert vocab_mistral.eos_ids == (2,)
    newline = tokenizer_mistral.convert_tokens_to_ids("<0x0A>")
    assert vocab_mistral.tokens[newline] == b"\n"
    # byte-fallback tokens are single (possibly partial UTF-8) bytes
    assert vocab_mistral.tokens[tokenizer_mistral.convert_tokens_to_ids("<0xE6>")] == b"\xe6"
    assert vocab_mistral.tokens[tokenizer_mistral.convert_tokens_to_ids("▁world")] == b" world"
    assert vocab_mistral.special[[0, 1, 2]].all()  # <unk>, <s>, </s>


def test_builtin_facts(vocab_builtin):
    assert vocab_builtin.n_tokens == 8192
    assert len(vocab_builtin.eos_ids) == 2  # <|end_of_text|> and <|im_end|>
    # all 256 single bytes are tokens of a byte-level BPE
    singles = {t for t in vocab_builtin.tokens if len(t) == 1}
    assert len(singles) == 256


def test_flat_arrays_match_tokens(vocab_mistral):
    off, data = vocab_mistral.token_offsets, vocab_mistral.token_data
    for i in (0, 3, 100, 31999):
        assert data[off[i] : off[i + 1]].tobytes() == vocab_mistral.tokens[i]
    assert off[-1] == len(data)


def test_padding_and_bitmask_words(vocab_builtin):
    padded = vocab_builtin.padded(8256)
    assert padded.size == 8256 and padded.n_tokens == 8192
    assert padded.bitmask_words == 258
    assert padded.fingerprint != vocab_builtin.fingerprint
    with pytest.raises(TokenizerError, match="smaller"):
        vocab_builtin.padded(100)


def test_save_load_roundtrip(tmp_path, vocab_llama3):
    path = tmp_path / "v.npz"
    vocab_llama3.save(path)
    loaded = Vocabulary.load(path)
    assert loaded.tokens == vocab_llama3.tokens
    assert np.array_equal(loaded.special, vocab_llama3.special)
    assert loaded.eos_ids == vocab_llama3.eos_ids and loaded.size == vocab_llama3.size
    assert loaded.fingerprint == vocab_llama3.fingerprint


def test_build_time_128k(tokenizer_llama3):
    import time

    t = time.perf_counter()
    Vocabulary.from_tokenizer(tokenizer_llama3)
    assert time.perf_counter() - t < 1.0


def test_explicit_eos_and_missing_eos(tokenizer_builtin):
    vocab = Vocabulary.from_tokenizer(tokenizer_builtin, eos_ids=[8190])
    assert vocab.eos_ids == (8190,)
    with pytest.raises(TokenizerError, match="EOS"):
        Vocabulary.from_tokenizer(tokenizer_builtin, eos_ids=[])


def test_byte_level_alphabet_is_a_bijection():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256


def test_rejects_slow_tokenizer():
    with pytest.raises(TokenizerError, match="fast tokenizer"):
        Vocabulary.from_tokenizer(object())


def test_added_text_tokens_stand_for_their_text(tokenizer_builtin):
    """Added tokens that are not special (Qwen's <think>, </think>, <tool_call>) are text: a grammar
    that writes "</think>" allows the one token, as the model emits it; special ones stay flagged."""
    from tokenizers import AddedToken, Tokenizer

    from guided.grammar.compiler import GrammarCompiler

    backend = Tokenizer.from_str(tokenizer_builtin.backend_tokenizer.to_str())
    backend.add_tokens([AddedToken("</think>", special=False, normalized=False)])
    backend.add_special_tokens([AddedToken("<|tool|>", special=True, normalized=False)])
    think, tool = backend.token_to_id("</think>"), backend.token_to_id("<|tool|>")
    vocab = Vocabulary.from_tokenizer(backend, eos_ids=[tokenizer_builtin.eos_token_id])
    assert vocab.tokens[think] == b"</think>" and not vocab.special[think]
    assert vocab.tokens[tool] == b"" and vocab.special[tool]
    assert backend.decode([think], skip_special_tokens=False) == "</think>"
    m = GrammarCompiler(vocab).compile_regex("</think>[a-z]+").matcher()
    assert m.is_allowed(think) and not m.is_allowed(tool)
    assert m.accept_token(think) and m.accept_text("ok") and m.is_accepting()
