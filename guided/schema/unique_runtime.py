"""Run-time checks no grammar holds: unique array items and unique member names.

``uniqueItems``: the matcher refuses any token completing an array item equal, as a JSON value, to
an earlier item of the same array (``1`` and ``1.0`` are one value, objects are equal whatever their
member order, strings whatever their escapes).

Member names: wherever the grammar may write a name twice (objects that take undeclared names,
schema-free values, and the "bag" places of ``key_order="any"``, where declared properties past what
a permutation automaton holds come in any order with repeats), the matcher refuses a token
completing a name already written in that object, so every output parses to one value. So that the
refusal never leaves the generation without a way on, a token that starts or continues a name (or
writes the comma before one) is allowed only while some name not yet written can still follow: a
declared one, or a fresh undeclared one (at bag places every undeclared name is alike; elsewhere
the grammar is searched along the written names' spellings), asked of the grammar by walking its
automaton from the state after the token. (A name cut inside an escape is not checked until the
next token; one cut inside a multi-byte character is compared by its bytes.) That holds for a token
that begins a name too, after a comma or closing brackets: one that stops inside a name only
written names begin with is a dead end, even where names not written are known to fit
(``_begun_written``).

Required names (``KeyOrder.matcher_required``): where the grammar's bag leaves them to the matcher,
a token that closes an object before each of its required names is written is refused: those whose
first structural bytes (after the value in progress) are enough closing brackets to reach the
innermost object missing one are refused by that shape (``leading_closers``); the others with enough
closing brackets, and those that open and close an object in the token (``brace_pairs``), are
simulated. The grammar takes every such name at every member there, so a missing one can always be
written next.

What the checks read of the tracker's state is numbered once per track, and refusals and the track
after a token are memoised per grammar by (grammar state, that number[, bytes]): tracks are not
changed once pushed, so one serves every matcher of the grammar.

A ``JsonTrack`` follows the accepted bytes as JSON (the grammar guarantees they are): the stack of
open arrays and objects, each with the formula of its place (``unique_plan``), the member name or
item index being written, and for arrays that must be unique the set of their completed items.
An item is compared when its value is decided: a string at its closing quote, a number or literal
at the byte after it (a literal already at its first letter, an integer already at ``0`` or at a
``.``), an object or array at its closing bracket. The plan only allows item kinds where a prefix
that is not decided can still end as a new value, so refusing these tokens never leaves the
generation without a way forward.

A "closed" item (an object of declared members only, each of an open kind) is decided earlier: once
every declared name is written, where its last member's value is decided (as an item would be),
since only the closing brace can follow; that value could have gone on another way instead.

Strings that may run out ("bounded" items: ``maxLength``, ``uuid``, ``^(a|b)$``): a token that
leaves a string item, or the comma before a new item, is allowed only while the grammar accepts an
ending that no earlier item has, found by a search along the earlier items' spellings
(``_diverges``, as for member names).

Masks: the grammar's mask, then only the allowed tokens that could decide an item are simulated
(by which bytes they contain; in a string item, only tokens whose text before the quote finishes
an earlier item, plus the few with more after the quote).
"""

from __future__ import annotations

import heapq
import json
import re
import threading
import weakref

import numpy as np

from guided.errors import GrammarError, LimitError
from guided.grammar import EMPTY_ID, Completion, Matcher, byte_of_class, spell
from guided.grammar.languages import interned
from guided.grammar.regex_ast import alt
from guided.schema.facts import json_value_key, number_key
from guided.schema.hostnames import SEPARATORS, labels_ok
from guided.schema.objects import pattern_language
from guided.schema.unique_plan import UniquePlan

__all__ = ["UniqueChecked", "UniqueMatcher", "JsonTrack", "json_value_key", "prepare"]

_WS = b" \t\r\n"
_NUM = frozenset(b"0123456789+-.eE")
_LIT = {ord("t"): True, ord("f"): False, ord("n"): None}
_LIT_TEXT = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
_CONTROL = re.compile(rb"[\x00-\x1f]")
# memo entries per checked grammar: refusals (short lists of ints, which the collector stops tracking)
_REFUSED_MEMO = 1 << 15
_SELECT_MEMO = 200_000  # entries of a checked grammar's select_memo (tokens to simulate per state and context)
_PREFIX_MEMO = 1 << 14  # texts whose prefix tokens a vocabulary's features keep (_VocabFeatures.prefix_tokens)
# entries over all checked grammars of the process in the two memos that keep tracks after a token
# (JsonTrack and its frames: containers every full pass of the garbage collector walks, ~1.5 ms per
# 1,000 entries measured): a server keeps 256 grammars, and every full pass stops every thread. Past
# the budget, every grammar's track memos are emptied (they are only shortcuts: ``_TrackMemos``); no
# grammar's can grow past it, so they need no bound of their own.
TRACK_MEMO_BUDGET = 1 << 14
_SHARED = 2  # UniqueMatcher._advance: accepted, and the track after may be shared (truthy)
_PART_IDS = 1 << 17  # numbered tracks per checked grammar (never renumbered: memo keys stay true)
# token shapes in an object whose names are checked (``UniqueMatcher._by_shape``): where a name is due (or
# a value just ended), a quote (after a comma) and the rest; in a string value or a scalar, its rest, a
# comma and maybe a quote and the rest
_DUE_SHAPE = re.compile(rb'(?P<pre>)[ \t\r\n]*,?[ \t\r\n]*"(?P<name>.*)', re.S)
_STRING_VALUE_SHAPE = re.compile(rb'(?P<pre>[^"\\]*)"[ \t\r\n]*,[ \t\r\n]*(?:"(?P<name>.*))?', re.S)
_SCALAR_SHAPE = re.compile(rb'(?P<pre>[0-9a-zA-Z.+-]*)[ \t\r\n]*,[ \t\r\n]*(?:"(?P<name>.*))?', re.S)
# where a member's value is due: a whole value (a literal, a number, a string without escapes, an empty
# object or array), maybe after the colon, then whitespace (``end``: the value ended) or a comma and a
# name begun
_VALUE_SHAPE = re.compile(rb'[ \t\r\n]*(?P<pre>:?[ \t\r\n]*(?:\{\}|\[\]|true|false|null|-?[0-9][0-9.eE+-]*|"[^"\\]*"))'
                          rb'(?P<end>[ \t\r\n]*,[ \t\r\n]*(?:"(?P<name>.*))?|[ \t\r\n]+)?', re.S)  # fmt: skip
# the rest of a token past a name's opening quote that ends the name and does nothing more (a colon)
_WHOLE_REST = re.compile(rb'([^"\\]*)"[ \t\r\n]*:?[ \t\r\n]*', re.S)
# in a string item: the rest of its text, its closing quote, then separators and closing brackets only
_ITEM_END_SHAPE = re.compile(rb'(?P<pre>[^"\\]*)"(?P<post>[ \t\r\n,\]}]*)', re.S)
# where an item may begin: separators, then a string item begun (its text so far, no quote after it)
_ITEM_BEGUN = re.compile(rb'[ \t\r\n,]*"([^"]*)', re.S)
_NO_IDS = np.zeros(0, dtype=np.int64)
_BRACE_PAIR = re.compile(rb"\{.*:.*\}", re.S)
# the beginning of a token before its first closing bracket, where it closes the frames on top at once:
# after a value (no lexeme), a number's or literal's rest, a string value's rest and its closing quote
# (``_VocabFeatures.leading_closers``)
_VALUE_REST = {None: re.compile(rb"[ \t\r\n]*"), "n": re.compile(rb"[0-9a-zA-Z.+-]*[ \t\r\n]*"),
               "l": re.compile(rb"[a-z]*[ \t\r\n]*"), "s": re.compile(rb'[^"\\]*"[ \t\r\n]*')}  # fmt: skip
_CLOSERS_RUN = re.compile(rb"(?:[\]}][ \t\r\n]*)*")
# a token that, where a name is due or a value just ended, writes one whole name and nothing deciding after it
_WHOLE_NAME = re.compile(rb'[ \t\r\n]*,?[ \t\r\n]*"([^"\\]*)"[^",\]}]*', re.S)


def _parse(text: bytes) -> tuple:
    return json_value_key(json.loads(text, parse_float=number_key, parse_int=number_key))


class Dup(Exception):
    """The bytes complete an item equal to an earlier one (or a host name's label its checks refuse)."""


def _check_host(raw: bytes, fmt: str) -> None:
    """Raise Dup unless ``raw`` (a JSON string's text up to a label's end: a separator or the
    closing quote) holds labels a name of format ``fmt`` may have (``hostnames.labels_ok``). Only a
    name with an A-label (a label with "--" in its 3rd and 4th places) or a U-label can fail:
    others pass unread."""
    if b"--" not in raw and b"\\" not in raw and (fmt == "hostname" or raw.isascii()):
        return
    text = _decoded(raw)
    if text is not None and not labels_ok(text.split(".") if fmt == "hostname" else _IDN_SPLIT.split(text)):
        raise Dup


_IDN_SPLIT = re.compile(f"[{SEPARATORS}]")


class _ObjectEnd(Exception):
    """A JSON object inside other text ended (``JsonTrack.opener``) just before byte ``at``."""

    def __init__(self, at: int):
        self.at = at


def _opener_step(opener: bytes, matched: int, b: int) -> int:
    """How much of ``opener`` the text ends with after byte ``b``, given it ended with ``matched``
    bytes of it before (the longest such prefix; openers are a few bytes, so searched directly)."""
    if opener[matched] == b:
        return matched + 1
    text = opener[:matched] + bytes((b,))
    for k in range(min(matched, len(opener) - 1), 0, -1):
        if text.endswith(opener[:k]):
            return k
    return 0


class JsonTrack:
    """Incremental JSON reader for one sequence (see the module docstring). ``feed`` raises Dup."""

    __slots__ = ("plan", "keys", "mode", "stack", "lex", "root_done", "part", "depth", "noted", "opener", "scan")

    # frame: [is_array, formula, unique, items, item_start, index, item_kind, member name,
    #         key-order place, names written (a frozenset where they must be unique, else None),
    #         a comma was written and the next name not started, names the grammar accepts here or None,
    #         a "closed" item's declared names (else None), the names written in it]
    def __init__(self, plan: UniquePlan | None, keys=None, mode: tuple[str, bool] = ("any", False),
                 opener: bytes | None = None):  # fmt: skip
        self.plan = plan
        self.keys = keys  # the root's KeyOrder place, or None when no object checks its names
        self.mode = mode  # (key_order, strict): which places check names (KeyOrder.checks_names)
        # JSON inside other text (tool calls): each JSON object begins at the first "{" of ``opener``
        # and ends with its closing bracket; ``scan``: opener bytes matched outside them, or -1 inside
        self.opener = opener
        self.scan = -1 if opener is None else 0
        self.stack: list[list] = []
        self.lex: list | None = None  # ["s", start, escape, is_key] | ["n"|"l", start]
        self.root_done = False
        self.part = None  # UniqueMatcher._part, once computed (tracks do not change once pushed)
        self.depth = None  # unique_depth(), once computed
        self.noted = False  # UniqueMatcher._note_accepted ran

    def clone(self) -> JsonTrack:
        t = JsonTrack.__new__(JsonTrack)
        t.plan, t.keys, t.mode, t.root_done = self.plan, self.keys, self.mode, self.root_done
        t.opener, t.scan = self.opener, self.scan
        t.part = t.depth = None
        t.noted = False
        # the frames below the top are shared (a track writes only to its top frame; a frame that
        # becomes the top again, when the one above it closes, is copied then: ``_feed``)
        t.stack = self.stack.copy()
        if t.stack:
            t.stack[-1] = t.stack[-1].copy()
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
        if self.opener is None:
            self._feed(data, past)
            return
        i, opener = 0, self.opener
        while i < len(data):
            if self.scan < 0:  # inside a JSON object: read up to its end
                try:
                    self._feed(data[i:], bytes(past) + data[:i] if i else past)
                    return
                except _ObjectEnd as end:
                    i = end.at - len(past)
                    self.scan, self.stack, self.lex, self.root_done = 0, [], None, False
                    continue
            b = data[i]
            i += 1
            self.scan = _opener_step(opener, self.scan, b)
            if self.scan == len(opener):  # the opener is written: its object began at its "{"
                self.scan = -1
                begin = len(past) + i - len(opener) + opener.index(b"{")
                whole = bytes(past) + data
                try:
                    self._feed(whole[begin : len(past) + i], whole[:begin])
                except _ObjectEnd:  # (an opener holds no whole object)
                    raise ValueError("internal: a tool-call opener closes its JSON object") from None

    def _feed(self, data: bytes, past: bytes) -> None:
        base = len(past)
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
                        if len(lex) > 4 and not lex[3] and (b == 0x2E or b in _SEPARATOR_LAST):
                            self._label_end(lex, p, past, data, base)  # a label of a checked host name may end
                        continue
                    self.lex = None
                    if len(lex) > 4 and not lex[3]:
                        _check_host(_text(lex[1] + 1, p, past, data, base), lex[4])
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
                if top is not None and top[9] is not None and top[8].mandatory and not top[8].matcher_required(self.mode[1]) <= top[9]:
                    raise Dup  # an object closed before a name its place requires (``KeyOrder.matcher_required``)
                self.stack.pop()
                if self.stack:  # the parent is the top again: a copy of its own (see clone)
                    self.stack[-1] = self.stack[-1].copy()
                self._value_end(p + 1, past, data, base)
                continue
            if b == 0x22 and top is not None and not top[0] and top[7] is None:
                self.lex = ["s", p, 0, True, b""]  # a member name (its text is kept: _key_text)
                top[10] = False
                continue
            self._value_start(p)
            if b == 0x22:
                self.lex = ["s", p, 0, False]
                if self.plan is not None and self.plan.hosts:
                    f = self._formula_here()
                    for fmt in self.plan.hosts:  # a host name whose labels are checked where each ends
                        if f is not None and self.plan.string_format(f, fmt) == "Y":
                            self.lex.append(fmt)
                            break
            elif b == 0x5B or b == 0x7B:
                f = self._formula_here()
                place = self._place_here()
                is_array = b == 0x5B
                unique = is_array and f is not None and self.plan.demand(f) == "Y"
                names = None if is_array or place is None or not place.checks_names(*self.mode) else frozenset()
                closed = None
                if not is_array and top is not None and top[0] and top[2] and top[6] == "closed":
                    closed = self.plan.closed_names(f)
                self.stack.append([is_array, f, unique, frozenset(), -1, 0, None, None, place, names, False, None,
                                   closed, frozenset()])  # fmt: skip
            elif b in _LIT:
                self.lex = ["l", p]
                self._decided(("z",) if b == 0x6E else ("b", _LIT[b]))
                arr = self._closed_last()
                if arr is not None:  # the last member of a closed item is decided at its first letter
                    self._check_item(arr, _text(arr[4], p, past, data, base) + _LIT_TEXT[b] + b"}")
            else:
                self.lex = ["n", p]
                self._decided_number(self.lex, p + 1, past, data, base)
        lex = self.lex
        if lex is not None and lex[0] == "s" and lex[3]:  # a name in flight keeps its text, no position
            lex[4], lex[1] = _key_text(lex, base + len(data), data, base), -1

    @staticmethod
    def _label_end(lex: list, p: int, past: bytes, data: bytes, base: int) -> None:
        """At byte ``p`` of a checked host name (a dot, or the last byte of a separator past ASCII):
        check the labels before the separator that ends there, if one does."""
        if data[p - base] == 0x2E:
            _check_host(_text(lex[1] + 1, p, past, data, base), lex[4])
        elif lex[4] == "idn-hostname":
            text = _text(lex[1] + 1, p + 1, past, data, base)
            for m in _SEPARATORS["idn-hostname"][1:]:
                if text.endswith(m):
                    _check_host(text[: -len(m)], lex[4])

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
            if self.opener is not None:
                raise _ObjectEnd(end)
            return
        top = self.stack[-1]
        if not top[0]:
            arr = self._closed_last()
            if arr is not None:  # a closed item's last member: the item is decided here
                self._check_item(arr, _text(arr[4], end, past, data, base) + b"}")
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
            name = _string_text(_key_text(lex, end - 1, data, base))
            if top[9] is not None:
                if name in top[9]:
                    raise Dup
                top[9] = top[9] | {name}
            top[7] = name
            if top[12] is not None:
                top[13] = top[13] | {name}
            return
        self._value_end(end, past, data, base)

    def _closed_last(self) -> list | None:
        """The unique array around the object on top when that object is a "closed" item whose every
        declared name is written and whose last member's value is in progress (else None): the
        value's end decides the item, nothing can follow it but the closing brace."""
        if len(self.stack) < 2:
            return None
        top = self.stack[-1]
        if top[0] or top[12] is None or top[7] is None or len(top[13]) < len(top[12]):
            return None
        return self.stack[-2]

    @staticmethod
    def _check_item(arr: list, text: bytes) -> None:
        """Raise Dup when ``text`` (a whole item of the unique array ``arr``) equals an earlier item.
        A text that is no JSON value (bytes the grammar refuses next, such as a second leading zero,
        reach here first) is no item at all: the grammar's refusal stands alone."""
        try:
            key = _parse(text)
        except ValueError:
            return
        if key in arr[3]:
            raise Dup

    def _decided(self, key: tuple) -> None:
        top = self.stack[-1] if self.stack else None
        if top is not None and top[0] and top[2] and key in top[3]:
            raise Dup

    def _decided_number(self, lex: list, end: int, past: bytes, data: bytes, base: int) -> None:
        """An integer item is decided at ``0`` (no digit may follow) and at ``.`` (only zeros may)."""
        top = self.stack[-1] if self.stack else None
        if top is None:
            return
        arr = self._closed_last()  # or the last member of a closed item, decided likewise
        if arr is not None:
            if self.plan.item_kind(self.plan.child(top[1], top[7])) != "integer":
                return
        elif not top[0] or not top[2] or top[6] != "integer":
            return
        text = _text(lex[1], end, past, data, base)
        if not (text in (b"0", b"-0") or text.endswith(b".")):
            return
        value = text.rstrip(b".")
        if arr is not None:
            self._check_item(arr, _text(arr[4], lex[1], past, data, base) + value + b"}")
        else:
            self._decided(number_key(value.decode()))


def _selection(f: _VocabFeatures, label: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tokens a context of ``UniqueMatcher._name_candidates`` simulates (see there), made once
    per vocabulary and context: (ids, their mask words, their bits). A few hundred at most but
    where a name is due or unknown, so testing each against a mask beats scanning the mask."""
    got = f.selections.get(label)
    if got is None:
        packed = _select_tokens(f, label)
        ids = _ids(packed) if np.ndim(packed) else _NO_IDS
        got = f.selections[label] = (ids, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
    return got


def _select_tokens(f: _VocabFeatures, label: tuple) -> np.ndarray:
    kind = label[0]
    if kind == "need":  # closing brackets back to the object (past a quote, from a string); then ...
        _, _, in_string, known, outer = label
        pick = f.closer & f.quote if in_string else f.closer
        if known:  # ... a comma and a whole name, or what an outer frame decides
            return pick & (f.quotes2 & f.comma | _closing(f, outer, False))
        return pick if outer is not None else pick & (f.comma | f.quotes2)  # ... a comma or a whole name
    if kind == "due":  # tokens with two quotes that are not one whole name (those are looked up)
        return f.quotes2 & ~f.whole | _closing(f, label[1], False)
    if kind == "value":  # a value, a comma, then a whole name
        return f.name_after_value | _closing(f, label[1], False)
    if kind == "unknown":  # a comma or a bracket; where a name is due, every name begun
        return f.comma | f.closer | f.quote if label[1] else f.comma | f.closer
    if kind == "string":
        _, outer, known = label
        if known:
            return f.quote & (f.quotes3 & f.comma | _closing(f, outer, True))
        return f.quote & (f.comma | f.closer)
    if kind == "quote":
        return f.quote
    _, outer, known = label  # "name": past the name's quote, a comma and a whole name
    if known:
        return f.name_complex & (f.quotes3 & f.comma | _closing(f, outer, False))
    return f.name_complex


def _closing(f: _VocabFeatures, outer: str | None, in_string: bool) -> np.ndarray | int:
    """The tokens whose closing brackets can decide in an outer frame (``_outer``), 0 for none."""
    if outer is None:
        return 0
    pick = f.closer if outer == "item" else f.closer & f.comma if outer == "name" else f.closer & f.comma & f.quotes2
    return pick & f.quote if in_string else pick


def _closing_past(f: _VocabFeatures, words: np.ndarray, lex: list | None, need: int) -> np.ndarray:
    """The allowed tokens (``words``) with at least ``need`` closing brackets (after a quote when a
    string is in progress: it ends there first)."""
    pick = words & f.closer
    if lex is not None and lex[0] == "s":
        pick &= f.quote
    ids = _ids(pick)
    return ids[f.closers[ids] >= need]


def _key_text(lex: list, end: int, data: bytes, base: int) -> bytes:
    """The raw text of the member name ``lex`` up to position ``end`` of ``data`` (which begins at
    position ``base``): its text from earlier feeds, then this one's (from its opening quote when
    that is in ``data``)."""
    return lex[4] + bytes(data[lex[1] + 1 - base if lex[1] >= 0 else 0 : end - base])


def _text(start: int, end: int, past: bytes, data: bytes, base: int) -> bytes:
    if start >= base:
        return bytes(data[start - base : end - base])
    return bytes(past[start:]) + bytes(data[: end - base])


class _VocabFeatures:
    """Per vocabulary: which bytes each token holds, as packed bitmasks (one bit per token, the
    layout of a mask row) for choosing the tokens a mask must simulate with one AND per word."""

    def __init__(self, tokens: list[bytes], special, words: int) -> None:
        n = len(tokens)
        self.tokens = tokens
        live = np.fromiter((bool(t) for t in tokens), bool, n) & ~np.asarray(special, dtype=bool)[:n]
        # byte counts per token, over all tokens at once: the loops below visit only the few tokens
        # whose bytes make them interesting (a quote, a leading digit)
        lens = np.fromiter((len(t) for t in tokens), np.int64, n)
        flat = np.frombuffer(b"".join(tokens), dtype=np.uint8)
        owner = np.repeat(np.arange(n), lens)

        def count(chars: bytes) -> np.ndarray:
            hit = np.isin(flat, np.frombuffer(chars, dtype=np.uint8))
            return np.bincount(owner[hit], minlength=n)[:n] * live

        q = count(b'"')
        self.closers = count(b"]}").astype(np.int16)
        # a brace, a colon, a closing brace: an object may open and close in the token with a member
        # inside (one whose place requires names: an empty one the grammar refuses there)
        pair = np.zeros(n, dtype=bool)
        for t in np.flatnonzero((count(b"{") > 0) & (self.closers > 0)).tolist():
            pair[t] = _BRACE_PAIR.search(tokens[t]) is not None
        quote = q > 0  # any quote
        ends = count(b",]} \t\r\n") > 0  # , ] } or whitespace: a number or literal may end there
        sep = live & (count(b", \t\r\n") == lens)  # only , and whitespace: ends a scalar, decides nothing more
        zero = count(b"0") > 0  # a 0 (an integer item "-0" is decided there)
        dot = count(b".") > 0  # a . (an integer item is decided there)
        comma = count(b",") > 0  # a , (a member name may follow in the token or after it)
        quotes2, quotes3 = q >= 2, q >= 3  # a whole member name may be in the token; a string ends, then one
        backslash = count(b"\\") > 0  # a backslash (an escape may spell a text another way)
        complex_quote = np.zeros(n, dtype=bool)  # a quote with a backslash before or more after it
        name_complex = np.zeros(n, dtype=bool)  # a quote that may end a string, not in name_close
        inner_quote = np.zeros(n, dtype=bool)  # quotes, each escaped: read inside a string, it stays there
        whole = np.zeros(n, dtype=bool)  # in whole_name
        after_value = np.zeros(n, dtype=bool)  # _name_after_value
        # after , and ws: an item that may be decided in the token (a literal at its first letter, a
        # string at its quote, a number where it ends in the token or at 0 / .)
        starts = quotes2 | (self.closers > 0)
        self.name_close: dict[str, tuple[int, ...]] = {}  # string text before the closing quote -> tokens deciding nothing after it
        self.whole_name: dict[str, tuple[int, ...]] = {}  # [ws][,][ws]"X" then nothing deciding -> by X
        self.simple_close: dict[bytes, tuple[int, ...]] = {}  # text before the first quote -> tokens whose rest is , and ws
        # text after the last quote -> tokens (a name may be begun there: ``UniqueMatcher._begun_written``)
        self.name_tail: dict[bytes, tuple[int, ...]] = {}
        tail_escape = np.zeros(n, dtype=bool)  # a backslash past the first quote: the name begun read decoded
        self.selections: dict[tuple, tuple] = {}  # _selection: context -> tokens
        heads = [t.lstrip(b" \t\r\n,")[:1] for t in tokens]
        for t in np.flatnonzero(live & ~starts).tolist():
            head = heads[t]
            if head in (b"t", b"f", b"n"):
                starts[t] = True
            elif head == b"-" or head.isdigit():
                body = tokens[t].lstrip(b" \t\r\n,")
                run = len(body) - len(body.lstrip(b"0123456789+-.eE"))
                starts[t] = run < len(body) or body.startswith((b"0", b"-0")) or b"." in body
        for t in np.flatnonzero(quote).tolist():
            data = tokens[t]
            after_value[t] = comma[t] and quotes2[t] and _name_after_value(data)
            m = _WHOLE_NAME.fullmatch(data)
            if m is not None:
                try:
                    name = m.group(1).decode("utf-8")
                except UnicodeDecodeError:
                    name = None
                if name is not None:
                    whole[t] = True
                    self.whole_name.setdefault(name, []).append(t)
            i = data.index(b'"')
            pre, rest = data[:i], data[i + 1 :]
            if b"\\" in rest:
                tail_escape[t] = True
            elif tail := data[data.rindex(b'"') + 1 :]:
                self.name_tail.setdefault(tail, []).append(t)
            if b"\\" in pre or rest.strip(b" \t\r\n,"):
                complex_quote[t] = True
            else:
                self.simple_close.setdefault(pre, []).append(t)
            closing = _closing_quote(data)  # where the token's text ends a string begun before it
            if closing is None and _string_end(data) < 0:  # its quotes are escaped: text, as in by_escaped
                inner_quote[t] = True
            elif closing is None or any(c in data[closing[1] :] for c in b",]}"):
                name_complex[t] = True
            else:
                self.name_close.setdefault(closing[0], []).append(t)
        pack = lambda a: _pack(a, words)  # noqa: E731
        self.quote, self.complex_quote = pack(quote), pack(complex_quote)
        self.closer, self.starts, self.ends, self.sep = pack(self.closers > 0), pack(starts), pack(ends), pack(sep)
        self.zero, self.dot = pack(zero), pack(dot)
        self.comma, self.quotes2, self.quotes3 = pack(comma), pack(quotes2), pack(quotes3)
        self.name_complex, self.whole = pack(name_complex), pack(whole)
        self.name_after_value, self.inner_quote = pack(after_value), pack(inner_quote)
        self.brace_pairs = np.flatnonzero(pair)  # (few: a token holding a whole object is rare)
        self.brace_at, self.brace_bits = self.brace_pairs >> 5, np.uint32(1) << (self.brace_pairs & 31).astype(np.uint32)
        self._live, self._words = live, words  # for host_tables (and quote_counts)
        self._host_tables: dict[str, _HostTables] = {}

        # a token's bytes, when they hold no quote -> the tokens: built here, with the other tables
        # (built on first use, it cost one mask ~80 ms with a 128k vocabulary)
        self.by_text: dict[bytes, tuple[int, ...]] = {}
        for t in np.flatnonzero(live & ~quote).tolist():
            self.by_text.setdefault(tokens[t], []).append(t)
        # a token with a backslash and no quote but escaped ones, read where a string's text so far is
        # whole: the text it adds, decoded -> the tokens (``_prefix_tokens``). A token that ends inside
        # an escape or a character adds no whole text and decides nothing (the check waits for the next
        # token); one that spells a UTF-16 surrogate (half of a pair another token may finish) is simulated.
        self.by_escaped: dict[bytes, tuple[int, ...]] = {}
        odd_escape = np.zeros(n, dtype=bool)
        for t in np.flatnonzero(live & (~quote | inner_quote) & backslash).tolist():
            text = _decoded(tokens[t])
            if text is None:
                continue
            try:
                self.by_escaped.setdefault(text.encode("utf-8"), []).append(t)
            except UnicodeEncodeError:  # a surrogate
                odd_escape[t] = True
        self.odd_escape = pack(odd_escape)
        # the token lists as tuples: ~130k of them live as long as the process, and the collector
        # stops tracking tuples of ints (lists it would walk in every full collection)
        self.tail_escape, self.escape_tail, self.quote_counts = np.flatnonzero(tail_escape), tail_escape, q
        for table in (self.name_close, self.whole_name, self.simple_close, self.by_text, self.by_escaped, self.name_tail):
            table.update((k, tuple(v)) for k, v in table.items())
        self._prefix_memo: dict[bytes, np.ndarray] = {}  # prefix_tokens
        self._begun: dict[int, bytes | None] = {}  # item_begun
        self._plain: dict[int, bool] = {}  # plain
        # of the tokens with a closing bracket (~15 ms for Llama 3: here, not in a mask): how many they
        # write outside strings, read from outside a string or inside one (not inside an escape); and
        # how many they write one after another (whitespace between) once the value in progress ends,
        # read after a value (None) or inside a number, literal or string value (``_VALUE_REST``): the
        # frames they close at once
        ids = np.flatnonzero(self.closers).tolist()
        self.structural_closers = {inside: _counts(tokens, ids, n, lambda t, i=inside: _structural(t, i))
                                   for inside in (False, True)}  # fmt: skip
        self.leading_closers = {kind: _counts(tokens, ids, n, lambda t, r=rest: _leading(t, r))
                                for kind, rest in _VALUE_REST.items()}  # fmt: skip

    def host_tables(self, fmt: str) -> _HostTables:
        """The tables of host name checks for ``fmt`` (built on first use)."""
        got = self._host_tables.get(fmt)
        if got is None:
            got = self._host_tables[fmt] = _HostTables(self.tokens, self._live, self.quote_counts, self._words, fmt)
        return got

    def plain(self, t: int) -> bool:
        """``_plain`` of token t, memoised per token (asked at every mask inside a string item)."""
        got = self._plain.get(t)
        if got is None:
            got = self._plain[t] = _plain(self.tokens[t])
        return got

    def item_begun(self, t: int) -> bytes | None:
        """The text a token with a quote writes after separators and that quote, where an item may
        begin (``_ITEM_BEGUN``: no quote after it), or None; memoised per token."""
        got = self._begun.get(t, _UNSET)
        if got is _UNSET:
            m = _ITEM_BEGUN.fullmatch(self.tokens[t])
            got = self._begun[t] = None if m is None else m.group(1)
        return got

    def prefix_tokens(self, text: bytes) -> np.ndarray:
        """The tokens of ``by_text`` and ``by_escaped`` whose text is a non-empty prefix of ``text``,
        memoised: the rests of earlier items recur from mask to mask (a whole item where the next
        begins, the same rest after the same head)."""
        got = self._prefix_memo.get(text)
        if got is None:
            by_text, by_escaped = self.by_text, self.by_escaped
            got = np.fromiter((t for k in range(1, len(text) + 1) for table in (by_text, by_escaped)
                               for t in table.get(text[:k], ())), dtype=np.int64)  # fmt: skip
            _put(self._prefix_memo, text, got, _PREFIX_MEMO)
        return got


class _HostTables:
    """Per vocabulary and host format (``hostname`` or ``idn-hostname``: its label separators),
    packed bitmasks of the tokens ``UniqueMatcher._refusals`` asks about:

    * ``label_ends[k]``: tokens that may end a label after k quotes (a separator or a quote past k);
    * ``one_end``: tokens with one label end (a separator with none, no quote and no backslash after
      it, or a quote with no quote after it) and no backslash before it. Each is refused exactly when
      the name's text so far plus the token's text before that end is: ``end_texts``, numbered,
      and ``end_text_of`` each token's number (-1: not one of these);
    * ``risky``: tokens that can make a name's label one ``_check_host`` reads: with "--", a
      backslash, a leading hyphen (after a trailing one), and for idn-hostname, a byte past ASCII.
    """

    def __init__(self, tokens: list[bytes], live: np.ndarray, quotes: np.ndarray, words: int, fmt: str) -> None:
        n = len(tokens)
        seps = _SEPARATORS[fmt]
        # every token's bytes at once (a Python loop over the whole vocabulary cost the first mask
        # ~0.4 s): only tokens holding a quote or a separator's last byte are read one by one
        lens = np.fromiter((len(t) for t in tokens), np.int64, n)
        flat = np.frombuffer(b"".join(tokens), dtype=np.uint8)
        owner = np.repeat(np.arange(n), lens)

        def holding(hit: np.ndarray) -> np.ndarray:
            return live & (np.bincount(owner[hit], minlength=n)[:n] > 0)

        has_end = np.zeros(n, dtype=bool)
        self.end_text_of = np.full(n, -1, dtype=np.int64)
        numbers: dict[bytes, int] = {}
        for t in np.flatnonzero(holding(np.isin(flat, [0x22, *(m[-1] for m in seps)]))).tolist():
            data = tokens[t]
            found = [(i, len(m)) for m in (b'"', *seps) if (i := data.find(m)) >= 0]
            if not found:
                continue
            has_end[t] = True
            i, size = min(found)
            pre, rest = data[:i], data[i + size :]
            if b"\\" in pre or b'"' in rest or (data[i] != 0x22 and (b"\\" in rest or any(m in rest for m in seps))):
                continue
            self.end_text_of[t] = numbers.setdefault(pre, len(numbers))
        self.end_texts = list(numbers)
        pack = lambda a: _pack(a, words)  # noqa: E731
        self.label_ends = [pack((quotes > k) | ((quotes == k) & has_end)) for k in range(5)]
        self.one_end = pack(self.end_text_of >= 0)
        dash = flat == 0x2D
        starts = np.cumsum(lens) - lens  # each token's first byte in flat (tokens are never empty where live)
        risky = (dash[:-1] & dash[1:] & (owner[:-1] == owner[1:]))  # "--" inside one token
        risky = np.append(risky, False) | (flat == 0x5C) | (flat >= 0x80 if fmt == "idn-hostname" else False)
        first_dash = np.zeros(n, dtype=bool)
        first_dash[lens > 0] = dash[starts[lens > 0]]
        self.risky = pack(holding(risky) | (live & first_dash))


# label separators of each host format, and (idn-hostname) what a text may end with inside one
_SEPARATORS = {"hostname": (b".",), "idn-hostname": tuple(c.encode() for c in SEPARATORS)}
_SEPARATOR_HEADS = tuple({m[:k] for m in _SEPARATORS["idn-hostname"] for k in range(1, len(m))})
_SEPARATOR_LAST = frozenset(m[-1] for m in _SEPARATORS["idn-hostname"][1:])


def spelling_trie(rests) -> tuple[int, dict]:
    """The trie of byte strings ``rests``, for ``_diverges``: a node is (the 256-bit mask of the bytes
    that continue some string, {byte: child}); a child with no children is where strings end. Built
    in place, then frozen: inserting each string with ``_trie_with`` copies its path every time."""
    root: dict = {}
    for r in rests:
        node = root
        for b in r:
            node = node.setdefault(b, {})

    def freeze(node: dict) -> tuple[int, dict]:
        mask = 0
        for b in node:
            mask |= 1 << b
        return mask, {b: freeze(child) for b, child in node.items()}

    return freeze(root)


def _trie_with(trie: tuple[int, dict], word: bytes) -> tuple[int, dict]:
    """``trie`` with ``word`` added: a new path down to it, the other subtrees shared (unchanged)."""
    if not word:
        return trie
    mask, children = trie
    b = word[0]
    children = dict(children)
    children[b] = _trie_with(children.get(b, _EMPTY_TRIE), word[1:])
    return mask | 1 << b, children


_EMPTY_TRIE: tuple[int, dict] = (0, {})


def _descend(trie: tuple[int, dict], data: bytes) -> tuple[int, dict] | None:
    """The node of ``trie`` after the bytes ``data``, or None when no string begins so."""
    for b in data:
        trie = trie[1].get(b)
        if trie is None:
            return None
    return trie


_BACKSLASH = 1 << 0x5C


def _spelled(text: str) -> bytes:
    """The canonical spelling of a string's text between its quotes (JSON's own escapes, other
    characters as UTF-8): how the tries of ``_trie_of`` hold earlier items and written names."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


def _item_text(key: tuple) -> str | None:
    """The text of an earlier item's key when it is a string (UniqueMatcher._trie_of)."""
    return key[1] if key[0] == "s" else None


def _name_text(name: str) -> str:
    return name


_SHORT_ESCAPES = {ord('"'): '"', 0x5C: "\\", ord("/"): "/", ord("b"): "\b", ord("f"): "\f", ord("n"): "\n",
                  ord("r"): "\r", ord("t"): "\t"}  # fmt: skip
_HEX = b"0123456789abcdefABCDEF"
_MAX_ESCAPES = 64  # \u escapes followed at one point at most (past them: not followed)


def _escapes(dfa, s: int) -> list[tuple[bytes, int]] | None:
    """The escapes the grammar takes from state ``s`` (a backslash next), each as (the canonical
    spelling of the character it decodes to, as the tries of ``_trie_of`` hold it; the grammar's state
    after the escape); None when it takes more than ``_MAX_ESCAPES`` of the ``\\u`` kind (a string
    open to any character: some byte off the earlier strings is found before this is asked). A
    ``\\u`` escape of half a surrogate pair is left out: that half spells no character alone."""
    t = dfa.walk(s, b"\\")
    if t < 0:
        return []
    out = []
    for b, ch in _SHORT_ESCAPES.items():
        after = dfa.walk(t, bytes((b,)))
        if after >= 0:
            out.append((_spelled(ch), after))
    u = dfa.walk(t, b"u")
    level = [(0, u)] if u >= 0 else []
    for _ in range(4):
        deeper = []
        for code, st in level:
            for h in _HEX:
                after = dfa.walk(st, bytes((h,)))
                if after >= 0:
                    deeper.append((code * 16 + int(chr(h), 16), after))
                    if len(deeper) > _MAX_ESCAPES:
                        return None
        level = deeper
    for code, after in level:
        if not 0xD800 <= code <= 0xDFFF:
            out.append((_spelled(chr(code)), after))
    return out


def _diverges(dfa, s: int, trie: tuple[int, dict], memo: dict, rows: dict) -> bool:
    """Whether, from the live automaton state ``s`` inside a name, some byte path leaves every string of
    ``trie`` (``spelling_trie`` of the spellings that end written names, each with its closing quote,
    or the node of those that begin with the text so far): then some completion of the name is not
    written. ``memo``: answers by (state, id of a trie node) with the node (kept alive, so its id
    stays its own): a node's strings never change, and tries built from others share their
    unchanged subtrees, so the answers serve every trie holding the node; ``rows``: the bytes each
    state allows, as 256-bit masks (a state's row never changes once built)."""
    mask, children = trie
    if not children:
        return True
    hit = memo.get((s, id(trie)))
    if hit is not None and hit[0] is trie:
        return hit[1]
    allowed = rows.get(s)
    if allowed is None:
        dfa.materialize(s)
        allowed = int.from_bytes(np.packbits(dfa.trans[s][dfa.class_map] >= 0, bitorder="little").tobytes(), "little")
        if len(rows) > 200_000:
            rows.clear()
        rows[s] = allowed
    # a byte allowed off every string (but a backslash, whose escape may spell one another way)
    found = bool(allowed & ~mask & ~_BACKSLASH)
    decoded = False  # whether the escapes the grammar takes here were all followed as characters
    if not found and allowed & _BACKSLASH:
        escapes = _escapes(dfa, s)
        decoded = escapes is not None
        for spelled, after in escapes or ():
            below = _descend(trie, spelled)
            if below is None or below[1] and _diverges(dfa, after, below, memo, rows):
                found = True
                break
    if not found:
        for b, child in children.items():  # a child without children: the byte (the quote) ends a string
            if b == 0x5C and decoded:  # the strings' escaped characters: followed as characters above
                continue
            if child[1] and allowed >> b & 1 and _diverges(dfa, dfa.walk(s, bytes((b,))), child, memo, rows):
                found = True
                break
    if len(memo) > 100_000:
        memo.clear()
    memo[(s, id(trie))] = (trie, found)
    return found


def _fresh(prefix: str, place, written: frozenset) -> str:
    """A name beginning with ``prefix`` that is neither declared at ``place`` nor written."""
    name = prefix + "~q"
    while name in place.name_set or name in written:
        name += "q"
    return name


def _fresh_fit_after(pool, e: int, head: bytes) -> bool:
    """Whether no string ``head`` + ``~`` + ``q``s is in the language ``e`` of ``pool`` (at most 64 of
    them looked at: a longer cycle of derivatives answers False)."""
    try:
        for b in head + b"~":
            e = pool.deriv(e, b)
            if e == EMPTY_ID:
                return True
        seen = set()
        for _ in range(64):
            e = pool.deriv(e, 0x71)
            if pool.nullable[e]:
                return False
            if e == EMPTY_ID or e in seen:
                return True
            seen.add(e)
    except LimitError:
        pass
    return False


def _name_after_value(data: bytes) -> bool:
    """Whether a token read where a member's value is due can hold the value, a comma and a whole
    name (two quotes after a comma, past a string value's own two): a superset, to simulate."""
    body = data.lstrip(b" \t\r\n")
    if body[:1] == b'"':
        end = _closing_quote(body[1:])
        if end is None:
            return False
        body = body[1 + end[1] :]
    comma = body.find(b",")
    return comma >= 0 and body.count(b'"', comma) >= 2


def _put(memo: dict, key, value, bound: int) -> None:
    """``memo[key] = value``, emptying the memo first when it holds ``bound`` entries."""
    if len(memo) >= bound:
        memo.clear()
    memo[key] = value


class _TrackMemos:
    """The process-wide bound on the checked grammars' track memos (``step_memo``, ``advance_memo``):
    new entries are counted over all of them, and once ``TRACK_MEMO_BUDGET`` were added since the last
    flush, every live grammar's track memos are emptied. Grammars are registered weakly: one freed
    takes its memos with it (it is never kept alive here)."""

    def __init__(self) -> None:
        self.grammars: weakref.WeakSet = weakref.WeakSet()
        self.added = 0
        self.lock = threading.Lock()

    def register(self, checked) -> None:
        with self.lock:
            self.grammars.add(checked)

    def put(self, memo: dict, key, value) -> None:
        if key not in memo:
            self.added += 1  # (a lost increment between threads only delays a flush)
            if self.added > TRACK_MEMO_BUDGET:
                self.flush()
        memo[key] = value

    def flush(self) -> None:
        with self.lock:
            grammars = list(self.grammars)
            self.added = 0
        for checked in grammars:
            checked.step_memo.clear()
            checked.advance_memo.clear()

    def entries(self) -> int:
        """Entries held now, over every live checked grammar."""
        with self.lock:
            grammars = list(self.grammars)
        return sum(len(g.step_memo) + len(g.advance_memo) for g in grammars)


TRACK_MEMOS = _TrackMemos()


def _string_text(raw: bytes) -> str:
    """The text of a JSON string's bytes (between its quotes); ValueError when they are not one
    (cut inside an escape or a character, or a raw control character). Plain bytes are decoded
    directly, a tenth of ``json.loads``'s cost."""
    if b"\\" not in raw and _CONTROL.search(raw) is None:
        return raw.decode("utf-8", "surrogatepass")  # as json.loads decodes bytes; UnicodeDecodeError is a ValueError
    return json.loads(b'"' + raw + b'"')


def _plain(data: bytes) -> bool:
    """Whether a token read inside a string adds whole characters that JSON spells as themselves: no
    quote, backslash or control character, and valid UTF-8 on its own."""
    if not data or b'"' in data or b"\\" in data or _CONTROL.search(data) is not None:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decoded(raw: bytes) -> str | None:
    """The text of a JSON string's bytes so far (between its quotes), or None when they end inside an
    escape or a character."""
    try:
        return _string_text(raw)
    except ValueError:
        return None


def _counts(tokens: list[bytes], ids: list[int], n: int, count) -> np.ndarray:
    """int16 [n]: ``count(token)`` for the tokens ``ids``, 0 for the others."""
    got = np.zeros(n, dtype=np.int16)
    for t in ids:
        got[t] = count(tokens[t])
    return got


def _structural(data: bytes, inside: bool) -> int:
    """How many closing brackets ``data`` writes outside strings, read from inside one or not."""
    n, esc = 0, False
    for c in data:
        if inside:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                inside = False
        elif c == 0x22:
            inside = True
        elif c == 0x5D or c == 0x7D:
            n += 1
    return n


def _leading(data: bytes, rest: re.Pattern) -> int:
    """How many closing brackets ``data`` writes one after another once ``rest`` (the value in
    progress's end) matches its beginning; 0 where it does not."""
    m = rest.match(data)
    if m is None:
        return 0
    run = _CLOSERS_RUN.match(data, m.end())
    return data.count(b"]", run.start(), run.end()) + data.count(b"}", run.start(), run.end())


def _cut_character(raw: bytes) -> tuple[str, bytes] | None:
    """For a string's bytes so far that end inside a UTF-8 character (not inside an escape): (the
    text before that character, its bytes so far); else None."""
    for k in (1, 2, 3):
        if len(raw) >= k and raw[-k] >= 0xC2 and b"\\" not in raw[-k:]:
            text = _decoded(raw[:-k])
            if text is not None:
                return text, raw[-k:]
    return None


def _completion(part: bytes) -> str | None:
    """The first character whose UTF-8 bytes begin with ``part`` (a character's bytes so far), if any."""
    size = 2 if part[0] < 0xE0 else 3 if part[0] < 0xF0 else 4
    for b in range(0x80, 0xC0):
        data = part + bytes([b]) * (size - len(part))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def _string_end(data: bytes) -> int:
    """For a token read inside a string (not inside an escape): the index of the quote that ends the
    string, or -1."""
    i = 0
    while i < len(data):
        c = data[i]
        if c == 0x5C:
            i += 6 if data[i + 1 : i + 2] == b"u" else 2
        elif c == 0x22:
            return i
        else:
            i += 1
    return -1


def _closing_quote(data: bytes) -> tuple[str, int] | None:
    """For a token read inside a string (not inside an escape): the text it adds before the quote
    that ends the string, decoded, and the index after that quote; None without such a quote or
    when the text before it is not whole (escapes and characters cut)."""
    i = _string_end(data)
    if i < 0:
        return None
    try:
        return json.loads(b'"' + data[:i] + b'"'), i + 1
    except ValueError:
        return None


def _pack(flags: np.ndarray, words: int) -> np.ndarray:
    bits = np.zeros(words * 32, dtype=bool)
    bits[: len(flags)] = flags
    return np.packbits(bits, bitorder="little").view(np.uint32)


def _ids(words: np.ndarray) -> np.ndarray:
    """Token ids of the set bits of packed uint32 words (only the nonzero words are unpacked; most
    masks here select none, and counting is the cheapest way to see it)."""
    if not np.count_nonzero(words):
        return _NO_IDS
    if len(words) % 2 == 0 and words.flags.c_contiguous:  # scanned as half as many uint64 words
        wide = words.view(np.uint64)
        nz = wide.nonzero()[0]
        bits = np.unpackbits(wide[nz].view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        r, c = np.nonzero(bits)
        return nz[r] * 64 + c
    nz = np.flatnonzero(words)
    bits = np.unpackbits(words[nz].view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    r, c = np.nonzero(bits)
    return nz[r] * 32 + c


_NO_IDS = np.zeros(0, dtype=np.int64)
_UNSET = object()


_FEATURES: dict[str, _VocabFeatures] = {}
_FEATURES_LOCK = threading.Lock()


def prepare(vocabulary) -> None:
    """Build the per-vocabulary tables of the run-time checks now (~0.6 s for Llama 3's 128k tokens on
    one core) instead of in the first mask that needs them."""
    _features(vocabulary)


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

    def __init__(self, compiled, plan: UniquePlan | None, keys=None, strict: bool = False, key_order: str = "any",
                 opener: bytes | None = None, max_ws: int = 0):  # fmt: skip
        self.compiled = compiled
        self.plan = plan
        # the whitespace the grammar takes after "[" or "{" before a first element (flexible
        # whitespace's max_ws; 0: none, or no check): an empty one takes that much again before
        # its closing bracket, which is then the only way on (UniqueMatcher._empty_run_ok)
        self.max_ws = max_ws
        self.keys = keys
        self.opener = opener  # JsonTrack.opener: the JSON is objects inside other text (tool calls)
        self.key_order = key_order
        self._outside: bool | None = None  # checks_outside, once asked
        self._requires: bool | None = None  # requires_names, once asked
        self.name_memo: dict[tuple, bool] = {}  # (state, place, names written, prefix) -> a name may come
        self.select_memo: dict[tuple, np.ndarray] = {}  # (state, context) -> tokens to simulate
        self.alike_memo: dict[int, bool] = {}  # id(KeyOrder place) -> UniqueMatcher._alike (places live as long as keys)
        self.fresh_memo: dict = {}  # UniqueMatcher._fresh_after and _pattern_union, by place
        self.part_ids: dict[tuple, int] = {}  # UniqueMatcher._part: what the checks read of a track -> its number
        # sets of names (written, accepted) -> a number, for the memo keys above: keys of ints, strings
        # and places' ids are not tracked by the garbage collector (keys holding the sets would be,
        # each walked by every full collection while the grammar lives)
        self.name_set_ids: dict[frozenset, int] = {}
        self.refused_memo: dict[tuple, list[int]] = {}  # UniqueMatcher._refusal_key -> tokens refused
        self.advance_memo: dict[tuple, JsonTrack | bool] = {}  # (state, bytes, track number) -> track after or False
        # UniqueMatcher.accept_token's shortcut: (state, token, id(track), noted) -> (the grammar's state
        # after, the track after, the token's bytes, the track: kept alive, so that its id stays its own)
        self.step_memo: dict[tuple, tuple] = {}
        self.allowed_rows: dict[int, int] = {}  # grammar state -> the bytes it allows (_diverges)
        self.strict = strict
        self.hosts = plan.hosts if plan is not None else ()  # formats whose names' labels are checked (JsonTrack)
        TRACK_MEMOS.register(self)  # step_memo and advance_memo: bounded over the process too

    @staticmethod
    def shared(compiled, key, make):
        """The checked grammar kept on ``compiled`` for ``key`` (``make()`` once: a UniqueChecked, or
        None when nothing needs checking, then ``compiled`` itself), so that its memos serve every
        request for the grammar, and it lives exactly as long as the compiler caches the grammar."""
        wrappers = compiled.__dict__.setdefault("_wrappers", {})
        if key not in wrappers:
            wrappers.setdefault(key, make())
        return wrappers[key] or compiled

    def matcher(self) -> UniqueMatcher:
        return UniqueMatcher(self.compiled.matcher(), self)

    def checks_outside(self) -> bool:
        """Whether a mask outside every checked array and object may refuse a token: one ending a
        label of a checked host name, or one that opens and closes an object (``brace_pairs``) where
        objects may have to hold required names (``KeyOrder.matcher_required``)."""
        if self._outside is None:
            self._outside = bool(self.hosts) or (self.requires_names()
                                                 and len(_features(self.compiled.vocabulary).brace_pairs) > 0)  # fmt: skip
        return self._outside

    def requires_names(self) -> bool:
        """Whether some object may have to hold names before it closes (``KeyOrder.matcher_required`` at
        a place ``mark_mandatory`` marked): else no closing token is refused for a name missing."""
        if self._requires is None:
            strict = self.strict
            self._requires = (self.keys is not None and self.key_order == "any"
                              and any(p.matcher_required(strict) for p in self.keys.mandatory_places))  # fmt: skip
        return self._requires

    def __getattr__(self, name):
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"UniqueChecked({self.compiled!r})"


class UniqueMatcher:
    """A grammar matcher with the uniqueItems check (the Matcher API)."""

    __slots__ = ("inner", "checked", "_tracks", "_bytes", "_lens", "_searches", "_answers")

    def __init__(self, inner, checked: UniqueChecked):
        self.inner = inner
        self.checked = checked
        self._tracks = [JsonTrack(checked.plan, checked.keys, (checked.key_order, checked.strict), checked.opener)]
        self._bytes = bytearray()
        self._lens = [0]
        self._searches: dict[frozenset, tuple] = {}  # _trie_of: the last few sets of earlier items or names
        self._answers: dict[tuple, tuple] = {}  # _diverges' memo over their tries

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
        m._searches, m._answers = {}, {}
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
        t = self._fed(data)
        if t is None or not self._name_may_come(t, data, token) or not self._empty_run_ok(t, data):
            return None
        return t if self._item_may_end_new(t, data, token) else None

    def _item_may_end_new(self, t: JsonTrack, data: bytes, token: int | None = None, state: int | None = None) -> bool:
        """Whether, in a string item of an array whose strings may run out ("bounded" items), the
        item can still end as a string no earlier item is: the grammar is searched along the
        earlier items' spellings only (``_diverges``). A string cut inside an escape or a
        character is checked at the next token."""
        top = t.stack[-1] if t.stack else None
        lex = t.lex
        if top is None or not top[0] or not top[2]:
            return True
        if lex is None:  # after a comma, an item must come: can one that is new?
            tail = data.rstrip(_WS) or bytes(self._bytes[-64:]).rstrip(_WS)
            if top[4] < 0 and top[3] and tail.endswith(b",") and self._next_bounded(t, -1):
                return self._new_item_fits(t, data, token, state)
            return True
        if top[6] != "bounded" or lex[0] != "s" or lex[2]:
            return True
        so_far = _decoded(_text(lex[1] + 1, len(self._bytes) + len(data), self._bytes, data, len(self._bytes)))
        if so_far is None:
            return True
        node = self._item_node(top, so_far)
        if node is None:
            return True
        return self._ends_new(self._state_after(data, token) if state is None else state, node)

    def _item_node(self, top: list, so_far: str) -> tuple[int, dict] | None:
        """The node of the earlier items' spellings (``_trie_of``) after the text ``so_far`` of the
        string item in progress in the unique array ``top``, or None when no earlier item begins so."""
        return _descend(self._trie_of(top[3], _item_text), _spelled(so_far))

    def _ends_new(self, state: int, node: tuple[int, dict]) -> bool:
        """Whether, from grammar ``state`` (DEAD: the grammar refuses anyway), the item can still end
        off the earlier items' spellings below ``node`` (``_diverges``)."""
        return state < 0 or _diverges(self.checked.compiled.dfa, state, node, self._answers, self.checked.allowed_rows)

    def _state_after(self, data: bytes, token: int | None) -> int:
        """The grammar state after ``data`` (the bytes of ``token`` when given), or DEAD."""
        compiled = self.checked.compiled
        if token is not None:
            return compiled.next_state(self.inner.state, token)
        return compiled.dfa.walk(self.inner.state, data) if data else self.inner.state

    def _fed(self, data: bytes) -> JsonTrack | None:
        """The track after ``data``, or None when it completes a duplicate item or member name."""
        t = self._tracks[-1].clone()
        try:
            t.feed(data, self._bytes)
        except Dup:
            return None
        return t

    def _name_may_come(self, t: JsonTrack, data: bytes, token: int | None = None, state: int | None = None) -> bool:
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
            raw = lex[4]
        else:
            return True
        if top[8].names_open(self.checked.strict):
            return True  # a fresh name fits after any prefix
        if raw is None and (top[11] is not None and top[11] - top[9] or self._fresh_due(top[8])):
            return True  # the names accepted here are known, and some are not written; or fresh ones fit
        if raw is not None and self._fresh_after(top[8], raw):
            return True  # the name begun may go on to a fresh one
        state = self._state_after(data, token) if state is None else state
        if state < 0:
            return True  # the grammar refuses the bytes anyway
        return self._names_left(state, top[8], top[9], raw)

    def _names_left(self, state: int, place, written: frozenset, raw: bytes | None, fresh_only: bool = False) -> bool:
        """From grammar ``state`` (a name due when ``raw`` is None, else begun with bytes ``raw``),
        whether the grammar accepts the rest of a name not in ``written``: a declared one, or a
        fresh undeclared one standing for all of them."""
        memo = self.checked.name_memo
        key = (state, id(place), self._set_id(written), raw, fresh_only)
        hit = memo.get(key)
        if hit is not None:
            return hit
        part = b""  # the bytes of a character the name is cut inside, if any
        if raw is None:
            lead, prefix = b'"', ""
        else:
            lead, prefix = b"", _decoded(raw)
            if prefix is None:
                cut = _cut_character(raw)
                if cut is None:  # cut inside an escape: checked at the next token
                    return True
                prefix, part = cut
        head = _spelled(prefix) + part  # names compared by their spellings' bytes
        if not self._alike(place):
            ok = self._unwritten_fits(state, lead, head, written)
        else:
            char = _completion(part) if part else ""  # a fresh name goes on with some whole character
            names = [] if char is None else [_fresh(prefix + char, place, written)]
            if not fresh_only:
                names += [n for n in place.names if n not in written and n.startswith(prefix)]
            dfa = self.checked.compiled.dfa
            ok = any(sp.startswith(head) and dfa.reaches(state, lead + sp[len(head) :] + b'"') for sp in map(_spelled, names))
        _put(memo, key, ok, 50_000)
        return ok

    def _toward_written_bytes(self, written: frozenset, cut: tuple[str, bytes]) -> bool:
        """Whether a written name's spelling begins with the bytes of a name cut inside a character."""
        head = _spelled(cut[0]) + cut[1]
        return any(_spelled(w).startswith(head) for w in written)

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
            begun = self._begun_written(track, feats, words, need)
            if len(begun):
                sim = np.union1d(sim, begun)
        elif need > 0:
            sim = _closing_past(feats, words, track.lex, need)
        elif track.lex is not None and track.lex[0] == "s":
            fast = self._string_closers(track, feats, words)
            if fast is None:  # inside an escape or a UTF-8 character: every token with a quote
                sim = _ids(words & feats.quote)
            else:
                sim = _ids(words & feats.complex_quote)
                out += fast
                if track.stack[d][6] == "bounded":  # and tokens that keep it an earlier item's beginning,
                    sim = np.union1d(sim, self._toward_earlier(track, feats, words))  # or end it and go on
                    if self._next_bounded(track, d, 1):
                        sim = np.union1d(sim, _ids(words & feats.quote & feats.comma))
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
            if self._next_bounded(track, d):  # strings begun in the token, commas before a new item
                sim = np.union1d(sim, self._begun_as_earlier(track.stack[d], feats, words))
                sim = np.union1d(sim, _ids(words & feats.comma))
        ids = sim.tolist()
        lex = track.lex
        in_item = d == len(track.stack) - 1 and track.stack[d][0] and lex is not None and lex[0] == "s" and not lex[2]
        if in_item and ids:
            ids = self._plain_item_steps(track, ids, out)
        if d == len(track.stack) - 1 and len(ids) > 1:
            if not track.stack[d][0]:
                ids = self._by_shape(track, ids, out)
            elif in_item:
                ids = self._item_ends_by_shape(ids, out)
        for t in ids:
            if self._after(tokens[t], t) is None:
                out.append(t)
        extra = self._closed_deciders(track, feats, words)
        run = self._empty_run(track, b"")
        if run is not None and self._closing_repeats(track, b""):  # whitespace past max_ws (_empty_run_ok)
            room = self.checked.max_ws - run
            out += [t for t in _ids(words & feats.sep & ~feats.comma).tolist() if len(tokens[t]) > room]
        if extra is not None:
            asked = set(ids).union(out)
            for t in extra.tolist():
                if t not in asked and self._after(tokens[t], t) is None:
                    out.append(t)
        if self.checked.requires_names():
            self._required_refused(track, feats, words, ids, out)
        return out

    def _required_refused(self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray, ids, out: list[int]) -> None:
        """Add to ``out`` the allowed tokens (packed ``words``) that close an object before a name its
        place requires (``KeyOrder.matcher_required``; not in ``ids``, which were simulated): those that
        write enough closing brackets outside strings to close the innermost open object that misses
        one (refused by shape where they close the object on top at once, else simulated), and those
        that open and close an object (``brace_pairs``), simulated."""
        strict, stack, lex = self.checked.strict, track.stack, track.lex
        tokens = self.checked.compiled.vocabulary.tokens
        in_string = lex is not None and lex[0] == "s"
        picks = []
        if len(feats.brace_pairs):  # the allowed ones (where the closing brace is inside a string, none closes)
            pairs = feats.brace_pairs[(words[feats.brace_at] & feats.brace_bits) != 0]
            picks.append(pairs if in_string and lex[2] else pairs[feats.structural_closers[in_string][pairs] > 0])
        for k in range(len(stack) - 1, -1, -1):
            f = stack[k]
            if f[9] is not None and f[8].mandatory and not f[8].matcher_required(strict) <= f[9]:
                need = len(stack) - k
                kind = None if lex is None else lex[0]
                # which allowed tokens close it depends on the grammar's state (its mask, ``words``), the
                # lexeme in progress and ``need`` alone: memoised
                key = ("closing", self.inner.state, kind, in_string and bool(lex[2]), in_string and bool(lex[3]), need)
                hit = self.checked.select_memo.get(key)
                if hit is None:
                    closing = _closing_past(feats, words, lex, need)
                    if not (in_string and lex[2]):  # (inside an escape: all simulated)
                        closing = closing[feats.structural_closers[in_string][closing] >= need]
                    # outside a name and an escape: a token whose first structural bytes (after the value
                    # in progress) are ``need`` closing brackets closes the object at once, refused unsimulated
                    now = []
                    if kind in _VALUE_REST and not (kind == "s" and (lex[3] or lex[2])):
                        at_once = feats.leading_closers[kind][closing] >= need
                        now, closing = closing[at_once].tolist(), closing[~at_once]
                    hit = (tuple(now), closing)
                    _put(self.checked.select_memo, key, hit, _SELECT_MEMO)
                out += hit[0]
                picks.append(hit[1])
                break
        picks = [p for p in picks if len(p)]
        if not picks:
            return
        asked = set(ids).union(out)
        for t in np.unique(np.concatenate(picks)).tolist():
            if t not in asked and self._after(tokens[t], t) is None:
                out.append(t)

    def _empty_run(self, t: JsonTrack, data: bytes) -> int | None:
        """With flexible whitespace (``max_ws``): how many whitespace characters follow the opening
        bracket of the array or object on top of track ``t`` when ``data`` (just read) leaves it
        holding nothing else yet, and is inside a unique array (else closing it repeats nothing),
        else None."""
        limit = self.checked.max_ws
        if not limit or t.lex is not None or not any(f[2] for f in t.stack[:-1]):
            return None
        tail = bytes(self._bytes[-(2 * limit + 2) :]) + data  # the grammar takes at most 2 * max_ws there
        body = tail.rstrip(_WS)
        return len(tail) - len(body) if body[-1:] == (b"[" if t.stack[-1][0] else b"{") else None

    def _empty_run_ok(self, t: JsonTrack, data: bytes) -> bool:
        """False where ``data`` leaves the track inside an empty array or object after more than
        ``max_ws`` whitespace characters while closing it would complete a duplicate item: the
        grammar then takes no first element, only more whitespace and the closing bracket, so the
        generation would have no way on."""
        run = self._empty_run(t, data)
        return run is None or run <= self.checked.max_ws or not self._closing_repeats(t, data)

    def _closing_repeats(self, t: JsonTrack, data: bytes) -> bool:
        """Whether closing the array or object on top of track ``t`` (after ``data``) completes a
        duplicate item."""
        closed = t.clone()
        try:
            closed.feed(b"]" if t.stack[-1][0] else b"}", bytes(self._bytes) + data)
        except Dup:
            return True
        return False

    @staticmethod
    def _closed_deciders(track: JsonTrack, feats: _VocabFeatures, words: np.ndarray) -> np.ndarray | None:
        """Tokens that may decide a "closed" item early (``JsonTrack._closed_last``): where its last
        member's value is in progress, or one name is left to write (a token may hold that name and
        a whole value), those that can end the value: in it, a quote, a number's or literal's end,
        a value decided at its start; below it, enough closing brackets. None when no such item."""
        stack, lex = track.stack, track.lex
        picks = []
        for k in range(1, len(stack)):
            f = stack[k]
            if f[12] is None:
                continue
            left = len(f[12]) - len(f[13])
            if not (left == 0 and f[7] is not None or left == 1 and f[7] is None and k == len(stack) - 1):
                continue
            above = len(stack) - 1 - k
            if above == 0:
                if lex is None:
                    picks.append(_ids(words & (feats.starts | feats.quote)))
                elif lex[0] == "s":
                    picks.append(_ids(words & feats.quote))
                else:
                    picks.append(_ids(words & (feats.ends | feats.dot | feats.zero)))
            else:
                picks.append(_closing_past(feats, words, lex, above))
        return np.unique(np.concatenate(picks)) if picks else None

    def _by_shape(self, track: JsonTrack, ids: list[int], out: list[int]) -> list[int]:
        """Of the tokens to simulate in the checked object on top, those whose shape does not decide
        them. A token that ends beginning a name no written name begins with is allowed: the grammar
        accepts some ending after it, and that name was not written. A token that ends past a comma
        decides what every token with the same text before the comma (and the same name begun)
        decides, whitespace changing nothing, and where a value is due, one that writes a whole value
        and whitespace decides what every token with that value and whitespace decides: one of them is
        simulated (refusals go to ``out``). A token that ends writing a whole name (and a colon) is
        refused exactly when that name was written. Names begun are compared with escapes decoded."""
        top, lex = track.stack[-1], track.lex
        if lex is None:
            shape = _DUE_SHAPE if top[7] is None else _VALUE_SHAPE  # where a quote begins a name, or a value
        elif lex[0] == "s" and not lex[3] and not lex[2]:
            shape = _STRING_VALUE_SHAPE
        elif lex[0] in ("n", "l"):
            shape = _SCALAR_SHAPE
        else:
            return ids
        written, tokens = top[9], self.checked.compiled.vocabulary.tokens
        keep, decided = [], {}
        for t in ids:
            m = shape.fullmatch(tokens[t])
            if m is None:
                keep.append(t)
                continue
            name, key = m.group("name"), m.group("pre")
            if name is not None:  # a name begun: its text so far, escapes decoded
                whole = _WHOLE_REST.fullmatch(name)
                if whole is not None:  # a whole name: refused where it was written, deciding nothing else
                    try:
                        if whole.group(1).decode("utf-8") in written:
                            out.append(t)
                        continue
                    except UnicodeDecodeError:  # part of a character: simulated
                        pass
                if _string_end(name) >= 0:
                    keep.append(t)
                    continue
                text = _decoded(name)
                if text is None:  # cut inside a character: simulated where a written name begins so
                    cut = _cut_character(name)
                    if cut is None or not self._toward_written_bytes(written, cut):
                        continue  # (or inside an escape: decided at the next token)
                    key = (key, name)
                elif not any(w.startswith(text) for w in written):
                    continue  # new
                else:
                    key = (key, text)
            elif shape is _VALUE_SHAPE:  # the value ended or not, a comma or not
                end = m.group("end")
                key = (key, None if end is None else b"," in end)
            if key not in decided:
                decided[key] = self._after(tokens[t], t) is not None
            if not decided[key]:
                out.append(t)
        return keep

    def _plain_item_steps(self, track: JsonTrack, ids: list[int], out: list[int]) -> list[int]:
        """In a string item of the unique array on top (not inside an escape): of the tokens to
        simulate, those that only add plain text (``_plain``) are decided here, the rest returned.
        After such a token the track is the same but for the text, no item is completed, and the
        only check ``_after`` makes is ``_item_may_end_new``: in a "bounded" item, refused exactly
        where the text then begins only earlier items' spellings and the grammar, from its state
        after the token, takes no byte off them (``_diverges``). The head's node in the earlier items'
        trie is found once, each token's from it (a simulation decodes and spells the whole text
        again, and clones the track, for each token)."""
        lex = track.lex
        so_far = _decoded(bytes(self._bytes[lex[1] + 1 :]))
        if so_far is None:
            return ids
        top = track.stack[-1]
        node = self._item_node(top, so_far) if top[6] == "bounded" else None
        compiled = self.checked.compiled
        tokens, state, keep = compiled.vocabulary.tokens, self.inner.state, []
        plain = _features(compiled.vocabulary).plain
        for t in ids:
            if not plain(t):
                keep.append(t)
                continue
            below = None if node is None else _descend(node, tokens[t])
            if below is None:  # the text begins no earlier item (or any may repeat it): a new ending fits
                continue
            if not self._ends_new(compiled.next_state(state, t), below):
                out.append(t)
        return keep

    def _item_ends_by_shape(self, ids: list[int], out: list[int]) -> list[int]:
        """In a string item of the unique array on top: of the tokens to simulate, those that do not
        end the item and then write only whitespace, commas and closing brackets. Those decide what
        every token with the same text before the quote and the same separators decides (whitespace
        changing nothing): one of them is simulated (refusals go to ``out``)."""
        tokens = self.checked.compiled.vocabulary.tokens
        keep, decided = [], {}
        for t in ids:
            m = _ITEM_END_SHAPE.fullmatch(tokens[t])
            if m is None:
                keep.append(t)
                continue
            key = (m.group("pre"), m.group("post").translate(None, b" \t\r\n"))
            if key not in decided:
                decided[key] = self._after(tokens[t], t) is not None
            if not decided[key]:
                out.append(t)
        return keep

    def _alike(self, place) -> bool:
        """Whether one fresh undeclared name stands for all of them here (``KeyOrder.names_alike``):
        trusted at "bag" places only, whose grammar the object's own keywords make. Elsewhere a
        keyword the place does not read (an object ``enum``/``const``, a ``not``) may accept some
        undeclared names and not others; the grammar is then searched along the written names."""
        memo = self.checked.alike_memo
        got = memo.get(id(place))
        if got is None:
            strict = self.checked.strict
            got = memo[id(place)] = place.names_alike(strict) and place.policy(self.checked.key_order, strict) == "bag"
        return got

    def _fresh_due(self, place) -> bool:
        """Whether, wherever a name is due at ``place``, the names ``_fresh`` makes (``~q``, ``~qq``, ...:
        all but finitely many neither declared nor written) fit whatever was written: as
        ``KeyOrder.names_open``, except that ``patternProperties`` may narrow the values of the names
        they match so long as they match none of these (language-tagged names, ``^x-`` extensions)."""
        return self._fresh_after(place, b"")

    def _fresh_after(self, place, raw: bytes) -> bool:
        """``_fresh_due`` where a name begun with the bytes ``raw`` is in flight: whether the names it
        may go on to as ``_fresh`` makes them (its text, ``~`` and ``q``s) fit: other names are open
        here (``KeyOrder.others_open``), and the patterns match none of these (byte derivatives of
        their union along the text, then ``~q+``)."""
        checked = self.checked
        if place.names_open(checked.strict):
            return True
        union = self._pattern_union(place)
        if union is None:
            return False
        key = (id(place), raw)
        got = checked.fresh_memo.get(key)
        if got is None:
            text = _decoded(raw)
            got = text is not None and _fresh_fit_after(*union, text.encode("utf-8"))
            if len(checked.fresh_memo) > 50_000:
                checked.fresh_memo.clear()
            checked.fresh_memo[key] = got
        return got

    def _pattern_union(self, place) -> tuple | None:
        """(pool, id) of the union of the patterns' languages at ``place``; None where other names are
        not open there or a pattern cannot be read."""
        memo = self.checked.fresh_memo
        key = ("union", id(place))
        if key not in memo:
            memo[key] = None
            if place.others_open(self.checked.strict):
                try:
                    memo[key] = interned(alt(*map(pattern_language, place.patterns())))
                except (GrammarError, LimitError, TypeError):  # a pattern the lowering could not read
                    pass
        return memo[key]

    def _unwritten_fits(self, state: int, lead: bytes, head: bytes, written: frozenset) -> bool:
        """Whether the grammar accepts, from ``state``, ``lead`` and then the rest of some name whose
        spelling begins with ``head`` and is not in ``written``: a search along the written names' spellings
        only, since any byte the grammar allows off all of them (but a backslash, whose escape may
        spell a written name another way) leads to names that were not written."""
        dfa = self.checked.compiled.dfa
        s = dfa.walk(state, lead) if lead else state
        if s < 0:
            return False
        node = _descend(self._trie_of(written, _name_text), head)
        return node is None or _diverges(dfa, s, node, self._answers, self.checked.allowed_rows)

    def _fits(self, state: int, lead: bytes, rest: str) -> bool:
        """Whether the grammar accepts, from ``state``, ``lead`` and then ``rest`` spelled as the end
        of a JSON string (its closing quote included)."""
        return self.checked.compiled.dfa.reaches(state, lead + json.dumps(rest, ensure_ascii=False)[1:].encode())

    def _declared_left(self, place, written: frozenset, so_far: str) -> frozenset:
        """The declared names not in ``written`` that begin with ``so_far`` (the name in flight) and
        that the grammar takes the rest of from its state now."""
        state = self.inner.state
        key = (state, id(place), self._set_id(written), so_far, "left")
        hit = self.checked.name_memo.get(key)
        if hit is None:
            hit = frozenset(n for n in place.names if n not in written and n.startswith(so_far)
                            and self._fits(state, b"", n[len(so_far) :]))  # fmt: skip
            self.checked.name_memo[key] = hit
        return hit

    def _accepted_names(self, state: int, place) -> frozenset:
        """The names (declared ones, and "" for any fresh one) the grammar accepts from ``state``,
        where a name is due."""
        key = (state, id(place), "accepted")
        hit = self.checked.name_memo.get(key)
        if hit is None:
            names = [n for n in place.names if self._fits(state, b'"', n)]
            if self._fits(state, b'"', _fresh("", place, frozenset())):
                names.append("")
            hit = self.checked.name_memo[key] = frozenset(names)
        return hit

    def _name_candidates(
        self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray, need: int, out: list[int]
    ) -> np.ndarray:
        """The allowed tokens to simulate for the innermost object whose names must not repeat (those
        refused by lookup go to ``out``). A name is decided at its closing quote; a dead end can
        begin at a comma or inside a name, but only where no fresh name fits and the names not
        written are not known to fit (``_known``). Tokens that finish a name and decide nothing
        more are looked up by the text they add (``name_close``, ``whole_name``). Which allowed
        tokens a context selects depends on the grammar state and the context only: memoised."""
        lex, top = track.lex, track.stack[-1]
        in_string = lex is not None and lex[0] == "s"
        if need > 0:  # back in the object only past ``need`` closing brackets (and a quote, from a string)
            d = len(track.stack) - 1 - need
            return self._select(words, feats, ("need", need, in_string, self._known(track.stack[d]), self._outer(track, d)))
        written = top[9]
        outer = self._outer(track, len(track.stack) - 1)
        known = self._known(top)
        if not in_string:
            if known and lex is None and top[7] is None:  # a name due or a value ended: whole names looked up
                self._written_in(feats.whole_name, written, "", words, out)
                return self._select(words, feats, ("due", outer))
            if known:  # a value due, a number or a literal: a comma, then a whole name
                return self._select(words, feats, ("value", outer))
            return self._select(words, feats, ("unknown", lex is None and top[10]))
        if not lex[3]:  # a string value: it ends at a quote, then a comma and a whole name (or a dead end)
            return self._select(words, feats, ("string", outer, known))
        raw = lex[4]
        so_far = None if lex[2] else _decoded(raw)
        if so_far is None:  # inside an escape or a character
            cut = None if lex[2] else _cut_character(raw)
            if cut is not None and written and self._toward_written_bytes(written, cut):
                return _ids(words)  # every token goes on with the character's bytes: each may end it toward written names
            return self._select(words, feats, ("quote",))
        self._written_in(feats.name_close, written, so_far, words, out)
        if written and not self._alike(top[8]):  # only tokens toward a written name can be stuck
            more = self._toward_written(written, so_far, words, feats)
            if len(more):  # ... and only those after which no fresh name may come
                tokens = self.checked.compiled.vocabulary.tokens
                more = np.asarray([t for t in more.tolist() if not self._fresh_after(top[8], raw + tokens[t])],
                                  dtype=np.int64)  # fmt: skip
            return np.union1d(self._select(words, feats, ("name", outer, known)), more)
        if written and not top[8].names_open(self.checked.strict):  # the name begun may lead only to written ones
            if top[11] is not None:  # its names known: no simulation
                if "" not in top[11]:  # (else a fresh name fits after any prefix)
                    out += self._stuck_in_name(top[11] - written, so_far, words, feats)
            elif not self._names_left(self.inner.state, top[8], written, raw, fresh_only=True):
                # no fresh name fits after it (nor after any longer text: undeclared names are alike
                # here): the declared names not written that the grammar takes on from here decide
                out += self._stuck_in_name(self._declared_left(top[8], written, so_far), so_far, words, feats)
        return self._select(words, feats, ("name", outer, known))

    def _begun_written(self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray, need: int) -> np.ndarray:
        """The allowed tokens (packed ``words``) that may stop inside a name begun toward written ones,
        to simulate: those whose text after their last quote begins the spelling of a name written in
        some object of the track (or with a backslash past a quote), and that can begin a name there:
        with a comma unless a name is due in the object on top, and with quotes enough to open one
        (odd from outside a string, even from inside). ``_name_candidates`` leaves them out where a
        name not written is known to fit when one is due; but a name begun may lead only to written
        ones (``"f`` once ``first_name`` is written), a dead end."""
        strict = self.checked.strict
        frames = [f for f in track.stack if f[9] and not f[8].names_open(strict)]  # (else a fresh name fits)
        if not frames:
            return _NO_IDS
        memo = self.checked.select_memo
        key = ("begun", *[(id(f[8]), self._set_id(f[9])) for f in frames])
        hit = memo.get(key)
        if hit is None:
            found: set[int] = set()
            tails = feats.name_tail
            for f in frames:
                fresh = self._fresh_due(f[8])  # then only where no fresh name goes on from the name begun
                for name in f[9]:
                    spelled = _spelled(name)
                    for i in range(1, len(spelled) + 1):
                        if not (fresh and self._fresh_after(f[8], spelled[:i])):
                            found.update(tails.get(spelled[:i], ()))
            ids = np.union1d(np.fromiter(found, np.int64, len(found)), feats.tail_escape)
            at, bits = ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32)
            esc = feats.escape_tail[ids]  # (escaped quotes miscount: those tokens kept at either parity)
            odd = (feats.quote_counts[ids] % 2 == 1) | esc
            even = (feats.quote_counts[ids] % 2 == 0) | esc
            hit = (ids, at, bits, (feats.comma[at] & bits) != 0, odd, even)
            _put(memo, key, hit, _SELECT_MEMO)
        ids, at, bits, comma, odd, even = hit
        if not len(ids):
            return ids
        lex = track.lex
        pick = (words[at] & bits) != 0
        pick &= odd if lex is None or lex[0] != "s" else even
        if not (need == 0 and lex is None and track.stack[-1][7] is None):  # past a value: a comma first
            pick &= comma
        return ids[pick]

    def _select(self, words: np.ndarray, feats: _VocabFeatures, label: tuple) -> np.ndarray:
        """The allowed tokens (``words``: the grammar's mask at the current state) that the context
        ``label`` of ``_name_candidates`` selects, memoised by (state, label)."""
        memo = self.checked.select_memo
        key = (self.inner.state, label)
        hit = memo.get(key)
        if hit is None:
            ids, at, bits = _selection(feats, label)
            hit = ids[(words[at] & bits) != 0]
            if label[0] == "need":
                hit = hit[feats.closers[hit] >= label[1]]
            _put(memo, key, hit, _SELECT_MEMO)
        return hit

    def _outer(self, track: JsonTrack, depth: int) -> str | None:
        """What closing the checked frame at ``depth`` can decide in an outer one: "item" (a unique
        array's item can end: any closing bracket), "name" (a dead end can begin in an outer object:
        a closing bracket with a comma), "whole" (outer objects whose names are known to fit: a
        closing bracket, a comma and a whole name), or None (no frame below ``depth`` is checked)."""
        outer = [f for f in track.stack[:depth] if f[2] or f[9] is not None]
        if not outer:
            return None
        if any(f[2] for f in outer):
            return "item"
        return "whole" if all(self._known(f) for f in outer) else "name"

    def _known(self, frame: list) -> bool:
        """Whether a name not yet written surely fits wherever one is due in this object: every
        undeclared name fits (``KeyOrder.names_open``), or the names the grammar accepts here are known and
        some are not written."""
        return (frame[8].names_open(self.checked.strict) or (frame[11] is not None and bool(frame[11] - frame[9]))
                or self._fresh_due(frame[8]))  # fmt: skip

    @staticmethod
    def _written_in(table: dict, written: frozenset, so_far: str, words: np.ndarray, out: list[int]) -> None:
        """Add to ``out`` the allowed tokens of ``table`` (by the text they add) that finish a
        written name begun with ``so_far``."""
        for name in written:
            if name.startswith(so_far):
                out += [t for t in table.get(name[len(so_far) :], ()) if (int(words[t >> 5]) >> (t & 31)) & 1]

    def _toward_written(self, written: frozenset, so_far: str, words: np.ndarray, feats: _VocabFeatures) -> np.ndarray:
        """Allowed tokens without a quote after which the name begun (``so_far``) is still the
        beginning of a written name (``_prefix_tokens``): the only ones that can leave no unwritten
        name to finish, since the grammar accepts some ending after any allowed token."""
        return self._prefix_tokens(so_far.encode("utf-8"), [n.encode("utf-8") for n in written], feats, words)

    def _stuck_in_name(self, left: frozenset, so_far: str, words: np.ndarray, feats: _VocabFeatures) -> list[int]:
        """Allowed tokens without a quote that continue the name ``so_far`` where no name in ``left``
        (the names not yet written) can follow."""
        rests = [n[len(so_far) :] for n in left if n.startswith(so_far)]
        tokens = self.checked.compiled.vocabulary.tokens
        stuck = []
        for t in _ids(words & (~feats.quote | feats.inner_quote)).tolist():
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

    def _new_item_fits(self, t: JsonTrack, data: bytes, token: int | None, state: int | None) -> bool:
        """Where an item of a "bounded" unique array must begin: whether the grammar accepts one that
        is no earlier item (a number, object or array is always new there: such kinds are open)."""
        state = self._state_after(data, token) if state is None else state
        if state < 0:
            return True
        dfa = self.checked.compiled.dfa
        for lead in b" \t\r\n":  # past the whitespace the grammar takes after the comma
            nxt = dfa.walk(state, bytes((lead,)))
            if nxt >= 0:
                state = nxt
                break
        earlier = t.stack[-1][3]
        if any(dfa.walk(state, bytes((b,))) >= 0 for b in b"-0123456789{["):
            return True
        for lead, key in ((b"n", ("z",)), (b"t", ("b", True)), (b"f", ("b", False))):  # a literal not written yet
            if key not in earlier and dfa.walk(state, lead) >= 0:
                return True
        inside = dfa.walk(state, b'"')
        return inside >= 0 and _diverges(dfa, inside, self._trie_of(earlier, _item_text), self._answers,
                                         self.checked.allowed_rows)  # fmt: skip

    def _trie_of(self, items: frozenset, text_of) -> tuple[int, dict]:
        """The trie of the spellings (to the closing quote) of the strings ``text_of`` gives for
        ``items`` (None: not a string): earlier items, or written names. Tries are kept for the last
        few sets, and one for a set that adds an item to a kept one is that trie with the item
        inserted: one mask's candidates each complete an item of their own, and building a whole
        trie for each cost more than the searches."""
        searches = self._searches
        trie = searches.get(items)
        if trie is None:
            for kept, kept_trie in reversed(searches.items()):
                if len(kept) + 1 == len(items) and kept <= items:
                    trie = kept_trie
                    for text in map(text_of, items - kept):
                        if text is not None:
                            trie = _trie_with(trie, json.dumps(text, ensure_ascii=False)[1:].encode())
                    break
            else:
                texts = (t for t in map(text_of, items) if t is not None)
                trie = spelling_trie(json.dumps(t, ensure_ascii=False)[1:].encode() for t in texts)
            if len(searches) >= 8:
                del searches[next(iter(searches))]
            searches[items] = trie
        return trie

    @staticmethod
    def _next_bounded(track: JsonTrack, d: int, ahead: int = 0) -> bool:
        """Whether the item of the unique array at ``d`` that comes next (``ahead``: after the one in
        progress) is of the "bounded" kind."""
        frame = track.stack[d]
        plan = track.plan
        return plan is not None and plan.item_kind(plan.item(frame[1], frame[5] + ahead)) == "bounded"

    def _toward_earlier(self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray) -> np.ndarray:
        """In a string item: the allowed tokens without a quote after which its text is still the
        beginning of an earlier string item (``_prefix_tokens``)."""
        so_far = _decoded(bytes(self._bytes[track.lex[1] + 1 :]))
        if so_far is None:
            return _ids(words & ~feats.quote)
        head = so_far.encode("utf-8")
        earlier = [k[1].encode("utf-8") for k in track.stack[-1][3] if k[0] == "s"]
        return self._prefix_tokens(head, earlier, feats, words)

    def _begun_as_earlier(self, frame: list, feats: _VocabFeatures, words: np.ndarray) -> np.ndarray:
        """Where an item may begin: the allowed tokens that begin a string item as an earlier string
        item begins (or with a backslash), whose ending the grammar must be searched for."""
        if not any(k[0] == "s" for k in frame[3]):
            return _NO_IDS
        # the earlier items' spellings: a text without a backslash (nor a quote, nor a control
        # character, which no JSON string holds raw) begins one exactly where it begins its text
        trie = self._trie_of(frame[3], _item_text)
        begun = feats.item_begun
        found = []
        for t in _ids(words & feats.quote).tolist():
            g = begun(t)
            if g is not None and (b"\\" in g or _descend(trie, g) is not None):
                found.append(t)
        return np.asarray(found, dtype=np.int64)

    def _prefix_tokens(self, head: bytes, earlier: list[bytes], feats: _VocabFeatures, words: np.ndarray) -> np.ndarray:
        """Allowed tokens without a quote that continue ``head`` (a string's whole text so far, UTF-8)
        toward one of ``earlier``, their escapes decoded, and those spelling a surrogate. The others
        are allowed: after them the text begins no earlier one (the grammar accepts some ending, which
        is new), or ends inside an escape or a character (decided at the next token)."""
        n = len(head)
        found = [feats.prefix_tokens(spelled[n:]) for spelled in earlier if len(spelled) > n and spelled.startswith(head)]
        found = np.concatenate(found) if found else _NO_IDS  # (np.union1d below drops the repeats)
        found = found[(words[found >> 5] >> (found & 31).astype(np.uint32)) & 1 == 1]  # the allowed ones
        return np.union1d(found, _ids(words & feats.odd_escape))

    def _string_closers(self, track: JsonTrack, feats: _VocabFeatures, words: np.ndarray) -> list[int] | None:
        """Tokens ending the string item in progress (quote, then only , and whitespace) as a
        duplicate; None when the text so far ends inside an escape or a character."""
        lex = track.lex
        so_far = None if lex[2] else _decoded(bytes(self._bytes[lex[1] + 1 :]))
        if so_far is None:
            return None
        top = track.stack[-1]
        out = []
        for key in top[3]:
            if key[0] != "s" or not key[1].startswith(so_far):
                continue
            rest = key[1][len(so_far) :]
            spelled = _spelled(rest)
            for t in feats.simple_close.get(spelled, ()):
                if (int(words[t >> 5]) >> (t & 31)) & 1:
                    out.append(t)
        return out

    # ------------------------------------------------------------------ Matcher API
    def _note_accepted(self, track: JsonTrack, compute: bool = True) -> bool:
        """Where a name is due in the checked object on top, record once which names the grammar
        accepts there (the same at every member of a conjunctive place): ``_known`` reads it. False
        when that is still to compute and ``compute`` is False."""
        top, lex = track.stack[-1], track.lex
        if (not top[0] and top[9] is not None and lex is None and top[7] is None and (top[10] or not top[9])
                and top[11] is None and top[8].conjunctive and self._alike(top[8])):  # fmt: skip
            if not compute and (self.inner.state, id(top[8]), "accepted") not in self.checked.name_memo:
                return False
            top[11] = self._accepted_names(self.inner.state, top[8])
            track.part = None
        return True

    def _part(self, track: JsonTrack) -> int:
        """A number for all the checks read of a track where only member names are checked (each
        open frame's names written, due and accepted, its place and index; the lexeme in progress,
        with its text only inside a name), equal for equal tracks of this grammar; -1 under a unique
        array (its items' text and positions count) or past ``_PART_IDS`` of them: not memoised."""
        part = track.part
        if part is None:
            stack, lex = track.stack, track.lex
            if any(f[2] for f in stack) or (lex is not None and len(lex) > 4 and not lex[3]):
                part = -1  # (in a checked host name, its text counts too)
            else:
                if lex is None:
                    lexeme = (0, None, None)
                elif lex[0] == "s":
                    lexeme = (1, lex[2], lex[4]) if lex[3] else (2, lex[2], None)
                else:
                    lexeme = (3, lex[0], None)
                # one flat tuple of ints, strings and bytes (places and formulas by id: the grammar
                # keeps them), which the collector stops tracking at its first pass over it
                sid = self._set_id
                sig = (track.root_done, track.scan, *lexeme)
                for f in stack:
                    sig += (f[0], id(f[1]), f[5], f[7], id(f[8]), sid(f[9]), f[10], sid(f[11]))
                ids = self.checked.part_ids
                part = ids.get(sig)
                if part is None:
                    part = -1 if len(ids) >= _PART_IDS else ids.setdefault(sig, len(ids) + 1)
            track.part = part
        return part

    def _set_id(self, names: frozenset | None) -> int | None:
        """A number for a set of names, equal for equal sets of this grammar (None stays None)."""
        if names is None:
            return None
        ids = self.checked.name_set_ids
        got = ids.get(names)
        if got is None:
            got = ids.setdefault(names, len(ids))
        return got

    def _refusal_key(self, track: JsonTrack) -> tuple | None:
        """What the refusals at this point depend on: the grammar state and ``_part``."""
        part = self._part(track)
        return None if part < 0 else (self.inner.state, part)

    def fill_bitmask(self, bitmask, row: int = 0) -> None:
        inner = self.inner
        inner.fill_bitmask(bitmask, row)
        track = self._tracks[-1]
        # _depth, _noted and _part inlined where they read what the track keeps: every mask pays them
        depth = track.depth if track.depth is not None else self._depth(track)
        if (depth < 0 and not self.checked.checks_outside()) or inner.is_terminated():
            return
        if not track.noted and depth >= 0:
            self._noted(track)
        part = track.part if track.part is not None else self._part(track)
        words = None
        if part < 0:
            refused = self._refusals(track, depth, words := self._row(bitmask, row))
        else:
            key = (inner.state, part)
            refused = self.checked.refused_memo.get(key)
            if refused is None:
                refused = self._refusals(track, depth, words := self._row(bitmask, row))
                _put(self.checked.refused_memo, key, tuple(refused), _REFUSED_MEMO)  # a tuple: not tracked
        if refused:
            words = self._row(bitmask, row) if words is None else words
            for t in refused:
                words[t >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (t & 31)))

    def _refusals(self, track: JsonTrack, depth: int, words: np.ndarray) -> list[int]:
        """The allowed tokens (packed ``words``) the checks refuse: ``_refused`` under a checked array
        or object, and where host names are checked, the tokens that may end a label of one: those
        with a separator or a quote inside one, else those with enough quotes to begin one and end
        a label in it (its opening quote, at most three more before it, as after a string value:
        its closing quote and a member name's two). Tokens with one label end are decided by one
        check per text before it (``_host_refusals``), the others simulated; while the name's text
        can fail no check, only the tokens that can make it (``_HostTables.risky``)."""
        out = self._refused(words) if depth >= 0 else []
        if depth < 0 and self.checked.requires_names():  # an object opened and closed in the token
            self._required_refused(track, _features(self.checked.compiled.vocabulary), words, (), out)
        if self.checked.hosts:
            feats = _features(self.checked.compiled.vocabulary)
            lex = track.lex
            if lex is None or lex[0] != "s":
                quotes = 1
            else:
                quotes = 0 if len(lex) > 4 and not lex[3] else 2 if lex[3] else 4
            # in a checked name, its own format; else any (a name begun in the token: its text is the token's)
            for fmt in [lex[4]] if quotes == 0 else self.checked.plan.hosts:
                tables = feats.host_tables(fmt)
                sim = words & tables.label_ends[quotes]
                raw = bytes(self._bytes[lex[1] + 1 :]) if quotes == 0 else b""
                if raw.endswith(_SEPARATOR_HEADS):  # a separator cut between tokens: every token simulated
                    sim = words.copy()
                elif quotes == 0:
                    out += self._host_refusals(raw, fmt, _ids(sim & tables.one_end), tables)
                    sim &= ~tables.one_end
                if b"--" not in raw and b"\\" not in raw and raw.isascii():
                    sim &= tables.risky
                self._simulated(sim, out)
        return out

    def _simulated(self, sim: np.ndarray, out: list[int]) -> None:
        """Add to ``out`` the tokens of packed ``sim`` not in it that the checks refuse, simulated."""
        tokens = self.checked.compiled.vocabulary.tokens
        asked = set(out)
        for t in _ids(sim).tolist():
            if t not in asked and self._after(tokens[t], t) is None:
                out.append(t)

    @staticmethod
    def _host_refusals(raw: bytes, fmt: str, ids: np.ndarray, tables: _HostTables) -> list[int]:
        """Of tokens ``ids`` with one label end (``_HostTables.one_end``), read inside a checked name
        of format ``fmt`` whose text so far is ``raw``: those whose label end its check refuses, one
        check per text before the end."""
        numbers = tables.end_text_of[ids]
        out: list[int] = []
        for k in np.unique(numbers).tolist():
            try:
                _check_host(raw + tables.end_texts[k], fmt)
            except Dup:
                out += ids[numbers == k].tolist()
        return out

    @staticmethod
    def _row(bitmask, row: int) -> np.ndarray:
        arr = bitmask if isinstance(bitmask, np.ndarray) else bitmask.numpy()
        return (arr[row] if arr.ndim == 2 else arr).view(np.uint32)

    @staticmethod
    def _depth(track: JsonTrack) -> int:
        """``track.unique_depth()``, kept on the track (tracks do not change once pushed)."""
        if track.depth is None:
            track.depth = track.unique_depth()
        return track.depth

    def _noted(self, track: JsonTrack, compute: bool = True) -> bool:
        """``_note_accepted`` once per track; False when it is still to compute and ``compute`` is False."""
        if not track.noted:
            if not self._note_accepted(track, compute):
                return False
            track.noted = True
        return True

    def _refusals_cached(self) -> bool:
        track = self._tracks[-1]
        depth = self._depth(track)
        if depth < 0 and not self.checked.checks_outside():
            return True
        if depth >= 0 and not self._noted(track, compute=False):
            return False
        key = self._refusal_key(track)
        return key is not None and key in self.checked.refused_memo

    def has_cached_mask(self) -> bool:
        return self.inner.has_cached_mask() and self._refusals_cached()

    def fill_bitmask_if_cached(self, bitmask, row: int = 0) -> bool:
        if not (self.inner.has_cached_mask() and self._refusals_cached()):
            return False
        self.fill_bitmask(bitmask, row)
        return True

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
        inner, t = self.inner, self._tracks[-1]
        states = inner._states
        key = (states[-1], token_id, id(t), t.noted)
        hit = self.checked.step_memo.get(key)
        if hit is not None:  # this token from this grammar state and track, accepted before
            states.append(hit[0])
            inner._tokens.append(token_id)
            self._push(hit[1], hit[2])
            return True
        compiled = self.checked.compiled
        if compiled.is_eos(token_id) or not 0 <= token_id < len(compiled.vocabulary.tokens):
            if not inner.accept_token(token_id):
                return False
            self._push(t, b"")
            return True
        data = compiled.vocabulary.tokens[token_id]
        done = self._advance(data, lambda: inner.accept_token(token_id))
        if done == _SHARED:
            TRACK_MEMOS.put(self.checked.step_memo, key, (states[-1], self._tracks[-1], data, t))
        return bool(done)

    accept_tokens = Matcher.accept_tokens  # token by token through accept_token above

    def accept_bytes(self, data: bytes) -> bool:
        return bool(self._advance(bytes(data), lambda: self.inner.accept_bytes(data)))

    def accept_text(self, text: str) -> bool:
        return self.accept_bytes(text.encode("utf-8"))

    def _advance(self, data: bytes, inner_accept):
        """Accept ``data`` (``inner_accept()`` advances the grammar): False when refused, else
        ``_SHARED`` where the track after is a function of the track before, the grammar's state and
        the bytes alone (the same for every matcher: ``step_memo`` may keep it), True where it is not."""
        if self.inner.is_terminated():
            return False
        t = self._tracks[-1]
        lex = t.lex
        if lex is not None and lex[0] == "s" and not lex[2] and data and b'"' not in data and b"\\" not in data:
            top = t.stack[-1] if t.stack else None
            if not lex[3] and not (top and top[2]) and (len(lex) < 5 or b"." not in data and data.isascii()):
                # inside a string value, not a unique item's (nor a label's end in a checked host
                # name): the bytes change nothing the checks read
                if not inner_accept():
                    return False
                self._push(t, data)
                return _SHARED
            if lex[3] and top[8] is not None and top[8].names_open(self.checked.strict):
                # inside a name where any name fits (no dead end): only the name's text changes
                if not inner_accept():
                    return False
                after = JsonTrack.__new__(JsonTrack)
                after.plan, after.keys, after.mode, after.root_done, after.depth = t.plan, t.keys, t.mode, t.root_done, t.depth
                after.part, after.noted, after.opener, after.scan = None, False, t.opener, t.scan
                after.stack, after.lex = t.stack, [*lex[:4], lex[4] + data]  # frames shared: not changed once pushed
                self._push(after, data)
                return _SHARED
        # where only names are checked, the track after the bytes (or a refusal) is memoised by the
        # grammar state, the bytes and all the checks read of the track (_part): tracks are
        # not changed once pushed (but for _note_accepted's record), so one serves every matcher
        part = self._part(t)
        key = None if part < 0 else (self.inner.state, data, part)
        memo = self.checked.advance_memo
        hit = memo.get(key) if key is not None else None
        if hit is not None:
            if hit is False or not inner_accept():
                return False
            self._push(hit, data)
            return _SHARED
        try:
            track = self._fed(data)
        except (IndexError, ValueError, AttributeError):
            # bytes that are not JSON (the tracker's stack or numbers break): the grammar refuses
            # them too; were it to accept them, the tracker has a bug that must not pass silently
            if inner_accept():
                raise
            return False
        if track is None:
            self._remember(key, False)
            return False
        if not inner_accept():
            return False
        if not (self._name_may_come(track, data, state=self.inner.state)
                and self._item_may_end_new(track, data, state=self.inner.state)
                and self._empty_run_ok(track, data)):  # a dead end: undone
            self.inner.rollback(1)
            self._remember(key, False)
            return False
        shared = key is not None and self._part(track) >= 0
        if shared:
            self._remember(key, track)
        self._push(track, data)
        return _SHARED if shared else True

    def _remember(self, key: tuple | None, outcome) -> None:
        if key is not None:
            TRACK_MEMOS.put(self.checked.advance_memo, key, outcome)

    def _push(self, track: JsonTrack, data: bytes) -> None:
        self._bytes += data
        self._tracks.append(track)
        self._lens.append(len(self._bytes))

    def forced_tokens(self) -> list[int]:
        """The grammar's forced tokens, up to the first one that would complete a duplicate."""
        forced = self.inner.forced_tokens()
        if not forced or (self._tracks[-1].unique_depth() < 0 and not self.checked.checks_outside()):
            return forced
        probe = self.copy()
        n = probe.accept_tokens(forced)
        return forced[:n]

    def forced_bytes(self) -> bytes:
        return self.inner.forced_bytes() if self._tracks[-1].unique_depth() < 0 and not self.checked.checks_outside() else b""

    def shortest_completion(self):
        """A shortest way to end the output that the checks take too (``Matcher.shortest_completion``):
        the grammar's when no repeated item or name is in it, else a search along the checked
        matcher, guided by the grammar's shortest from each state (None past its bound). Inside an
        array of unique items (where the grammar's shortest would repeat an item) states cannot be
        told apart, as their items' text counts: the search then merges none, and what it returns is
        the shortest in bytes, verified, its token count an upper bound of the fewest."""
        out = self.inner.shortest_completion()
        if out is None or self._takes(out.tokens):  # (checked even outside a container: it may open one)
            return out
        return self._checked_completion()

    def _takes(self, tokens: list[int]) -> bool:
        probe = self.copy()
        return probe.accept_tokens(tokens) == len(tokens) and probe.is_accepting()

    def _checked_completion(self, max_states: int = 5000):
        """Best-first over bytes with copies of this matcher; states are (grammar state, ``_part``),
        or (grammar state, the bytes so far) under a unique array, ranked by bytes so far plus the
        grammar's shortest from there (a lower bound: the first accepting one is a shortest), the
        deepest first among equals."""
        compiled = self.checked.compiled
        dfa = compiled.dfa

        def key(m: UniqueMatcher, text: bytes = b""):
            part = m._part(m._tracks[-1])
            return (m.inner.state, part) if part >= 0 else (m.inner.state, -1, text)

        def needed(m: UniqueMatcher) -> int | None:
            got = compiled.shortest_completion(m.inner.state)
            return None if got is None else len(got.text)

        start, h = key(self), needed(self)
        if h is None:
            return None
        heap, seen, n = [(h, 0, 0, self, b"")], {start}, 0
        while heap and n < max_states:
            _, _, _, m, text = heapq.heappop(heap)
            if m.is_accepting():
                tokens = spell(compiled.vocabulary, text)
                return Completion(text, tokens) if self._takes(tokens) else None
            s = m.inner.state
            dfa.materialize(s)
            steps = [byte_of_class(dfa, c) for c in np.flatnonzero(dfa.trans[s] >= 0).tolist()]
            lex = m._tracks[-1].lex
            if m._part(m._tracks[-1]) < 0 and (lex is None or lex[0] != "s"):
                # merging no states, whitespace between tokens would multiply them; it only lengthens
                # an ending, so the shortest has none (unless nothing else is allowed)
                steps = [b for b in steps if b not in _WS] or steps
            for b in steps:
                nxt = m.copy()
                if not nxt.accept_bytes(bytes((b,))):
                    continue
                longer = text + bytes((b,))
                k, h = key(nxt, longer), needed(nxt)
                if h is None or k in seen:
                    continue
                seen.add(k)
                n += 1
                heapq.heappush(heap, (len(longer) + h, -len(longer), n, nxt, longer))  # ties: deepest first
        return None

    def __repr__(self) -> str:
        return f"UniqueMatcher({self.inner!r})"
