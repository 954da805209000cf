"""String ``format`` languages as regexes over decoded characters, from the RFCs' grammars.

Each is the RFC's ABNF written as a regular expression (all of these grammars are regular), with
deliberate restrictions that only narrow what is generated: hostnames have no A-labels (``xn--...``:
their Punycode validity is not a regular language) unless the matcher checks them
(``HOSTNAME_A_LABELS``, ``hostnames``), as RFC 5891 forbids "--" in a label's 3rd and 4th positions
otherwise, and ``regex`` (ECMA-262 in unicode mode) is narrowed to patterns of bounded group nesting,
with at most one named group (``regex_format_node``). ``idn-email`` reads its U-labels as RFC 6532
does (non-ASCII characters beside letters and digits). ``idn-hostname`` has a grammar only where the
matcher checks it (IDNA2008's rules past the code point tables, ``hostnames``); elsewhere a
``SchemaError`` unless the caller is lenient.
"""

from __future__ import annotations

import re
from functools import cache

from guided.grammar import parse_regex
from guided.grammar.languages import matches
from guided.grammar.regex_ast import Node, alt, any_char, chars, intersect, literal, optional, repeat, seq
from guided.schema.hostnames import SEPARATORS, idna_code_points, labels_ok

__all__ = ["format_node", "format_holds", "FORMATS", "HOST_FORMATS"]

HOST_FORMATS = ("hostname", "idn-hostname")  # the formats whose labels the matcher checks (``hostnames``)

_YEAR = r"(?:\d{3}[1-9]|\d\d[1-9]\d|\d[1-9]\d\d|[1-9]\d{3})"
_LEAP_YEAR = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))"
)
DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_OFFSET = r"(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
_FRAC = r"(?:\.\d+)?"

_TIME = rf"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d{_FRAC}{_OFFSET}"


def _leap_seconds() -> Node:
    """RFC 3339 5.7: a leap second is ``:60`` at 23:59 UTC, so a local ``hh:mm:60`` takes the offset
    that makes it 23:59 UTC: -(23-hh):(59-mm), or +hh:(mm+1) (+(hh+1):00 at mm = 59), or at 23:59 a
    zero offset. The hours and the minutes of a negative or positive offset follow from the local
    ones each on their own: one branch per hour intersected with one per minute (a tree of all
    1,440 local minutes would be 15 times the expressions, and every compile interns them)."""
    frac = parse_regex(_FRAC)
    hours, minutes = "(?:[01]\\d|2[0-3])", "[0-5]\\d"

    def side(sign: str, spans: list[tuple[int, int]], hour_side: bool) -> Node:
        """A branch per (local, offset) pair of ``spans``: hours (the minutes any) or minutes."""
        branches = []
        for local, off in spans:
            if hour_side:
                head, tail = f"{local:02d}:{minutes}", f"{off:02d}:{minutes}"
            else:
                head, tail = f"{hours}:{local:02d}", f"{hours}:{off:02d}"
            branches.append(seq(parse_regex(head), literal(":60"), frac, literal(sign), parse_regex(tail)))
        return alt(*branches)

    negative = intersect(side("-", [(h, 23 - h) for h in range(24)], True),
                         side("-", [(m, 59 - m) for m in range(60)], False))  # fmt: skip
    positive = intersect(side("+", [(h, h) for h in range(24)], True),
                         side("+", [(m, m + 1) for m in range(59)], False))  # fmt: skip
    carry = alt(*(seq(literal(f"{h:02d}:59:60"), frac, literal(f"+{h + 1:02d}:00")) for h in range(23)))
    zero = seq(literal("23:59:60"), frac, parse_regex("[Zz]|[+-]00:00"))
    return alt(negative, positive, carry, zero)


def _time_node() -> Node:
    return alt(parse_regex(_TIME), _leap_seconds())


def _date_time_node() -> Node:
    return seq(parse_regex(rf"{DATE}[Tt]"), format_node("time"))
_D = r"\d+"
_DUR_TIME = rf"T(?:{_D}H(?:{_D}M(?:{_D}S)?)?|{_D}M(?:{_D}S)?|{_D}S)"
_DUR_DATE = rf"(?:{_D}D|{_D}M(?:{_D}D)?|{_D}Y(?:{_D}M(?:{_D}D)?)?)(?:{_DUR_TIME})?"
DURATION = rf"P(?:{_DUR_DATE}|{_DUR_TIME}|{_D}W)"

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{IPV4})"
IPV6 = (
    "(?:"
    + "|".join(
        [
            rf"(?:{_H16}:){{6}}{_LS32}",
            rf"::(?:{_H16}:){{5}}{_LS32}",
            rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
            rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
            rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
            rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
            rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
        ]
    )
    + ")"
)
_HEX = "[0-9A-Fa-f]"
UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"

# RFC 5891 4.2.3.1: no "--" in the 3rd and 4th positions, except the A-label prefix "xn--".
def _host_label(extra: str = "", a_labels: bool = False) -> str:
    """An RFC 1123 host name's label (1-63 letters, digits and inner hyphens, no "--" in the 3rd and
    4th positions); ``extra`` (class ranges) counts as letters. With ``a_labels``, also an A-label's
    syntax (``xn--`` in any case, then letters, digits and hyphens, not ending in one): a superset
    of the valid ones, which the matcher's check narrows (``hostnames``)."""
    an, ldh = f"[A-Za-z0-9{extra}]", f"[A-Za-z0-9{extra}-]"
    label = rf"(?:{an}(?:{ldh}?{an})?|{an}{ldh}{{2}}{an}|{an}{ldh}(?:{an}{ldh}|-{an}){ldh}{{0,58}}{an})"
    return rf"(?:{label}|[Xx][Nn]--{ldh}{{0,58}}{an})" if a_labels else label


def _hostname(extra: str = "", a_labels: bool = False) -> str:
    """Host names: labels (``_host_label``) separated by dots."""
    label = _host_label(extra, a_labels)
    return rf"{label}(?:\.{label})*"


def _email(extra: str = "") -> str:
    """RFC 5321's Mailbox: a dot-string or quoted local part, then a host name or an address literal;
    with ``extra`` (class ranges), RFC 6531's: atext, qtextSMTP and the domain's labels take those
    characters too."""
    atext = rf"[A-Za-z0-9!#$%&'*+\-/=?^_`{{|}}~{extra}]"
    local = rf'(?:{atext}+(?:\.{atext}+)*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e{extra}]|\\[\x20-\x7e])*")'
    return rf"{local}@(?:{_hostname(extra)}|\[{IPV4}\]|\[IPv6:{IPV6}\])"


HOSTNAME = _hostname()
# every A-label's syntax: the language where the matcher checks A-labels (exact with the check), and
# inside a complement (``not``, ``oneOf`` exclusivity), where a superset keeps the complement a subset
HOSTNAME_A_LABELS = _hostname(a_labels=True)
EMAIL = _email()
# RFC 6531 3.3: UTF8-non-ascii (every code point past ASCII) joins atext and qtextSMTP, and a domain's
# sub-domain may be a U-label, read as RFC 6532 reads a domain: non-ASCII characters stand beside letters
# and digits, unchecked against IDNA2008 (a label not in NFC is valid, as the JSON Schema Test Suite has it)
IDN_EMAIL = _email("\u0080-\ud7ff\ue000-\U0010ffff")


def _uri_grammar(ucschar: str = "", iprivate: str = "") -> tuple[str, str]:
    """RFC 3986's URI and URI-reference; with ``ucschar`` / ``iprivate`` (class ranges), RFC 3987's IRI
    and IRI-reference (iunreserved adds ucschar; iquery adds iprivate)."""
    unreserved = rf"A-Za-z0-9\-._~{ucschar}"
    sub = r"!$&'()*+,;="
    pct = r"%[0-9A-Fa-f]{2}"
    pchar = rf"(?:[{unreserved}{sub}:@]|{pct})"
    segment, segment_nz = rf"{pchar}*", rf"{pchar}+"
    segment_nz_nc = rf"(?:[{unreserved}{sub}@]|{pct})+"
    ip_literal = rf"\[(?:{IPV6}|[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~{sub}:]+)\]"  # IPvFuture: ASCII ("v" is case-insensitive in ABNF)
    reg_name = rf"(?:[{unreserved}{sub}]|{pct})*"
    userinfo = rf"(?:[{unreserved}{sub}:]|{pct})*"
    authority = rf"(?:{userinfo}@)?(?:{ip_literal}|{IPV4}|{reg_name})(?::\d*)?"
    path_abempty = rf"(?:/{segment})*"
    path_absolute = rf"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = rf"{segment_nz}(?:/{segment})*"
    path_noscheme = rf"{segment_nz_nc}(?:/{segment})*"
    query = rf"(?:{pchar}|[/?{iprivate}])*"
    fragment = rf"(?:{pchar}|[/?])*"
    tail = rf"(?:\?{query})?(?:#{fragment})?"
    absolute = rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|){tail}"
    relative = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|){tail}"
    return absolute, rf"(?:{absolute}|{relative})"


URI, URI_REFERENCE = _uri_grammar()
# RFC 3987 2.2: ucschar and iprivate (code points written as characters: the patterns are code point classes)
_UCSCHAR = "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef" + "".join(
    f"{chr(plane << 16 | (0x1000 if plane == 14 else 0))}-{chr(plane << 16 | 0xFFFD)}" for plane in range(1, 15)
)
_IPRIVATE = "\ue000-\uf8ff" + f"{chr(0xF0000)}-{chr(0xFFFFD)}{chr(0x100000)}-{chr(0x10FFFD)}"
IRI, IRI_REFERENCE = _uri_grammar(_UCSCHAR, _IPRIVATE)
# RFC 6570 2: literals and {expressions} (operators, varspecs with a prefix or explode modifier); a
# literal may hold an apostrophe (%x27, left out of the RFC's ABNF by mistake: erratum 6937)
_PCT = r"%[0-9A-Fa-f]{2}"
_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_VARSPEC = rf"{_VARCHAR}(?:\.?{_VARCHAR})*(?::[1-9]\d{{0,3}}|\*)?"
_TEMPLATE_LITERAL = rf"(?:[\x21\x23\x24\x26-\x3b\x3d\x3f-\x5b\x5d\x5f\x61-\x7a\x7e{_UCSCHAR}{_IPRIVATE}]|{_PCT})"
URI_TEMPLATE = rf"(?:{_TEMPLATE_LITERAL}|\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}})*"
JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER = rf"(?:0|[1-9]\d*)(?:#|{JSON_POINTER})"



def regex_format_node(depth: int = 3) -> Node:
    """ECMA-262 patterns as ``new RegExp(p, "u")`` reads them (format "regex": the JSON Schema Test
    Suite's dialect, where ``\\a`` is an error), narrowed to groups nested at most ``depth`` deep,
    which keeps the language regular, and to what needs no counting: literal characters (not
    ``<``), ``.``, the escapes ``\\d \\D \\w \\W \\s \\S \\t \\n \\r \\f \\v \\cX \\xHH
    \\uHHHH`` and escaped syntax characters, classes of those with digit / letter ranges in order
    (``[]`` and ``[^]`` too), ``^ $ \\b \\B``, the quantifiers ``* + ? {n} {n,} {n,m}`` (n < 100,
    n <= m < 1000), lazy or not, ``|``, capturing, ``(?:`` and lookaround groups, and at most one
    named group ``(?<name>`` (ASCII names), to which ``\\k<name>`` may refer after it where its name
    is one lowercase letter. Left out: numbered backreferences and ``\\0`` (they count groups), ``\\p{..}``,
    ``\\u{..}``, a second named group (names must differ), a ``-`` not last in a class: every
    pattern generated is valid, some valid ones are refused."""
    syntax = r"\^$\\.*+?()[\]{}|"
    char_escape = r"[tnrfv]|c[A-Za-z]|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}"
    name = r"[A-Za-z$_][A-Za-z0-9$_]*"

    def ranges(chars: str) -> str:
        return "|".join(f"{lo}-[{lo}-{chars[-1]}]" for lo in chars)

    def class_item(unwritten: str) -> str:
        """A range, a class escape, or one character: any but ``unwritten`` as it is, else escaped."""
        char = rf"[^{unwritten}<]|\\(?:{char_escape}|[{syntax}/\-])"
        return rf"{ranges(digits)}|{ranges(lower)}|{ranges(lower.upper())}|\\[dDwWsS]|{char}"

    digits, lower = "0123456789", "abcdefghijklmnopqrstuvwxyz"
    # a class: "^" first is a negation, a "-" is literal only last; either may be all there is
    item, first = class_item(r"\\\]\[\-"), class_item(r"\\\]\[\-^")
    char_class = rf"\[(?:\^(?:{item})*|(?:(?:{first})(?:{item})*)?)-?\]"
    atom = parse_regex(rf"[^{syntax}<]|\.|\\(?:[dDwWsS]|{char_escape}|[{syntax}/]|k<{name}>)|{char_class}")
    # {n,m} with n <= m: n of one digit d and m in d..999, or n = ab of two digits and m in ab..999
    pairs = [rf"{d},(?:[{d}-9]|[1-9]\d{{1,2}})" for d in range(10)]
    pairs += [rf"{a}{b},(?:{a}[{b}-9]" + (rf"|[{a + 1}-9]\d" if a < 9 else "") + r"|[1-9]\d\d)"
              for a in range(1, 10) for b in range(10)]  # fmt: skip
    quantifier = parse_regex(rf"(?:[*+?]|\{{(?:(?:0|[1-9]\d?),?|{'|'.join(pairs)})\}})\??")
    assertion = parse_regex(r"[\^$]|\\[bB]")
    opener, look = parse_regex(rf"\((?:\?:|\?<{name}>)?"), parse_regex(r"\(\?(?:=|!|<=|<!)")
    disjunction = None
    for level in range(depth + 1):  # a group holds the disjunction of the level below (shared, not copied)
        group = seq(opener, disjunction, literal(")")) if level else None
        around = seq(look, disjunction, literal(")")) if level else None
        term = alt(assertion, around, seq(alt(atom, group), optional(quantifier))) if level else alt(
            assertion, seq(atom, optional(quantifier)))  # fmt: skip
        alternative = repeat(term)
        disjunction = seq(alternative, repeat(seq(literal("|"), alternative)))
    return intersect(disjunction, _named_groups(name))


def _named_groups(name: str) -> Node:
    """Flat text where every ``<`` is syntax (the grammar writes no literal one): at most one named
    group, and ``\\k<c>`` only after the group named with the one lowercase letter c. A ``<`` is lookbehind when
    ``=`` or ``!`` follows, else a group's or a reference's name."""
    plain = parse_regex(r"(?:[^<]|<[=!])*")
    after = [seq(parse_regex(name), literal(">"), plain)]
    for c in "abcdefghijklmnopqrstuvwxyz":
        after.append(seq(literal(c + ">"), repeat(alt(parse_regex(r"[^<]|<[=!]"), literal(rf"\k<{c}>")))))
    return seq(plain, optional(seq(literal("(?<"), alt(*after))))


FORMATS = {
    "date": DATE,
    "duration": DURATION,
    "email": EMAIL,
    "idn-email": IDN_EMAIL,
    "hostname": HOSTNAME,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "uuid": UUID,
    "uri": URI,
    "uri-reference": URI_REFERENCE,
    "iri": IRI,
    "iri-reference": IRI_REFERENCE,
    "uri-template": URI_TEMPLATE,
    "json-pointer": JSON_POINTER,
    "relative-json-pointer": RELATIVE_JSON_POINTER,
}
_NODES = {"regex": regex_format_node, "time": _time_node, "date-time": _date_time_node}  # formats built as regex ASTs
_MAX_LEN = {"hostname": 253, "email": 254, "idn-email": 254}  # characters (RFC 5321 4.5.3.1: octets, a SHOULD)


def _idn_hostname() -> Node:
    """idn-hostname's names, a superset the matcher narrows (``hostnames.labels_ok``): labels
    separated by any of the four full stops, each an ASCII one (as hostname's, A-labels' syntax
    included) or a U-label's syntax: 1-63 code points the IDNA2008 tables allow (of ASCII, lowercase
    letters, digits and the hyphen), one past ASCII at least; at most 253 characters in all."""
    allowed = idna_code_points()
    wide = chars([r for r in allowed if r[1] >= 0x80])
    u_label = intersect(repeat(chars(allowed), 1, 63), seq(repeat(any_char()), wide, repeat(any_char())))
    label = alt(parse_regex(_host_label(a_labels=True)), u_label)
    name = seq(label, repeat(seq(chars([(ord(c), ord(c)) for c in SEPARATORS]), label)))
    return intersect(name, repeat(any_char(), 0, 253))


@cache
def format_node(name: str, a_labels: bool = False) -> Node | None:
    """The decoded-string language of a format, or None when it has no regular grammar here. With
    ``a_labels`` (where the matcher checks IDNA2008, or inside a complement: a superset), hostname
    takes every A-label's syntax (``HOSTNAME_A_LABELS``), and idn-hostname has a grammar."""
    if name == "idn-hostname":
        return _idn_hostname() if a_labels else None
    if name in _NODES:
        return _NODES[name]()
    pattern = HOSTNAME_A_LABELS if a_labels and name == "hostname" else FORMATS.get(name)
    if pattern is None:
        return None
    node = parse_regex(pattern)
    if name in _MAX_LEN:
        node = intersect(node, repeat(any_char(), 0, _MAX_LEN[name]))
    return node


def format_holds(name: str, text: str) -> bool | None:
    """Whether ``text`` is of format ``name``, or None when no grammar here knows the format: a
    value the schema names (``enum``, ``const``) is checked in Python, A-labels included."""
    if name == "hostname":
        return len(text) <= _MAX_LEN[name] and _HOST_RE.fullmatch(text) is not None and labels_ok(text.split("."))
    if name == "idn-hostname":
        labels = _IDN_SPLIT.split(text)
        return (len(text) <= 253 and labels_ok(labels)
                and all((_ASCII_LABEL if label.isascii() else _U_LABEL).fullmatch(label) for label in labels))  # fmt: skip
    node = format_node(name)
    return None if node is None else matches(node, text)  # (its pool kept for the next value)


_HOST_RE = re.compile(HOSTNAME_A_LABELS)
_IDN_SPLIT = re.compile(f"[{SEPARATORS}]")
_ASCII_LABEL = re.compile(_host_label(a_labels=True))
_U_LABEL = re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in idna_code_points()) + "]{1,63}")
