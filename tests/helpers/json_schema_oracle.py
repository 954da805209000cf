"""Test helpers for the JSON Schema compiler: membership oracles for regex AST nodes, serializers
that follow the compiler's key order, and the jsonschema validator with format assertion.

Two membership tests: ``fullmatch`` is a naive recursion over sets of end positions, independent of
the grammar core, fine for short strings; ``accepts`` walks the grammar core's byte derivatives
(exact, fast). Tests cross-check the two on small cases and use ``accepts`` for bulk work.
"""

from __future__ import annotations

import json
from functools import cache

import jsonschema
import numpy as np

from guided.grammar.automata.expr_pool import EMPTY_ID, ExprPool
from guided.grammar.regex_ast import Alt, And, ByteSet, Chars, Not, Repeat, Seq


def fullmatch(node, text: str) -> bool:
    """Whether the whole text is in the node's language (naive; exponential only in nesting)."""
    return len(text) in _ends(node, text, 0)


def _ends(node, text: str, i: int) -> frozenset[int]:
    n = len(text)
    if isinstance(node, Chars):
        if i < n and any(lo <= ord(text[i]) <= hi for lo, hi in node.ranges):
            return frozenset((i + 1,))
        return frozenset()
    if isinstance(node, ByteSet):
        raise NotImplementedError("byte-level nodes have no place in JSON Schema languages")
    if isinstance(node, Seq):
        cur = frozenset((i,))
        for item in node.items:
            cur = frozenset(e for p in cur for e in _ends(item, text, p))
            if not cur:
                break
        return cur
    if isinstance(node, Alt):
        return frozenset(e for item in node.items for e in _ends(item, text, i))
    if isinstance(node, Repeat):
        out = set()
        cur, k = frozenset((i,)), 0
        seen = set()
        while cur:
            if k >= node.min:
                out |= cur
            if node.max is not None and k >= node.max:
                break
            key = cur if k >= node.min else None
            if key is not None and key in seen:
                break
            if key is not None:
                seen.add(key)
            cur = frozenset(e for p in cur for e in _ends(node.item, text, p) if e > p or k < node.min)
            k += 1
        return frozenset(out)
    if isinstance(node, And):
        return frozenset(
            e for e in range(i, n + 1) if all(e in _ends(item, text, i) for item in node.items)
        )
    if isinstance(node, Not):
        inner = _ends(node.item, text, i)
        return frozenset(e for e in range(i, n + 1) if e not in inner)
    raise TypeError(node)


_POOLS: dict[int, tuple] = {}


def accepts(node, text: str) -> bool:
    """Exact membership through the grammar core's byte derivatives."""
    entry = _POOLS.get(id(node))
    if entry is None or entry[0] is not node:
        pool = ExprPool()
        entry = (node, pool, pool.intern(node))
        if len(_POOLS) > 64:
            _POOLS.clear()
        _POOLS[id(node)] = entry
    _, pool, e = entry
    for b in text.encode("utf-8", "surrogatepass"):
        e = pool.deriv(e, b)
        if e == EMPTY_ID:
            return False
    return pool.nullable[e]


# ---------------------------------------------------------------- serialization
def one_value(text: str):
    """``json.loads`` that fails (AssertionError) where an object repeats a member name: a parser
    would keep one of them, so the text would not be the value it spells."""

    def pairs(items):
        names = [k for k, _ in items]
        assert len(names) == len(set(names)), text
        return dict(items)

    return json.loads(text, object_pairs_hook=pairs)


def dumps(value, compact: bool = False) -> str:
    """MaskBench's serialization (", " and ": ") or the compact one; keys as the instance lists them."""
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps(value, ensure_ascii=False, separators=seps)


def validator_for(schema, registry=None):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    kwargs = {"format_checker": cls.FORMAT_CHECKER}
    if registry is not None:
        kwargs["registry"] = registry
    return cls(schema, **kwargs)


@cache
def _fmt_checker():
    return jsonschema.Draft202012Validator.FORMAT_CHECKER


def is_valid(schema, instance) -> bool:
    return validator_for(schema).is_valid(instance)


# a value nesting past the depth bound (10) a schema-free value under an intersection would get
DEEP = "[" * 13 + "1" + "]" * 13


def accepted_texts(grammars, tokenizer, schema: dict, texts: list[str]) -> list[bool]:
    """Whether the schema's grammar (``key_order="any"``, compiled with every warning an error: no
    depth bound, no relaxation) accepts each text, token by token."""
    import warnings

    from guided.schema.compiler import compile_json_schema

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = compile_json_schema(grammars, schema, key_order="any")
    out = []
    for text in texts:
        matcher = compiled.matcher()
        ids = tokenizer.encode(text, add_special_tokens=False)
        out.append(all(matcher.accept_token(t) for t in ids) and matcher.is_accepting())
    return out


def assert_exact(grammars, tokenizer, schema: dict, texts: list[str]) -> None:
    """``accepted_texts`` equals jsonschema's answer (its draft from ``$schema``) on every text, and
    the texts test both ways."""
    validator = validator_for(schema)
    expected = [validator.is_valid(json.loads(t)) for t in texts]
    assert 0 < sum(expected) < len(texts)
    for text, got, want in zip(texts, accepted_texts(grammars, tokenizer, schema, texts), expected, strict=True):
        assert got == want, text


# tokens with escapes, quotes among them, for the run-time checks of member names and unique items
ESCAPE_TOKENS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"null", b"a", b"b", b"c", b"z",
                 b"\\", b"\\n", b"\\u", b"\\u00", b"\\u0061", b"\\u0062", b"a\\u0062", b"\\ud83d", b"\\/", b"\\\\",
                 b'\\"', b'a\\"', b'\\"b', b'\\"c', b"\\u0022", b'\\"\\"', b'\\"b"', b'b"', b'c"', b'":', b'"a\\"',
                 b'\\"c":', b'"a', b'\\""']  # fmt: skip


def refusals_by_simulation(compiled, vocab, prefix: str) -> tuple[set, set, set]:
    """After ``prefix`` (read a character at a time with a mask before each, as generation does):
    (the tokens the checked matcher drops, those that simulating every token the plain grammar allows
    finds completing a repeat or leaving no way on, and the tokens the mask simulated). The first two
    must be equal."""
    m, plain = compiled.matcher(), compiled.compiled.matcher()
    for ch in prefix:
        m.allowed_tokens()
        assert m.accept_text(ch) and plain.accept_text(ch), prefix
    before = set(np.flatnonzero(plain.allowed_tokens()).tolist())
    simulated, cls = set(), type(m)
    after = cls._after

    def counted(self, data, token=None):
        simulated.add(token)
        return after(self, data, token)

    cls._after = counted
    try:
        dropped = before - set(np.flatnonzero(m.allowed_tokens()).tolist())
    finally:
        cls._after = after
    return dropped, {t for t in before if not compiled.is_eos(t) and m._after(vocab.tokens[t], t) is None}, simulated


def closing_tokens(compiled, vocab, chars: bytes = b'"},') -> np.ndarray:
    """bool [tokens]: the tokens that can end a string or a member (EOS, or a token with one of
    ``chars``: a quote, a closing brace, a comma)."""
    return np.array([compiled.is_eos(t) or any(c in tok for c in chars) for t, tok in enumerate(vocab.tokens)])


def masked_walk(compiled, vocab, rng, steps: int = 400, chars: bytes = b'"},') -> bytes | None:
    """A random walk over the checked masks (never a dead end: asserted), half the time taking a token
    that can end a string or a member (``closing_tokens``), so that names and objects finish; the
    output once EOS is drawn (the matcher then accepting: asserted), or None past ``steps``."""
    m = compiled.matcher()
    out = b""
    closers = closing_tokens(compiled, vocab, chars)
    for _ in range(steps):
        allowed = np.flatnonzero(m.allowed_tokens())
        assert len(allowed), out  # never a dead end
        closing = allowed[closers[allowed]].tolist()
        t = int(rng.choice(closing if closing and rng.random() < 0.5 else allowed))
        if compiled.is_eos(t):
            assert m.is_accepting()
            return out
        assert m.accept_token(t), out
        out += vocab.tokens[t]
    return None
