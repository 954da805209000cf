"""IncrementalDetokenizer: the new text of each step, for streaming.

Decoding token by token is wrong for byte-level BPE (a character split over tokens) and for
SentencePiece (a leading space depends on the previous token), so each step decodes a short window
of recent tokens twice, with and without the new ones, and emits the difference once it no longer
ends in an incomplete character.
"""

from __future__ import annotations

_WINDOW = 6  # tokens of context before the unread ones


class IncrementalDetokenizer:
    __slots__ = ("tokenizer", "skip_special_tokens", "token_ids", "prefix_offset", "read_offset", "text")

    def __init__(self, tokenizer, prompt_ids: list[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.token_ids = list(prompt_ids[-_WINDOW:])
        self.read_offset = len(self.token_ids)
        self.prefix_offset = 0
        self.text = ""

    def add(self, token_ids: list[int]) -> str:
        """Append output tokens; return the text they complete (possibly "")."""
        self.token_ids.extend(token_ids)
        prefix = self._decode(self.prefix_offset, self.read_offset)
        full = self._decode(self.prefix_offset, len(self.token_ids))
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""  # an incomplete UTF-8 sequence: wait for the next token
        delta = full[len(prefix) :]
        self._advance()
        self.text += delta
        return delta

    def flush(self) -> str:
        """At the end: whatever is left, incomplete characters included."""
        prefix = self._decode(self.prefix_offset, self.read_offset)
        full = self._decode(self.prefix_offset, len(self.token_ids))
        delta = full[len(prefix) :] if full.startswith(prefix) else ""
        self._advance()
        self.text += delta
        return delta

    def _advance(self) -> None:
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.token_ids)
        if self.prefix_offset > 4 * _WINDOW:  # keep the window short; ids before it are never read again
            drop = self.prefix_offset
            del self.token_ids[:drop]
            self.prefix_offset -= drop
            self.read_offset -= drop

    def _decode(self, start: int, end: int) -> str:
        return self.tokenizer.decode(self.token_ids[start:end], skip_special_tokens=self.skip_special_tokens)
