"""String ``format`` languages as regexes over decoded characters, from the RFCs' grammars.

Each is the RFC's ABNF written as a regular expression (all of these grammars are regular), with
two deliberate restrictions that only narrow what is generated: a leap second (``:60``) is accepted
only at 23:59 UTC spelled with a zero offset, and hostnames have no A-labels (``xn--...``: their
punycode validity is not a regular language), as RFC 5891 forbids "--" in a label's 3rd and 4th
positions otherwise. Formats with no regular
grammar here (``regex``, ``idn-*``, ``iri*``, ``uri-template``) raise ``SchemaError`` unless the
caller is lenient.
"""

from __future__ import annotations

from functools import cache

from guided.grammar import parse_regex
from guided.grammar.regex_ast import Node, any_char, intersect, repeat

__all__ = ["format_node", "FORMATS"]

_YEAR = r"(?:\d{3}[1-9]|\d\d[1-9]\d|\d[1-9]\d\d|[1-9]\d{3})"
_LEAP_YEAR = r"(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    r"(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))"
)
DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_OFFSET = r"(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)"
_FRAC = r"(?:\.\d+)?"
TIME = (
    rf"(?:(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d{_FRAC}{_OFFSET}"
    rf"|23:59:60{_FRAC}(?:[Zz]|[+-]00:00))"
)
DATE_TIME = rf"{DATE}[Tt]{TIME}"
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
_AN, _LDH = "[A-Za-z0-9]", "[A-Za-z0-9-]"
_LABEL = (
    rf"(?:{_AN}(?:{_LDH}?{_AN})?|{_AN}{_LDH}{{2}}{_AN}"
    rf"|{_AN}{_LDH}(?:{_AN}{_LDH}|-{_AN}){_LDH}{{0,58}}{_AN})"
)
HOSTNAME = rf"{_LABEL}(?:\.{_LABEL})*"

_ATEXT = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]"
_LOCAL = rf'(?:{_ATEXT}+(?:\.{_ATEXT}+)*|"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*")'
EMAIL = rf"{_LOCAL}@(?:{HOSTNAME}|\[{IPV4}\]|\[IPv6:{IPV6}\])"

_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB = r"!$&'()*+,;="
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB}:@]|{_PCT})"
_SEGMENT = rf"{_PCHAR}*"
_SEGMENT_NZ = rf"{_PCHAR}+"
_SEGMENT_NZ_NC = rf"(?:[{_UNRESERVED}{_SUB}@]|{_PCT})+"
_IP_LITERAL = rf"\[(?:{IPV6}|v[0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB}:]+)\]"
_REG_NAME = rf"(?:[{_UNRESERVED}{_SUB}]|{_PCT})*"
_USERINFO = rf"(?:[{_UNRESERVED}{_SUB}:]|{_PCT})*"
_AUTHORITY = rf"(?:{_USERINFO}@)?(?:{_IP_LITERAL}|{IPV4}|{_REG_NAME})(?::\d*)?"
_PATH_ABEMPTY = rf"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = rf"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_PATH_ROOTLESS = rf"{_SEGMENT_NZ}(?:/{_SEGMENT})*"
_PATH_NOSCHEME = rf"{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*"
_QUERY = rf"(?:{_PCHAR}|[/?])*"
_TAIL = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"
URI = rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS}|){_TAIL}"
RELATIVE_REF = rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME}|){_TAIL}"
URI_REFERENCE = rf"(?:{URI}|{RELATIVE_REF})"
JSON_POINTER = r"(?:/(?:[^~/]|~[01])*)*"
RELATIVE_JSON_POINTER = rf"(?:0|[1-9]\d*)(?:#|{JSON_POINTER})"

FORMATS = {
    "date": DATE,
    "time": TIME,
    "date-time": DATE_TIME,
    "duration": DURATION,
    "email": EMAIL,
    "hostname": HOSTNAME,
    "ipv4": IPV4,
    "ipv6": IPV6,
    "uuid": UUID,
    "uri": URI,
    "uri-reference": URI_REFERENCE,
    "json-pointer": JSON_POINTER,
    "relative-json-pointer": RELATIVE_JSON_POINTER,
}
_MAX_LEN = {"hostname": 253, "email": 254}


@cache
def format_node(name: str) -> Node | None:
    """The decoded-string language of a format, or None when it has no regular grammar here."""
    pattern = FORMATS.get(name)
    if pattern is None:
        return None
    node = parse_regex(pattern)
    if name in _MAX_LEN:
        node = intersect(node, repeat(any_char(), 0, _MAX_LEN[name]))
    return node
