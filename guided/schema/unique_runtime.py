"""Run-time checks no grammar holds: unique array items and unique member names.

``uniqueItems``: the matcher refuses any token completing an array item equal, as a JSON value, to
an earlier item of the same array (``1`` and ``1.0`` are one value, objects are equal whatever their
member order, strings whatever their escapes).

Member names: where an object's declared properties may come in any order past what a permutation
automaton holds (``key_order="any"``, the "bag" policy of ``key_order``), the grammar accepts the
members in any order with repeats, and the matcher refuses a token completing a name already written
in that object. So that the refusal never leaves the generation without a way on, a token that
starts or continues a name (or writes the comma before one) is allowed only while some name not yet
written can still follow: a declared one, or a fresh undeclared one (at such places every
undeclared name is alike), asked of the grammar by walking its automaton from the state after the
token. (A name cut inside an escape or a multi-byte character is not checked until the next token.)

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

    __slots__ = ("plan", "keys", "stack", "lex", "pos", "root_done")

    # frame: [is_array, formula, unique, items, item_start, index, item_kind, member name,
    #         key-order place, names written (a frozenset where they must be unique, else None),
    #         a comma was written and the next name not started, names the grammar accepts here or None]
    def __init__(self, plan: UniquePlan | None, keys=None):
        self.plan = plan
        self.keys = keys  # the root's KeyOrder place, or None when no object checks its names
        self.stack: list[list] = []
        self.lex: list | None = None  # ["s", start, escape, is_key] | ["n"|"l", start]
        self.pos = 0
        self.root_done = False

    def clone(self) -> JsonTrack:
        t = JsonTrack.__new__(JsonTrack)
        t.plan, t.keys, t.pos, t.root_done = self.plan, self.keys, self.pos, self.root_done
        t.stack = [f.copy() for f in self.stack]
        t.lex = None if self.lex is None else self.lex.copy()
        return t

    def unique_depth(self) -> int:
        """Index of the innermost open array that must be unique or object whose names must be, or -1."""
        for i in range(len(self.stack) - 1, -1, -1):
            f = self.stack[i]
            if f[2] or f[9] is not None:
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
                if b == 0x2C and top is not None and not top[0]:
                    top[10] = True
                continue
            if b == 0x5D or b == 0x7D:  # ] }
                self.stack.pop()
                self._value_end(p + 1, past, data, base)
                continue
            if b == 0x22 and top is not None and not top[0] and top[7] is None:
                self.lex = ["s", p, 0, True]  # a member name
                top[10] = False
                continue
            self._value_start(p)
            if b == 0x22:
                self.lex = ["s", p, 0, False]
            elif b == 0x5B or b == 0x7B:
                f = self._formula_here()
                place = self._place_here()
                is_array = b == 0x5B
                unique = is_array and f is not None and self.plan.demand(f) == "Y"
                names = None if is_array or place is None or place.policy("any") != "bag" else frozenset()
                self.stack.append([is_array, f, unique, frozenset(), -1, 0, None, None, place, names, False, None])
            elif b in _LIT:
                self.lex = ["l", p]
                self._decided(("z",) if b == 0x6E else ("b", _LIT[b]))
            else:
                self.lex = ["n", p]
                self._decided_number(self.lex, p + 1, past, data, base)
        self.pos = base + len(data)

    def _place_here(self):
        if not self.stack:
            return self.keys
        top = self.stack[-1]
        place = top[8]
        if place is None:
            return None
        if top[0]:
            return place.item(top[5])
        return place.child(top[7]) if top[7] in place.name_set else place.other()

    def _formula_here(self):
        if self.plan is None:
            return None
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
            name = json.loads(_text(lex[1], end, past, data, base))
            if top[9] is not None:
                if name in top[9]:
                    raise Dup
                top[9] = top[9] | {name}
            top[7] = name
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
        comma = np.zeros(n, dtype=bool)  # a , (a member name may follow in the token or after it)
        quotes2 = np.zeros(n, dtype=bool)  # two quotes or more (a whole member name may be in the token)
        name_complex = np.zeros(n, dtype=bool)  # a quote not in name_close
        self.name_close: dict[bytes, list[int]] = {}  # text before the first quote -> tokens deciding nothing after it
        self.simple_close: dict[bytes, list[int]] = {}  # text before the first quote -> tokens whose rest is , and ws
        for t, data in enumerate(tokens):
            if not data or special[t]:
                continue
            q = data.count(b'"')
            quote[t] = q > 0
            self.closers[t] = data.count(b"]") + data.count(b"}")
            ends[t] = any(c in data for c in b",]} \t\r\n")
            sep[t] = not data.strip(b" \t\r\n,")
            zero[t], dot[t], comma[t], quotes2[t] = b"0" in data, b"." in data, b"," in data, q >= 2
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
                if b"\\" in pre or any(c in rest for c in b",]}"):
                    name_complex[t] = True
                else:
                    self.name_close.setdefault(pre, []).append(t)
        pack = lambda a: _pack(a, words)  # noqa: E731
        self.quote, self.complex_quote = pack(quote), pack(complex_quote)
        self.closer, self.starts, self.ends, self.sep = pack(self.closers > 0), pack(starts), pack(ends), pack(sep)
        self.zero, self.dot = pack(zero), pack(dot)
        self.comma, self.quotes2, self.name_complex = pack(comma), pack(quotes2), pack(name_complex)


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
    """A compiled JSON Schema grammar plus what the matcher checks at run time: the uniqueItems
    plan and the root place of the key order (objects whose names must not repeat), either may be
    None. ``matcher()`` gives a UniqueMatcher; everything else is the grammar's."""

    def __init__(self, compiled, plan: UniquePlan | None, keys=None, strict: bool = False):
        self.compiled = compiled
        self.plan = plan
        self.keys = keys
        self.name_memo: dict[tuple, bool] = {}  # (state, place, names written, prefix) -> a name may come
        self.strict = strict
        self._open: dict[int, bool] = {}

    def names_open(self, place) -> bool:
        """Whether every undeclared name is accepted at ``place`` whatever was written before: no
        schema there closes its objects (``additionalProperties`` and ``unevaluatedProperties``
        unset, true or ``{}``, and not ``strict``). Then a fresh name always fits, and only a
        token holding a whole name can be refused."""
        hit = self._open.get(id(place))
        if hit is None:
            hit = self._open[id(place)] = not self.strict and all(
                s.get(kw, True) in (True, {}) for s, _ in place.schemas
                for kw in ("additionalProperties", "unevaluatedProperties")
            )  # fmt: skip
        return hit

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
        self._tracks = [JsonTrack(checked.plan, checked.keys)]
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
    def _after(self, data: bytes, token: int | None = None) -> JsonTrack | None:
        """The track after ``data`` (the bytes of ``token`` when given), or None when it completes a
        duplicate item or member name, or leaves a name to write where every name left is written
        already."""
        t = self._tracks[-1].clone()
        try:
            t.feed(data, self._bytes)
        except Dup:
            return None
        return t if self._name_may_come(t, data, token) else None

    def _name_may_come(self, t: JsonTrack, data: bytes, token: int | None) -> bool:
        """Whether, in an object whose names must not repeat, some name not written yet can still
        be written (checked where a name is due or begun and one was written before)."""
        top = t.stack[-1] if t.stack else None
        if top is None or top[0] or not top[9]:
            return True
        lex = t.lex
        if lex is None:
            if not top[10]:
                return True
            raw = None
        elif lex[0] == "s" and lex[3]:
            if lex[2]:
                return True  # inside an escape: checked at the next token
            raw = _text(lex[1] + 1, t.pos, self._bytes, data, self._tracks[-1].pos)
        else:
            return True
        compiled = self.checked.compiled
        if token is not None:
            state = compiled.next_state(self.inner.state, token)
        else:
            state = compiled.dfa.walk(self.inner.state, data) if data else self.inner.state
        if state < 0:
            return True  # the grammar refuses the bytes anyway
        return self._names_left(state, top[8], top[9], raw)

    def _names_left(self, state: int, place, written: frozenset, raw: bytes | None, fresh_only: bool = False) -> bool:
        """From grammar ``state`` (a name due when ``raw`` is None, else begun with bytes ``raw``),
        whether the grammar accepts the rest of a name not in ``written``: a declared one, or a
        fresh undeclared one standing for all of them."""
        memo = self.checked.name_memo
        key = (state, id(place), written, raw, fresh_only)
        hit = memo.get(key)
        if hit is not None:
            return hit
        if raw is None:
            lead, prefix = b'"', ""
        else:
            try:
                lead, prefix = b"", json.loads(b'"' + raw + b'"')
            except ValueError:  # cut inside a character: checked at the next token
                return True
        fresh = prefix + "~q"
        while fresh in place.name_set or fresh in written:
            fresh += "q"
        names = [fresh]
        if not fresh_only:
            names += [n for n in place.names if n not in written and n.startswith(prefix)]
        walk = self.checked.compiled.dfa.walk
        ok = any(walk(state, lead + json.dumps(n[len(prefix) :], ensure_ascii=False)[1:].encode()) >= 0 for n in names)
        if len(memo) > 50_000:
            memo.clear()
        memo[key] = ok
        return ok

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
        if not track.stack[d][0]:
            sim = self._name_candidates(track, feats, words, need, out)
        elif need > 0:
            pick = words & feats.closer
            if track.lex is not None and track.lex[0] == "s":  # a string ends at a quote first
                pick &= feats.quote
            sim = _ids(pick)
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
            if self._after(tokens[t], t) is None:
                out.append(t)
        return out

    def _accepted_names(self, state: int, place) -> frozenset:
        """The names (declared ones, and "" for any fresh one) the grammar accepts from ``state``,
        where a name is due."""
        key = (state, id(place), "accepted")
        hit = self.checked.name_memo.get(key)
        if hit is None:
            walk = self.checked.compiled.dfa.walk
            fresh = "~q"
            while fresh in place.name_set:
                fresh += "q"
            names = [n for n in place.names if walk(state, json.dumps(n, ensure_ascii=False).encode()) >= 0]
            if walk(state, json.dumps(fresh).encode()) >= 0:
                names.append("")
            hit = self.checked.name_memo[key] = frozenset(names)
        return hit

    def _name_candidates(
        self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray, need: int, out: list[int]
    ) -> np.ndarray:
        """The allowed tokens to simulate for the innermost object whose names must not repeat (those
        refused without simulating go to ``out``). A name is decided where its closing quote is, a
        dead end can begin at a comma or inside a name; so: tokens with closing brackets, commas, or
        a quote where a name is begun or due. Inside a name, tokens that close it and decide nothing
        more are looked up by the text before their quote; in an object where no fresh name fits
        (closed), every token in a name is simulated (few: the grammar allows only name prefixes)."""
        lex, top = track.lex, track.stack[-1]
        if need > 0:  # back in the object only past ``need`` closing brackets (and a quote, from a string)
            pick = words & feats.closer
            if lex is not None and lex[0] == "s":
                pick &= feats.quote
            if not any(f[2] or f[9] is not None for f in track.stack[: len(track.stack) - 1 - need]):
                pick &= feats.comma | feats.quotes2  # then a comma or a whole name decides
            sim = _ids(pick)
            return sim[feats.closers[sim] >= need]
        written = top[9]
        if lex is None and top[7] is None and (top[10] or not written) and top[11] is None and top[8].conjunctive:
            top[11] = self._accepted_names(self.inner.state, top[8])  # a name is due: the same at every member
        if self.checked.names_open(top[8]) or (top[11] is not None and top[11] - written):
            # a fresh name always fits, or a name not written yet: only whole names decide
            whole = feats.quotes2 if lex is None and top[10] else feats.quotes2 & feats.comma
            if any(f[2] or f[9] is not None for f in track.stack[:-1]):
                whole = whole | feats.closer  # closing this object can decide in an outer one
            if lex is None or lex[0] != "s" or not lex[3]:
                return _ids(words & whole & feats.quote if lex is not None and lex[0] == "s" else words & whole)
        decide = feats.comma | feats.closer
        if lex is None:
            if not top[10]:
                return _ids(words & decide)
            if self._names_left(self.inner.state, top[8], written, None, fresh_only=True):
                return _ids(words & (decide | feats.quotes2))  # a name can be done within the token
            return _ids(words & (decide | feats.quote))
        if lex[0] != "s":
            return _ids(words & decide)
        if not lex[3]:  # a string value: it ends at a quote, a decision needs a comma or bracket after
            return _ids(words & feats.quote & decide)
        raw = bytes(self._bytes[lex[1] + 1 :])
        try:
            so_far = None if lex[2] else json.loads(b'"' + raw + b'"')
        except ValueError:
            so_far = None
        if so_far is None:  # inside an escape or a character
            return _ids(words & feats.quote)
        if written and not self.checked.names_open(top[8]):
            if top[11] is not None and "" not in top[11]:  # closed, its names known: no simulation
                out += self._stuck_in_name(top[11] - written, so_far, words, feats)
            elif not self._names_left(self.inner.state, top[8], written, raw, fresh_only=True):
                return _ids(words)
        for name in written:
            if name.startswith(so_far):
                spelled = json.dumps(name[len(so_far) :], ensure_ascii=False)[1:-1].encode()
                out += [t for t in feats.name_close.get(spelled, ()) if (int(words[t >> 5]) >> (t & 31)) & 1]
        return _ids(words & feats.name_complex)

    def _stuck_in_name(self, left: frozenset, so_far: str, words: np.ndarray, feats: _VocabFeatures) -> list[int]:
        """Allowed tokens without a quote that continue the name ``so_far`` where no name in ``left``
        (the names not yet written) can follow."""
        rests = [n[len(so_far) :] for n in left if n.startswith(so_far)]
        tokens = self.checked.compiled.vocabulary.tokens
        stuck = []
        for t in _ids(words & ~feats.quote).tolist():
            data = tokens[t]
            try:
                text = None if b"\\" in data else data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is None:  # an escape or part of a character: simulated
                if self._after(data, t) is None:
                    stuck.append(t)
            elif not any(r.startswith(text) for r in rests):
                stuck.append(t)
        return stuck

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
