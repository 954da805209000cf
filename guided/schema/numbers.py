"""JSON numbers as regex AST: exact integer and decimal ranges, and the ``multipleOf`` cases that are.

Languages (JSON number syntax throughout):

* ``integer``: ``-?(0|[1-9][0-9]*)`` optionally followed by ``.0`` (JSON Schema counts ``1.0`` as an
  integer; one zero only, so generation cannot loop on zeros); no exponent form.
* ``number`` without bounds: the full JSON number grammar, exponent included.
* ``number`` with bounds that only ask for a sign (``minimum: 0``, ``exclusiveMaximum: 0``): every
  spelling, exponent included.
* ``number`` with other bounds or ``multipleOf``: plain decimals without an exponent, so the
  comparison with the bound is exact digit by digit. Every finite decimal has such a spelling, so
  this restricts what is generated, never what the schema allows through.

Range languages are built digit by digit (no intersection), so they cost the automaton nothing extra.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from functools import lru_cache

from guided.errors import SchemaError
from guided.grammar import at_rest
from guided.grammar.regex_ast import (
    EMPTY,
    EPSILON,
    Node,
    alt,
    chars,
    intersect,
    literal,
    optional,
    repeat,
    seq,
)
from guided.schema.drafts import numeric_bounds

__all__ = [
    "integer_node",
    "number_node",
    "JSON_NUMBER",
    "JSON_INTEGER",
    "PLAIN_NUMBER",
    "canonical_number",
    "plain_number",
    "saturated_number",
    "MAX_ENUMERATED_MULTIPLES",
]

DIGIT = chars([(0x30, 0x39)])
NONZERO = chars([(0x31, 0x39)])
DIGITS = repeat(DIGIT, 0, None)
UINT = alt(literal("0"), seq(NONZERO, DIGITS))
INT_FRAC = optional(literal(".0"))  # Python writes integral floats so; one zero keeps it bounded
FRAC = optional(seq(literal("."), repeat(DIGIT, 1, None)))
EXP = optional(
    seq(
        chars([(0x45, 0x45), (0x65, 0x65)]),
        optional(chars([(0x2B, 0x2B), (0x2D, 0x2D)])),
        repeat(DIGIT, 1, None),
    )
)
JSON_INTEGER = seq(optional(literal("-")), UINT, INT_FRAC)
JSON_NUMBER = seq(optional(literal("-")), UINT, FRAC, EXP)
# Numbers without an exponent. Where a complement is taken (``not``, ``if``/``else``, ``oneOf``,
# ``contains``) values are compared among these spellings, because the set of all spellings of a
# value is not regular once exponents are allowed (1, 1.0, 10e-1, 100e-2, ...); without exponents
# the spellings of a value are its canonical one with trailing fraction zeros (and ``-0`` for 0),
# which ``saturated_number`` and ``integer_node(zeros=True)`` spell out.
PLAIN_NUMBER = seq(optional(literal("-")), UINT, FRAC)
MAX_ENUMERATED_MULTIPLES = 2000
MAX_DIVISOR = 128  # largest coprime part of a multipleOf on unbounded ranges: part * MAX_DIGITS * 10 nodes
MAX_DIGITS = 18


def canonical_number(v: int | float) -> str:
    """The shortest spelling of a finite number without exponent (``1.0`` -> ``1``, ``1e-07`` ->
    ``0.0000001``, ``-0.0`` -> ``0``)."""
    if isinstance(v, int):
        return str(v)
    d = Decimal(repr(float(v)))
    if d == 0:
        return "0"
    text = format(d, "f")  # no exponent, exact (format does not round)
    return text.rstrip("0").rstrip(".") if "." in text else text


def plain_number(v: int | float) -> str:
    """The value's JSON spelling if it has no exponent, else ``canonical_number``."""
    import json

    text = json.dumps(v)
    return canonical_number(v) if "e" in text or "E" in text else text


def saturated_number(v: int | float) -> Node:
    """Every spelling of the value without an exponent: the canonical one, trailing fraction zeros,
    and ``-0`` for zero (``1`` -> ``1(.0+)?``, ``1.5`` -> ``1.50*``)."""
    c = canonical_number(v)
    zeros = repeat(literal("0"), 1, None)
    if "." in c:
        return seq(literal(c), repeat(literal("0"), 0, None))
    node = seq(literal(c), optional(seq(literal("."), zeros)))
    return seq(optional(literal("-")), node) if c == "0" else node


def _digit(lo: int, hi: int) -> Node:
    return chars([(0x30 + lo, 0x30 + hi)]) if lo <= hi else EMPTY


# ---------------------------------------------------------------- non-negative integer parts
def _same_len(lo: str, hi: str) -> Node:
    """Digit strings of len(lo) == len(hi) between lo and hi (leading zeros allowed)."""
    if not lo:
        return EPSILON
    n = len(lo) - 1
    a, b = int(lo[0]), int(hi[0])
    if a == b:
        return seq(literal(lo[0]), _same_len(lo[1:], hi[1:]))
    if lo[1:] == "0" * n and hi[1:] == "9" * n:
        return seq(_digit(a, b), repeat(DIGIT, n, n))
    return alt(
        seq(literal(lo[0]), _same_len(lo[1:], "9" * n)),
        seq(_digit(a + 1, b - 1), repeat(DIGIT, n, n)),
        seq(literal(hi[0]), _same_len("0" * n, hi[1:])),
    )


def uint_range(lo: int, hi: int | None) -> Node:
    """Canonical decimal spellings (no leading zeros) of the integers in [lo, hi], lo >= 0."""
    if hi is not None and hi < lo:
        return EMPTY
    parts = []
    length = len(str(lo))
    top = len(str(hi)) if hi is not None else length
    for n in range(length, top + 1):
        a = max(lo, 10 ** (n - 1) if n > 1 else 0)
        b = 10**n - 1 if hi is None else min(hi, 10**n - 1)
        if a <= b:
            parts.append(_same_len(str(a).zfill(n), str(b).zfill(n)))
    if hi is None:  # every longer spelling is larger
        parts.append(seq(NONZERO, repeat(DIGIT, length, None)))
    return alt(*parts)


# ---------------------------------------------------------------- fractions (digits after the point)
def _frac(empty_ok: bool, body: Node) -> Node:
    """The fraction syntax: '' (when empty_ok) or '.' + a non-empty digit string from body."""
    return alt(EPSILON if empty_ok else EMPTY, seq(literal("."), body))


def _frac_ge(f: str, strict: bool) -> Node:
    if not f:
        return _frac(
            not strict,
            repeat(DIGIT, 1, None) if not strict else seq(repeat(literal("0"), 0, None), NONZERO, DIGITS),
        )
    parts = [seq(literal(f[:i]), _digit(int(f[i]) + 1, 9), DIGITS) for i in range(len(f))]
    tail = seq(repeat(literal("0"), 0, None), NONZERO, DIGITS) if strict else DIGITS
    return _frac(False, alt(*parts, seq(literal(f), tail)))


def _frac_le(f: str, strict: bool) -> Node:
    if not f:
        return EMPTY if strict else _frac(True, repeat(literal("0"), 1, None))
    parts = [seq(literal(f[:i]), _digit(0, int(f[i]) - 1), DIGITS) for i in range(len(f))]
    parts += [literal(f[:i]) for i in range(1, len(f))]
    if not strict:
        parts.append(seq(literal(f), repeat(literal("0"), 0, None)))
    return _frac(True, alt(*parts))


def _split(d: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    text = format(d, "f")
    ip, _, fp = text.partition(".")
    return int(ip), fp.rstrip("0")


def _nonneg(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> Node:
    """Plain decimals (no sign, no exponent) with lo <(=) x <(=) hi; bounds >= 0 or None."""
    lo = lo if lo is not None else Decimal(0)
    li, lf = _split(lo)
    lower_same = _frac_ge(lf, lo_strict)
    if hi is None:
        return alt(seq(literal(str(li)), lower_same), seq(uint_range(li + 1, None), FRAC))
    hi_i, hf = _split(hi)
    if hi_i == li:
        upper_same = _frac_le(hf, hi_strict)
        if EMPTY in (lower_same, upper_same):
            return EMPTY
        return seq(literal(str(li)), intersect(lower_same, upper_same))
    return alt(
        seq(literal(str(li)), lower_same),
        seq(uint_range(li + 1, hi_i - 1), FRAC),
        seq(literal(str(hi_i)), _frac_le(hf, hi_strict)),
    )


def decimal_range(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> Node:
    """Signed plain decimals (JSON syntax, no exponent) in the interval."""
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_strict or hi_strict))):
        return EMPTY
    parts = []
    if hi is None or hi >= 0:  # the non-negative side
        if lo is None or lo < 0:
            parts.append(_nonneg(None, False, hi, hi_strict))
        else:
            parts.append(_nonneg(lo, lo_strict, hi, hi_strict))
    if lo is None or lo < 0:  # the negative side, as '-' and the magnitude; "-0" is 0
        mag_hi = None if lo is None else -lo
        if hi is None or hi >= 0:
            zero_ok = hi is None or hi > 0 or not hi_strict
            neg = _nonneg(Decimal(0), not zero_ok, mag_hi, lo_strict if lo is not None else False)
        else:
            neg = _nonneg(-hi, hi_strict, mag_hi, lo_strict if lo is not None else False)
        parts.append(seq(literal("-"), neg))
    elif lo == 0 and not lo_strict:
        parts.append(seq(literal("-0"), _frac(True, repeat(literal("0"), 1, None))))
    return alt(*parts)


# ---------------------------------------------------------------- integers
def _int_bounds(schema: dict) -> tuple[int | None, int | None]:
    schema = numeric_bounds(schema)
    lo, hi = None, None
    for key, strict in (("minimum", False), ("exclusiveMinimum", True)):
        v = schema.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        d = _dec(v)
        b = (
            int(d.to_integral_value(rounding="ROUND_FLOOR")) + 1
            if strict
            else int(d.to_integral_value(rounding="ROUND_CEILING"))
        )
        lo = b if lo is None else max(lo, b)
    for key, strict in (("maximum", False), ("exclusiveMaximum", True)):
        v = schema.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        d = _dec(v)
        b = (
            int(d.to_integral_value(rounding="ROUND_CEILING")) - 1
            if strict
            else int(d.to_integral_value(rounding="ROUND_FLOOR"))
        )
        hi = b if hi is None else min(hi, b)
    return lo, hi


def _int_range(lo: int | None, hi: int | None) -> Node:
    if lo is None and hi is None:
        return seq(optional(literal("-")), UINT)
    parts = []
    if hi is None or hi >= 0:
        parts.append(uint_range(max(lo or 0, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        mags = uint_range(max(-hi, 1) if hi is not None and hi < 0 else 1, None if lo is None else -lo)
        parts.append(seq(literal("-"), mags))
    if (lo is None or lo <= 0) and (hi is None or hi >= 0):
        parts.append(literal("-0"))
    return alt(*parts)


def integer_node(schema: dict, path: str, lenient: bool, warn, frac: bool = True, zeros: bool = False) -> Node:
    """The integer language of a schema's numeric keywords (minimum.., multipleOf); ``frac``
    allows the ``1.0`` spelling (draft-06 on), ``zeros`` any number of zeros there (``1.000``:
    every spelling without exponent, for a language that gets complemented)."""
    lo, hi = _int_bounds(schema)
    body = _int_range(lo, hi)
    mult = schema.get("multipleOf")
    if mult is not None:
        body = _int_multiple(body, _dec(mult), lo, hi, path, lenient, warn)
    if not frac:
        return body
    return seq(body, optional(seq(literal("."), repeat(literal("0"), 1, None)))) if zeros else seq(body, INT_FRAC)


def _int_multiple(body: Node, m: Decimal, lo, hi, path, lenient, warn) -> Node:
    if m <= 0:
        raise SchemaError("multipleOf must be > 0", path + "/multipleOf")
    if m != m.to_integral_value():
        # an integer multiple of a fraction p/q is a multiple of p / gcd(p, q)... keep exact cases only
        frac = m.as_integer_ratio()
        from math import gcd

        p, q = frac
        m = Decimal(p // gcd(p, q))
    k = int(m)
    if k == 1:
        return body
    twos, fives, rest = _factor(k)
    if rest == 1:  # divisibility by 2^a 5^b depends only on the last max(a, b) digits
        n = max(twos, fives)
        mod = 10**n
        tails = [str(t).zfill(n) for t in range(0, mod, k)]
        short = [str(t) for t in range(0, mod, k)]
        sign = optional(literal("-"))
        shape = alt(
            seq(sign, alt(*(literal(s) for s in short))),
            seq(sign, NONZERO, DIGITS, alt(*(literal(t) for t in tails))),
        )
        return intersect(body, shape) if body != seq(optional(literal("-")), UINT) else shape
    if lo is not None and hi is not None and (hi - lo) // k <= MAX_ENUMERATED_MULTIPLES:
        first = -(-lo // k) * k
        values = [literal(str(v)) for v in range(first, hi + 1, k)]
        return alt(*values, literal("-0") if lo <= 0 <= hi else EMPTY)
    parts = _coprime_parts(rest)
    if max(parts) <= MAX_DIVISOR:  # divisible by each coprime part (2^a 5^b by the tails above)
        head = _int_multiple(body, Decimal(k // rest), lo, hi, path, lenient, warn) if k != rest else body
        shapes = [seq(optional(literal("-")), _divisible(q, MAX_DIGITS)) for q in parts]
        return intersect(*shapes, *([head] if head != seq(optional(literal("-")), UINT) else []))
    msg = f"multipleOf {k} on an unbounded integer range is not expressible here"
    if not lenient:
        raise SchemaError(msg, path + "/multipleOf")
    warn(f"{msg}; relaxed to any integer in range", path + "/multipleOf")
    return body


# a schema repeats its multipleOf (one divisor's automaton was built 9 times in one schema): kept for the
# compiles running, then dropped (``at_rest``: up to ~23k nodes each)
@lru_cache(maxsize=8)
def _divisible(k: int, digits: int) -> Node:
    """Integers of at most ``digits`` digits divisible by k: a walk over (position, remainder).
    Longer integers are not generated (a restriction of the output, never of validity)."""
    layer = [EPSILON if r == 0 else EMPTY for r in range(k)]  # after the last digit
    for _ in range(digits - 1):
        layer = [
            alt(
                EPSILON if r == 0 else EMPTY,
                *(seq(literal(str(d)), layer[(10 * r + d) % k]) for d in range(10)),
            )
            for r in range(k)
        ]
    return alt(literal("0"), *(seq(literal(str(d)), layer[d % k]) for d in range(1, 10)))


@lru_cache(maxsize=8)
def _decimal_multiples(c: int, n: int) -> Node:
    """Unsigned plain decimals that are multiples of ``c / 10^n``: the digits of the value times
    ``10^n`` (the integer part, then the fraction padded with zeros to n digits) divisible by c. A
    walk over (fraction digits written, remainder mod c); fraction digits past the n-th are zeros.
    The integer part has at most ``MAX_DIGITS`` digits (a restriction of the output only)."""

    def ends(j: int, r: int) -> Node:  # j fraction digits written, remainder r: may the number end?
        return EPSILON if r * 10 ** (n - j) % c == 0 else EMPTY

    # after[j][r]: what may follow j >= 1 fraction digits with remainder r
    after = [[EMPTY] * c for _ in range(n + 1)]
    after[n] = [seq(repeat(literal("0"), 0, None), ends(n, r)) for r in range(c)]
    for j in range(n - 1, 0, -1):
        after[j] = [alt(ends(j, r), *(seq(literal(str(d)), after[j + 1][(10 * r + d) % c]) for d in range(10)))
                    for r in range(c)]  # fmt: skip
    # tail[r]: what may follow the integer part with remainder r (the fraction, if any)
    tail = [alt(ends(0, r), seq(literal("."), alt(*(seq(literal(str(d)), after[1][(10 * r + d) % c])
                                                    for d in range(10))))) for r in range(c)]  # fmt: skip
    layer = tail
    for _ in range(MAX_DIGITS - 1):
        layer = [alt(tail[r], *(seq(literal(str(d)), layer[(10 * r + d) % c]) for d in range(10))) for r in range(c)]
    return alt(seq(literal("0"), tail[0]), *(seq(literal(str(d)), layer[d % c]) for d in range(1, 10)))


at_rest(_divisible.cache_clear)
at_rest(_decimal_multiples.cache_clear)


def _coprime_parts(k: int) -> list[int]:
    """k as pairwise coprime factors: 2^a 5^b together (divisibility by it depends on the last
    digits), then each other prime power. A multiple of k is exactly a multiple of every part, so
    the walks over remainders cost the sum of the parts instead of their product."""
    twos, fives, rest = _factor(k)
    parts = [2**twos * 5**fives] if twos or fives else []
    p = 3
    while p * p <= rest:
        q = 1
        while rest % p == 0:
            rest //= p
            q *= p
        if q > 1:
            parts.append(q)
        p += 2
    return parts + ([rest] if rest > 1 else []) or [1]


def _factor(k: int) -> tuple[int, int, int]:
    twos = fives = 0
    while k % 2 == 0:
        k //= 2
        twos += 1
    while k % 5 == 0:
        k //= 5
        fives += 1
    return twos, fives, k


# ---------------------------------------------------------------- numbers
def _num_bounds(schema: dict):
    schema = numeric_bounds(schema)
    lo = lo_s = hi = hi_s = None
    for key, strict in (("minimum", False), ("exclusiveMinimum", True)):
        v = schema.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            d = _dec(v)
            if lo is None or d > lo or (d == lo and strict):
                lo, lo_s = d, strict
    for key, strict in (("maximum", False), ("exclusiveMaximum", True)):
        v = schema.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            d = _dec(v)
            if hi is None or d < hi or (d == hi and strict):
                hi, hi_s = d, strict
    return lo, bool(lo_s), hi, bool(hi_s)


def number_node(schema: dict, path: str, lenient: bool, warn, zeros: bool = False) -> Node:
    """The number language of a schema's numeric keywords (``zeros``: see ``integer_node``)."""
    lo, lo_s, hi, hi_s = _num_bounds(schema)
    mult = schema.get("multipleOf")
    if mult is not None:
        m = _dec(mult)
        if m <= 0:
            raise SchemaError("multipleOf must be > 0", path + "/multipleOf")
        if m == m.to_integral_value():  # a multiple of an integer is an integer
            return integer_node(schema, path, lenient, warn, zeros=zeros)
        exp = m.normalize().as_tuple()
        n = -exp.exponent
        c = int("".join(map(str, exp.digits)))  # m = c / 10^n
        shape = None
        if c == 1:  # 10^-n: at most n significant fraction digits
            frac = optional(seq(literal("."), repeat(DIGIT, 1, n), repeat(literal("0"), 0, None)))
            shape = seq(optional(literal("-")), UINT, frac)
        elif max(parts := _coprime_parts(c)) <= MAX_DIVISOR:  # a multiple of each coprime part of c / 10^n
            shape = intersect(*(seq(optional(literal("-")), _decimal_multiples(q, n)) for q in parts))
        if shape is not None:
            return intersect(decimal_range(lo, lo_s, hi, hi_s), shape) if (lo, hi) != (None, None) else shape
        msg = (
            f"multipleOf {mult} on numbers is not expressible here (only integers, powers of ten, and "
            f"c / 10^n where c's coprime prime-power parts are <= {MAX_DIVISOR})"
        )
        if not lenient:
            raise SchemaError(msg, path + "/multipleOf")
        warn(f"{msg}; relaxed", path + "/multipleOf")
    if lo is None and hi is None:
        return JSON_NUMBER
    if not zeros and lo in (None, 0) and hi in (None, 0):
        return _signed(lo, lo_s, hi, hi_s)
    return decimal_range(lo, lo_s, hi, hi_s)


# a mantissa whose value is 0, and one whose value is not
ZERO_MANTISSA = seq(literal("0"), optional(seq(literal("."), repeat(literal("0"), 1, None))))
NONZERO_MANTISSA = alt(
    seq(NONZERO, DIGITS, FRAC),
    seq(literal("0."), repeat(literal("0"), 0, None), NONZERO, DIGITS),
)


def _signed(lo: Decimal | None, lo_strict: bool, hi: Decimal | None, hi_strict: bool) -> Node:
    """Numbers whose bounds only ask for a sign (``minimum: 0``, ``exclusiveMaximum: 0``, ...), in
    every spelling, the exponent form included: the sign of m·10^e is the sign of m."""
    parts = []
    if hi is None:
        parts.append(seq(NONZERO_MANTISSA, EXP))
    if lo is None:
        parts.append(seq(literal("-"), NONZERO_MANTISSA, EXP))
    if (lo is None or not lo_strict) and (hi is None or not hi_strict):
        parts.append(seq(optional(literal("-")), ZERO_MANTISSA, EXP))
    return alt(*parts)


def _dec(v) -> Decimal:
    try:
        return Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    except (InvalidOperation, TypeError, ValueError) as e:
        raise SchemaError(f"not a number: {v!r}") from e
