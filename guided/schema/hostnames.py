"""The IDNA2008 rules of host names that no grammar holds, checked where a label ends.

``format: hostname`` takes A-labels (RFC 5890: ``xn--`` and the Punycode of a U-label), and
``idn-hostname`` U-labels too. Whether one is valid needs the Punycode (RFC 3492) and the Unicode
tables of RFC 5892 (each code point PVALID, or CONTEXTJ/CONTEXTO with its context rule), the U-label
in NFC, an A-label re-encoding to itself, and, in a name where some label is right-to-left, the
Bidi rule of RFC 5893 for every label. The grammar writes the labels' syntax (``formats``: for
U-labels, the code points the tables allow), and the matcher refuses a token where the label it
ends breaks these rules (``unique_runtime.JsonTrack``). The tables and the rules are the ``idna``
package's (its Unicode version; the Bidi classes and NFC are Python's ``unicodedata``).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import idna
from idna import idnadata

__all__ = ["labels_ok", "u_label", "idna_code_points", "SEPARATORS"]

SEPARATORS = ".\u3002\uff0e\uff61"  # RFC 3490 3.1: label separators of idn-hostname

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


@lru_cache(maxsize=4096)
def _a_label_of(label: str) -> bytes | None:
    """The A-label of the U-label ``label``, or None when IDNA2008 refuses it (RFC 5891 5.4: NFC,
    hyphens, a leading combining mark, the code points and their contexts, its own Bidi rule) or
    its A-label is longer than 63 octets."""
    try:
        return idna.alabel(label)
    except (idna.IDNAError, UnicodeError, ValueError, IndexError, OverflowError):
        return None


def labels_ok(labels: list[str]) -> bool:
    """Whether complete labels (each of the hostname or idn-hostname grammar's syntax: ASCII letters,
    digits and hyphens, or for idn-hostname, letters of the IDNA2008 tables) can be a host name's,
    in order: every A-label and U-label valid, their A-labels' octets with the dots at most 253,
    and where one label holds right-to-left text, every label keeps the Bidi rule (a digit-first
    label then breaks it). Labels that fail fail under any labels after them, so a label's end can
    be refused at once; the check at the last label's end reads every label, so it decides the name."""
    texts = []
    octets = len(labels) - 1
    for label in labels:
        if not label.isascii():  # (idn-hostname only)
            a = _a_label_of(label)
            if a is None:
                return False
            octets += len(a)
        elif label[2:4] == "--":  # the grammars write "--" there only after "xn"
            u = u_label(label)
            if u is None:
                return False
            octets += len(label)
            label = u
        else:
            octets += len(label)
        texts.append(label)
    if octets > 253:
        return False
    if any(unicodedata.bidirectional(c) in _RTL for text in texts if not text.isascii() for c in text):
        return all(_bidi_ok(text) for text in texts)
    return True


def idna_code_points() -> tuple[tuple[int, int], ...]:
    """The code points a U-label may hold (PVALID, CONTEXTJ and CONTEXTO: RFC 5892's tables, the
    context rules left to ``labels_ok``), as sorted, merged inclusive ranges."""
    classes = idnadata.codepoint_classes
    spans = sorted((r >> 32, (r & 0xFFFFFFFF) - 1) for k in ("PVALID", "CONTEXTJ", "CONTEXTO") for r in classes[k])
    out: list[tuple[int, int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return tuple(out)
