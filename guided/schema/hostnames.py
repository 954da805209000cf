"""The IDNA2008 rules of host names that no grammar holds, checked where a label ends.

``format: hostname`` takes A-labels (RFC 5890: ``xn--`` and the Punycode of a U-label). Whether one
is valid needs its decoding (RFC 3492) and the Unicode tables of RFC 5892 (each code point PVALID,
or CONTEXTJ/CONTEXTO with its context rule), the U-label in NFC, re-encoding to the same A-label,
and, in a name where some label is right-to-left, the Bidi rule of RFC 5893 for every label. The
grammar writes an A-label's syntax (``formats.HOSTNAME_A_LABELS``), and the matcher refuses a token
where the label it ends breaks these rules (``unique_runtime.JsonTrack``). The tables and the
rules are the ``idna`` package's (its Unicode version; the Bidi classes are Python's ``unicodedata``).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import idna

__all__ = ["labels_ok", "u_label"]

_RTL = frozenset({"R", "AL", "AN"})  # a label holding one of these makes the name a "Bidi domain name"


@lru_cache(maxsize=4096)
def u_label(label: str) -> str | None:
    """The U-label of the A-label ``label`` (``xn--`` in any case, then Punycode), or None when it is
    no valid A-label: Punycode that does not decode, decodes to ASCII only, does not re-encode to
    itself, or decodes to a label IDNA2008 refuses (its own Bidi rule included), or longer than 63."""
    if len(label) > 63 or not label.isascii():
        return None
    try:
        u = idna.ulabel(label)
        if u.isascii() or idna.alabel(u) != label.lower().encode("ascii"):
            return None
    except (idna.IDNAError, UnicodeError, ValueError, IndexError, OverflowError):
        return None
    return u


def _bidi_ok(label: str) -> bool:
    try:
        idna.check_bidi(label, check_ltr=True)
    except (idna.IDNAError, ValueError):
        return False
    return True


def labels_ok(labels: list[str]) -> bool:
    """Whether complete labels (each of the hostname grammar's syntax) can be a host name's, in
    order: every A-label valid, and where one decodes to right-to-left text, every label keeps the
    Bidi rule (a digit-first label then breaks it). Labels that fail fail under any labels after
    them, so a label's end can be refused at once; the check at the last label's end reads every
    label, so it decides the name."""
    texts = []
    for label in labels:
        if label[2:4] == "--":  # the grammar writes "--" there only after "xn"
            u = u_label(label)
            if u is None:
                return False
            texts.append(u)
        else:
            texts.append(label)
    if any(unicodedata.bidirectional(c) in _RTL for text in texts if not text.isascii() for c in text):
        return all(_bidi_ok(text) for text in texts)
    return True
