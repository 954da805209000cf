"""Codepoint ranges -> UTF-8 byte-range sequences (the classic utf8-ranges split).

``utf8_sequences(lo, hi)`` returns sequences of inclusive byte ranges, one per encoded length and
alignment, whose concatenations are exactly the UTF-8 encodings of the codepoints in [lo, hi]
(surrogates excluded). A token may end or start inside a character: the byte automaton built from
these sequences has a state after every byte.
"""

from __future__ import annotations

__all__ = ["utf8_sequences"]

_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF)


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    out: list[tuple[tuple[int, int], ...]] = []
    for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), min(hi, 0x10FFFF))):
        if a <= b:
            _split(a, b, out)
    return out


def _split(lo: int, hi: int, out: list) -> None:
    for limit in _LENGTH_LIMITS:
        if lo <= limit < hi:
            _split(lo, limit, out)
            _split(limit + 1, hi, out)
            return
    if hi <= 0x7F:
        out.append(((lo, hi),))
        return
    for i in range(1, 4):
        m = (1 << (6 * i)) - 1
        if lo & ~m != hi & ~m:
            if lo & m:
                _split(lo, lo | m, out)
                _split((lo | m) + 1, hi, out)
                return
            if hi & m != m:
                _split(lo, (hi & ~m) - 1, out)
                _split(hi & ~m, hi, out)
                return
    a, b = chr(lo).encode(), chr(hi).encode()
    out.append(tuple(zip(a, b, strict=True)))
