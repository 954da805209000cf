"""The run-time half of ``uniqueItems``: a matcher that refuses any token completing an array item
equal, as a JSON value, to an earlier item of the same array (``1`` and ``1.0`` are one value,
objects are equal whatever their member order, strings whatever their escapes).

A ``JsonTrack`` follows the accepted bytes as JSON (the grammar guarantees they are): the stack of
open arrays and objects, each with the formula of its place (``unique_plan``), the member name or
item index being written, and for arrays that must be unique the set of their completed items.
An item is compared when its value is decided: a string at its closing quote, a number or literal
at the byte after it (a literal already at its first letter, an integer already at ``0`` or at a
``.``), an object or array at its closing bracket. The plan only allows item kinds where a prefix
that is not decided can still end as a new value, so refusing these tokens never leaves the
generation without a way forward.

Masks: the grammar's mask, then only the allowed tokens that could decide an item are simulated
(by which bytes they contain; in a string item, only tokens whose text before the quote finishes
an earlier item, plus the few with more after the quote).
"""

from __future__ import annotations

import json
import re
import threading
from decimal import Decimal

import numpy as np

from guided.grammar import Matcher
from guided.schema.unique_plan import UniquePlan

__all__ = ["UniqueChecked", "UniqueMatcher", "JsonTrack", "json_value_key"]

_WS = b" \t\r\n"
_NUMBER = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")
_NUM = frozenset(b"0123456789+-.eE")
_LIT = {ord("t"): True, ord("f"): False, ord("n"): None}


def number_key(text: str) -> tuple:
    """("n", sign, digits, exponent) of a JSON number, equal for equal values (``1``, ``1.0``,
    ``10e-1``); exact for any exponent (Decimal's context limits are not)."""
    m = _NUMBER.fullmatch(text)
    sign, whole, frac, exp = m.group(1), m.group(2), m.group(3) or "", int(m.group(4) or 0)
    digits = (whole + frac).lstrip("0")
    if not digits:
        return ("n", "", "0", 0)
    exp -= len(frac)
    stripped = digits.rstrip("0")
    return ("n", sign, stripped, exp + len(digits) - len(stripped))


def json_value_key(value) -> tuple:
    """A hashable key equal for equal JSON values (numbers parsed with ``number_key``)."""
    if value is True or value is False:
        return ("b", value)
    if value is None:
        return ("z",)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, tuple):  # a number_key
        return value
    if isinstance(value, (int, float, Decimal)):
        return number_key(json.dumps(value) if not isinstance(value, Decimal) else str(value))
    if isinstance(value, list):
        return ("a", tuple(json_value_key(v) for v in value))
    return ("o", frozenset((k, json_value_key(v)) for k, v in value.items()))


def _parse(text: bytes) -> tuple:
    return json_value_key(json.loads(text, parse_float=number_key, parse_int=number_key))


class Dup(Exception):
    """The bytes complete an item equal to an earlier one."""


class JsonTrack:
    """Incremental JSON reader for one sequence (see the module docstring). ``feed`` raises Dup."""

    __slots__ = ("plan", "stack", "lex", "pos", "root_done")

    # frame: [is_array, formula, unique, items, item_start, index, item_kind, member name]
    def __init__(self, plan: UniquePlan):
        self.plan = plan
        self.stack: list[list] = []
        self.lex: list | None = None  # ["s", start, escape, is_key] | ["n"|"l", start]
        self.pos = 0
        self.root_done = False

    def clone(self) -> JsonTrack:
        t = JsonTrack.__new__(JsonTrack)
        t.plan, t.pos, t.root_done = self.plan, self.pos, self.root_done
        t.stack = [f.copy() for f in self.stack]
        t.lex = None if self.lex is None else self.lex.copy()
        return t

    def unique_depth(self) -> int:
        """Index of the innermost open array that must be unique, or -1."""
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][2]:
                return i
        return -1

    # ------------------------------------------------------------------ reading
    def feed(self, data: bytes, past: bytes) -> None:
        """Read ``data``, which follows ``past`` (every byte read before); raise Dup on a duplicate."""
        base = self.pos
        for i, b in enumerate(data):
            p = base + i
            lex = self.lex
            if lex is not None:
                kind = lex[0]
                if kind == "s":
                    esc = lex[2]
                    if esc:  # -1: after a backslash; k > 0: hex digits of a \u escape still to come
                        lex[2] = (4 if b == 0x75 else 0) if esc == -1 else esc - 1
                        continue
                    if b == 0x5C:
                        lex[2] = -1
                        continue
                    if b != 0x22:
                        continue
                    self.lex = None
                    self._scalar_end(lex, p + 1, past, data, base)
                    continue
                if b in _NUM or (kind == "l" and 0x61 <= b <= 0x7A):
                    if kind == "n":
                        self._decided_number(lex, p + 1, past, data, base)
                    continue
                self.lex = None
                self._scalar_end(lex, p, past, data, base)
            if b in _WS:
                continue
            top = self.stack[-1] if self.stack else None
            if b == 0x2C or b == 0x3A:  # , :
                continue
            if b == 0x5D or b == 0x7D:  # ] }
                self.stack.pop()
                self._value_end(p + 1, past, data, base)
                continue
            if b == 0x22 and top is not None and not top[0] and top[7] is None:
                self.lex = ["s", p, 0, True]  # a member name
                continue
            self._value_start(p)
            if b == 0x22:
                self.lex = ["s", p, 0, False]
            elif b == 0x5B or b == 0x7B:
                f = self._formula_here()
                is_array = b == 0x5B
                unique = is_array and f is not None and self.plan.demand(f) == "Y"
                self.stack.append([is_array, f, unique, frozenset(), -1, 0, None, None])
            elif b in _LIT:
                self.lex = ["l", p]
                self._decided(("z",) if b == 0x6E else ("b", _LIT[b]))
            else:
                self.lex = ["n", p]
                self._decided_number(self.lex, p + 1, past, data, base)
        self.pos = base + len(data)

    def _formula_here(self):
        if not self.stack:
            return self.plan.root
        top = self.stack[-1]
        if top[1] is None:
            return None
        if top[0]:
            return self.plan.item(top[1], top[5])
        return self.plan.child(top[1], top[7])

    def _value_start(self, p: int) -> None:
        top = self.stack[-1] if self.stack else None
        if top is not None and top[0] and top[2]:
            top[4] = p
            top[6] = self.plan.item_kind(self.plan.item(top[1], top[5]))

    def _value_end(self, end: int, past: bytes, data: bytes, base: int) -> None:
        """A value ended at ``end``: an item of the array on top, a member of the object, or the root."""
        if not self.stack:
            self.root_done = True
            return
        top = self.stack[-1]
        if not top[0]:
            top[7] = None  # the member is written: the next string is a name
            return
        if top[2]:
            key = _parse(_text(top[4], end, past, data, base))
            if key in top[3]:
                raise Dup
            top[3] = top[3] | {key}
            top[4] = -1
        top[5] += 1

    def _scalar_end(self, lex: list, end: int, past: bytes, data: bytes, base: int) -> None:
        if lex[0] == "s" and lex[3]:  # a member name: the value's place is now known
            top = self.stack[-1]
            top[7] = json.loads(_text(lex[1], end, past, data, base))
            return
        self._value_end(end, past, data, base)

    def _decided(self, key: tuple) -> None:
        top = self.stack[-1] if self.stack else None
        if top is not None and top[0] and top[2] and key in top[3]:
            raise Dup

    def _decided_number(self, lex: list, end: int, past: bytes, data: bytes, base: int) -> None:
        """An integer item is decided at ``0`` (no digit may follow) and at ``.`` (only zeros may)."""
        top = self.stack[-1] if self.stack else None
        if top is None or not top[0] or not top[2] or top[6] != "integer":
            return
        text = _text(lex[1], end, past, data, base)
        if text in (b"0", b"-0") or text.endswith(b"."):
            self._decided(number_key(text.rstrip(b".").decode()))


def _text(start: int, end: int, past: bytes, data: bytes, base: int) -> bytes:
    if start >= base:
        return bytes(data[start - base : end - base])
    return bytes(past[start:]) + bytes(data[: end - base])


class _VocabFeatures:
    """Per vocabulary: which bytes each token holds, as packed bitmasks (one bit per token, the
    layout of a mask row) for choosing the tokens a mask must simulate with one AND per word."""

    def __init__(self, tokens: list[bytes], special, words: int) -> None:
        n = len(tokens)
        self.closers = np.zeros(n, dtype=np.int16)
        quote = np.zeros(n, dtype=bool)  # any quote
        complex_quote = np.zeros(n, dtype=bool)  # a quote with a backslash before or more after it
        ends = np.zeros(n, dtype=bool)  # , ] } or whitespace: a number or literal may end there
        sep = np.zeros(n, dtype=bool)  # only , and whitespace: ends a scalar, decides nothing more
        zero = np.zeros(n, dtype=bool)  # a 0 (an integer item "-0" is decided there)
        dot = np.zeros(n, dtype=bool)  # a . (an integer item is decided there)
        starts = np.zeros(n, dtype=bool)  # after , and ws: an item that may be decided in the token
        self.simple_close: dict[bytes, list[int]] = {}  # text before the first quote -> tokens whose rest is , and ws
        for t, data in enumerate(tokens):
            if not data or special[t]:
                continue
            q = data.count(b'"')
            quote[t] = q > 0
            self.closers[t] = data.count(b"]") + data.count(b"}")
            ends[t] = any(c in data for c in b",]} \t\r\n")
            sep[t] = not data.strip(b" \t\r\n,")
            zero[t], dot[t] = b"0" in data, b"." in data
            body = data.lstrip(b" \t\r\n,")
            head = body[:1]
            if head in (b"t", b"f", b"n") or q >= 2 or self.closers[t]:
                starts[t] = True  # a literal is decided at its first letter; a string at its quote
            elif head == b"-" or head.isdigit():  # a number: decided when it ends in the token, or at 0 / .
                run = len(body) - len(body.lstrip(b"0123456789+-.eE"))
                starts[t] = run < len(body) or body.startswith((b"0", b"-0")) or b"." in body
            if q:
                i = data.index(b'"')
                pre, rest = data[:i], data[i + 1 :]
                if b"\\" in pre or rest.strip(b" \t\r\n,"):
                    complex_quote[t] = True
                else:
                    self.simple_close.setdefault(pre, []).append(t)
        pack = lambda a: _pack(a, words)  # noqa: E731
        self.quote, self.complex_quote = pack(quote), pack(complex_quote)
        self.closer, self.starts, self.ends, self.sep = pack(self.closers > 0), pack(starts), pack(ends), pack(sep)
        self.zero, self.dot = pack(zero), pack(dot)


def _pack(flags: np.ndarray, words: int) -> np.ndarray:
    bits = np.zeros(words * 32, dtype=bool)
    bits[: len(flags)] = flags
    return np.packbits(bits, bitorder="little").view(np.uint32)


def _ids(words: np.ndarray) -> np.ndarray:
    """Token ids of the set bits of packed uint32 words (only the nonzero words are unpacked)."""
    nz = np.flatnonzero(words)
    if not len(nz):
        return nz
    bits = np.unpackbits(words[nz].view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    r, c = np.nonzero(bits)
    return nz[r] * 32 + c


_FEATURES: dict[str, _VocabFeatures] = {}
_FEATURES_LOCK = threading.Lock()


def _features(vocabulary) -> _VocabFeatures:
    with _FEATURES_LOCK:
        got = _FEATURES.get(vocabulary.fingerprint)
        if got is None:
            got = _FEATURES[vocabulary.fingerprint] = _VocabFeatures(
                vocabulary.tokens, vocabulary.special, vocabulary.bitmask_words
            )
        return got


class UniqueChecked:
    """A compiled JSON Schema grammar plus its uniqueItems plan: ``matcher()`` gives a UniqueMatcher;
    everything else is the grammar's."""

    def __init__(self, compiled, plan: UniquePlan):
        self.compiled = compiled
        self.plan = plan

    def matcher(self) -> UniqueMatcher:
        return UniqueMatcher(self.compiled.matcher(), self)

    def __getattr__(self, name):
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"UniqueChecked({self.compiled!r})"


class UniqueMatcher:
    """A grammar matcher with the uniqueItems check (the Matcher API)."""

    __slots__ = ("inner", "checked", "_tracks", "_bytes", "_lens")

    def __init__(self, inner, checked: UniqueChecked):
        self.inner = inner
        self.checked = checked
        self._tracks = [JsonTrack(checked.plan)]
        self._bytes = bytearray()
        self._lens = [0]

    @property
    def compiled(self):
        return self.checked.compiled

    @property
    def state(self) -> int:
        return self.inner.state

    @property
    def num_accepted(self) -> int:
        return self.inner.num_accepted

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def is_accepting(self) -> bool:
        return self.inner.is_accepting()

    def reset(self) -> None:
        self.inner.reset()
        del self._tracks[1:], self._lens[1:]
        del self._bytes[:]

    def copy(self) -> UniqueMatcher:
        m = UniqueMatcher.__new__(UniqueMatcher)
        m.inner, m.checked = self.inner.copy(), self.checked
        m._tracks, m._lens, m._bytes = list(self._tracks), list(self._lens), bytearray(self._bytes)
        return m

    def rollback(self, n: int) -> None:
        self.inner.rollback(n)
        if n:
            del self._tracks[-n:], self._lens[-n:]
            del self._bytes[self._lens[-1] :]

    # ------------------------------------------------------------------ the check
    def _after(self, data: bytes) -> JsonTrack | None:
        """The track after ``data``, or None when it completes a duplicate item."""
        t = self._tracks[-1].clone()
        try:
            t.feed(data, self._bytes)
        except Dup:
            return None
        return t

    def _refused(self, words: np.ndarray) -> list[int]:
        """Of the tokens the grammar allows (packed uint32 ``words``), those completing a duplicate
        item: only tokens whose bytes could decide an item are simulated."""
        track = self._tracks[-1]
        d = track.unique_depth()
        vocab = self.checked.compiled.vocabulary
        feats = _features(vocab)
        need = len(track.stack) - 1 - d  # closing brackets before an item of that array can end
        tokens = vocab.tokens
        out: list[int] = []
        if need > 0:
            sim = _ids(words & feats.closer)
            sim = sim[feats.closers[sim] >= need]
        elif track.lex is not None and track.lex[0] == "s":
            fast = self._string_closers(track, feats, words)
            if fast is None:  # inside an escape or a UTF-8 character: every token with a quote
                sim = _ids(words & feats.quote)
            else:
                sim = _ids(words & feats.complex_quote)
                out += fast
        elif track.lex is not None:  # a number or literal: decided where it ends (integers also at 0 / .)
            ends = words & feats.ends
            if track.lex[0] == "n" and track.stack[-1][6] == "integer":
                ends |= words & feats.dot
                if self._bytes[track.lex[1] :] == b"-":
                    ends |= words & feats.zero
            seps = ends & feats.sep  # these end the scalar and do no more: one simulation answers for all
            ends &= ~feats.sep
            ids = _ids(seps)
            if len(ids) and self._after(tokens[int(ids[0])]) is None:
                out += ids.tolist()
            sim = _ids(ends)
        else:
            sim = _ids(words & feats.starts)
        for t in sim.tolist():
            if self._after(tokens[t]) is None:
                out.append(t)
        return out

    def _string_closers(self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray) -> list[int] | None:
        """Tokens ending the string item in progress (quote, then only , and whitespace) as a
        duplicate; None when the text so far ends inside an escape or a character."""
        lex = track.lex
        if lex[2]:
            return None
        try:
            so_far = json.loads(b'"' + bytes(self._bytes[lex[1] + 1 :]) + b'"')
        except ValueError:
            return None
        top = track.stack[-1]
        out = []
        for key in top[3]:
            if key[0] != "s" or not key[1].startswith(so_far):
                continue
            rest = key[1][len(so_far) :]
            spelled = json.dumps(rest, ensure_ascii=False)[1:-1].encode()
            for t in feats.simple_close.get(spelled, ()):
                if (int(words[t >> 5]) >> (t & 31)) & 1:
                    out.append(t)
        return out

    # ------------------------------------------------------------------ Matcher API
    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        self.inner.fill_bitmask(bitmask, row)
        if self.inner.is_terminated() or self._tracks[-1].unique_depth() < 0:
            return
        arr = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()
        words = (arr[row] if arr.ndim == 2 else arr).view(np.uint32)
        for t in self._refused(words):
            words[t >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))

    def has_cached_mask(self) -> bool:
        return self._tracks[-1].unique_depth() < 0 and self.inner.has_cached_mask()

    def fill_bitmask_if_cached(self, bitmask, row: int = 0) -> bool:
        if self._tracks[-1].unique_depth() >= 0:
            return False
        return self.inner.fill_bitmask_if_cached(bitmask, row)

    def allowed_tokens(self) -> np.ndarray:
        words = np.zeros(self.checked.compiled.vocabulary.bitmask_words, dtype=np.int32)
        self.fill_bitmask(words)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little").astype(bool)
        return bits[: self.checked.compiled.vocabulary.size]

    def is_allowed(self, token_id: int) -> bool:
        if not self.inner.is_allowed(token_id):
            return False
        if self.checked.compiled.is_eos(token_id):
            return True
        return self._after(self.checked.compiled.vocabulary.tokens[token_id]) is not None

    def accept_token(self, token_id: int) -> bool:
        compiled = self.checked.compiled
        if compiled.is_eos(token_id) or not 0 <= token_id < len(compiled.vocabulary.tokens):
            if not self.inner.accept_token(token_id):
                return False
            self._push(self._tracks[-1], b"")
            return True
        data = compiled.vocabulary.tokens[token_id]
        return self._advance(data, lambda: self.inner.accept_token(token_id))

    accept_tokens = Matcher.accept_tokens  # token by token through accept_token above

    def accept_bytes(self, data: bytes) -> bool:
        return self._advance(bytes(data), lambda: self.inner.accept_bytes(data))

    def accept_text(self, text: str) -> bool:
        return self.accept_bytes(text.encode("utf-8"))

    def _advance(self, data: bytes, inner_accept) -> bool:
        if self.inner.is_terminated():
            return False
        try:
            track = self._after(data)
        except (IndexError, ValueError, AttributeError):
            # bytes that are not JSON (the tracker's stack or numbers break): the grammar refuses
            # them too; were it to accept them, the tracker has a bug that must not pass silently
            if inner_accept():
                raise
            return False
        if track is None or not inner_accept():
            return False
        self._push(track, data)
        return True

    def _push(self, track: JsonTrack, data: bytes) -> None:
        self._bytes += data
        self._tracks.append(track)
        self._lens.append(len(self._bytes))

    def forced_tokens(self) -> list[int]:
        """The grammar's forced tokens, up to the first one that would complete a duplicate."""
        forced = self.inner.forced_tokens()
        if not forced or self._tracks[-1].unique_depth() < 0:
            return forced
        probe = self.copy()
        n = probe.accept_tokens(forced)
        return forced[:n]

    def forced_bytes(self) -> bytes:
        return self.inner.forced_bytes() if self._tracks[-1].unique_depth() < 0 else b""

    def __repr__(self) -> str:
        return f"UniqueMatcher({self.inner!r})"
