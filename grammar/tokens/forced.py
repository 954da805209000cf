"""ForcedTokenizer: the certain continuation of a state, as canonical tokens that are safe to prefill.

From a state, the forced bytes are the bytes the language admits one at a time (the state is not
accepting and exactly one byte can follow), up to a limit. They are tokenized canonically: with the
tokenizer's own ``encode`` when the grammar was compiled with one (it must encode bytes as a
continuation: no BOS, no dummy-prefix space), else by greedy longest match over the vocabulary. A
token is only forced when no vocabulary token could start at or before its end and reach past the
forced text (it could merge with what the model writes next): that holds back at least the last
token, unless the text ends where only EOS may follow. When the previously accepted token could
merge with the forced text (its encoding together does not start with that token), nothing is forced.
"""

from __future__ import annotations

import bisect

from guided.grammar.bounded_cache import BoundedCache
from guided.grammar.tokens.vocab_index import vocab_index

__all__ = ["ForcedTokenizer"]

MAX_FORCED_BYTES = 512
MAX_CACHED = 65536  # forced-token answers kept per grammar


class ForcedTokenizer:
    def __init__(self, compiled, encode=None):
        # the parts, not the grammar itself: no reference cycle, so a dropped grammar is freed at once
        self.dfa, self.vocabulary, self.trie = compiled.dfa, compiled.vocabulary, compiled.trie
        self.encode = encode
        self._cache: BoundedCache[tuple, tuple[int, ...]] = BoundedCache(MAX_CACHED)  # (state, previous token)

    def forced_tokens(self, state: int, prev_token: int | None) -> list[int]:
        key = (state, prev_token)
        r = self._cache.get(key)
        if r is None:
            dfa = self.dfa
            with dfa.pool.bound.limit(getattr(dfa, "timeout_s", None), "computing forced tokens"):
                r = self._cache.put(key, self._compute(state, prev_token))
        return list(r)

    def forced_bytes(self, state: int) -> tuple[bytes, int]:
        """(the certain bytes from state, the state after them)."""
        dfa = self.dfa
        out = bytearray()
        while len(out) < MAX_FORCED_BYTES:
            b = dfa.single_byte(state)
            if b < 0:
                break
            out.append(b)
            state = dfa.step(state, b)
        return bytes(out), state

    # ------------------------------------------------------------------ internals
    def _compute(self, state: int, prev_token: int | None) -> tuple[int, ...]:
        text, end = self.forced_bytes(state)
        whole = _complete_utf8(text)  # a character cut by the next choice cannot be tokenized yet
        final = whole == len(text) and self.dfa.is_final(end)
        text = text[:whole]
        if not text:
            return ()
        tokens = self._tokenize(text, prev_token)
        if tokens is None:
            return ()
        if final:
            return tuple(tokens)
        cut = self._merge_start(text)
        kept, pos = [], 0
        vocab_tokens = self.vocabulary.tokens
        for t in tokens:
            pos += len(vocab_tokens[t])
            if pos > cut:
                break
            kept.append(t)
        return tuple(kept)

    def _tokenize(self, text: bytes, prev_token: int | None) -> list[int] | None:
        vocab = self.vocabulary
        if self.encode is None:
            return self._greedy_tokenize(text)
        prev = b"" if prev_token is None else vocab.tokens[prev_token]
        try:
            tokens = list(self.encode(prev + text))
        except UnicodeDecodeError:  # the previous token ends inside a character
            return None
        if prev_token is not None:
            if not tokens or tokens[0] != prev_token:
                return None  # the previous token would merge with the forced text
            tokens = tokens[1:]
        if vocab.decode_bytes(tokens) != text or any(vocab.special[t] for t in tokens):
            return None
        return tokens

    def _greedy_tokenize(self, text: bytes) -> list[int] | None:
        table = vocab_index(self.vocabulary).token_of()
        longest = self.trie.max_token_len
        out, i = [], 0
        while i < len(text):
            for j in range(min(len(text), i + longest), i, -1):
                t = table.get(text[i:j])
                if t is not None:
                    out.append(t)
                    i = j
                    break
            else:
                return None
        return out

    def _merge_start(self, text: bytes) -> int:
        """The first offset from which some token could cover the rest of text and reach past it."""
        toks = self.trie.sorted_tokens
        lo = max(0, len(text) - self.trie.max_token_len)
        for s in range(lo, len(text)):
            tail = text[s:]
            j = bisect.bisect_left(toks, tail)
            while j < len(toks) and toks[j].startswith(tail):
                if len(toks[j]) > len(tail):
                    return s
                j += 1
        return len(text)


def _complete_utf8(data: bytes) -> int:
    """Length of the longest prefix of data that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead or ASCII byte
            need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4
            return len(data) if need <= back else len(data) - back
    return len(data)
