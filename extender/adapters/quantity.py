"""Kubernetes resource quantities and annotation integers, read as the API server reads them.

    parse_quantity(text)                   a quantity string, exactly as apimachinery's ParseQuantity
    json_quantity(value)                   a Quantity field's JSON value, as Quantity.UnmarshalJSON
    pod_quantity(value, what, whole)       a pod's request: never negative, whole where Kubernetes says so
    bounded_int(text, what, lo, hi)        an annotation integer (min-member, timeout-seconds)

Each raises ``QuantityError`` (a ValueError) and nothing else, whatever it is given. Its message
quotes the offending value through ``echo.shown`` (cut to 40 characters), so an error can be
echoed to a client or into a Kubernetes Event however large the input was.

The grammar and the numbers follow k8s.io/apimachinery/pkg/api/resource (quantity.go and
suffix.go at v0.37.2, the Kubernetes 1.37.2 that tools/ pins; the parser is the same in 1.35 and
1.36), including its quirks, which tests/adapters/test_quantity.py pins with vectors from its
quantity_test.go:

    <quantity> ::= <sign>? <digits>? ("." <digits>?)? <suffix>
    <suffix>   ::= "" | n u m k M G T P E | Ki Mi Gi Ti Pi Ei | (e|E) <sign>? <digits>

- A value is rounded up (away from zero) to a whole number of nano units: "0.1n" is 1n.
- Binary-suffixed values are capped at 2^63-1 ("9Ei" is 2^63-1); decimal ones are not capped.
- "." and "-" alone, and a bare suffix ("k", "Ki") are 0; ".Ei" and "-Pi" are errors: Go takes
  a fast path for short values that never asks for a digit, a slow one for the rest that does.
- The exponent is read as an int64 and kept as int32, wrapping: "1e4294967296" is 1.

Two bounds of railyard's own, where Go has none (so input from any pod stays cheap): at most
``MAX_QUANTITY_CHARS`` characters, and a magnitude below ``MAX_MAGNITUDE``; anything past either
is a QuantityError, never a number built from a billion-digit exponent.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from extender.adapters.echo import shown

MAX_QUANTITY_CHARS = 64
"""Longest quantity read; the longest in apimachinery's own tests has 25 ("-10000000000000000000000m")."""
QUANTITIES_KEPT = 1024
"""Quantities read last, kept parsed (a Fraction is immutable): a pod's watch events repeat its
requests, and most clusters use a few dozen values. Bounded, so no input grows it."""

MAX_MAGNITUDE = 10**36
"""Decimal quantities at or above this are refused. Go keeps decimals above int64 exactly (its
own tests parse "12E", 1.2e19), and 18 significant digits with the suffix E stay below 10^36;
nothing railyard counts comes near."""

MAX_INT_CHARS = 20
"""Longest annotation integer read (2^63 has 19 digits)."""

SUFFIXES = "n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>"

_INT64_MAX = 2**63 - 1
_NANO = 10**9

# Go's parseQuantityString is a greedy scanner; possessive quantifiers make this regex scan the
# same way (no backtracking can find a split the scanner would not).
_QUANTITY = re.compile(r"([+-]?+)([0-9]*+)(?:\.([0-9]*+))?+([eEinumkKMGTP]*+[+-]?+[0-9]*+)")
_EXPONENT = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt(s, 10, 64) accepts

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

# strings.TrimSpace in Quantity.UnmarshalJSON, less "\t\n\v\f\r": those reach Go escaped
# inside a JSON string ("\t"), and a backslash is no quantity.
_JSON_SPACE = " \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
              "\u2028\u2029\u202f\u205f\u3000"


class QuantityError(ValueError):
    """A value that is not a readable quantity or integer; the message says why, with numbers."""


def parse_quantity(text: str) -> Fraction:
    """``text`` as ParseQuantity reads it (no whitespace allowed), as an exact Fraction."""
    if not isinstance(text, str):
        raise QuantityError(f"a quantity must be a string, got {shown(text)}")
    return _parse(text)


@lru_cache(maxsize=QUANTITIES_KEPT)
def _parse(text: str) -> Fraction:
    if not text:
        raise QuantityError("a quantity must not be empty")
    if len(text) > MAX_QUANTITY_CHARS:
        raise _too_long(text)
    if text == "0":
        return Fraction(0)
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise QuantityError(f"quantity {shown(text)} is not a number with an optional suffix ({SUFFIXES})")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    negative = sign == "-"
    num = whole.lstrip("0") or "0"
    has_digits = bool(whole or frac)
    if suffix in _BINARY:
        return _binary(text, negative, num, frac, _BINARY[suffix], has_digits)
    if suffix in _DECIMAL:
        exponent = _DECIMAL[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT.fullmatch(suffix[1:]) \
            and -(2**63) <= int(suffix[1:]) <= _INT64_MAX:
        exponent = _int32(int(suffix[1:]))
    else:
        raise QuantityError(f"quantity {shown(text)} has an unknown suffix {suffix!r} ({SUFFIXES})")
    return _decimal(text, negative, num, frac, exponent, has_digits)


def _int32(x: int) -> int:
    """Go's int32 arithmetic: wraps around."""
    return (x + 2**31) % 2**32 - 2**31


def _decimal(text: str, negative: bool, num: str, frac: str, exponent: int, has_digits: bool) -> Fraction:
    mantissa = int(num + frac)
    if len(num) + len(frac) <= 18 and (scale := _int32(exponent - len(frac))) >= -9:
        # Go's int64 fast path: exact, no digit needed, scale as int32 arithmetic leaves it.
        power = scale
    else:
        # Go's inf.Dec path: SetString wants a digit; the scale is the digits after the point
        # plus the negated exponent, each step in int32.
        if not has_digits:
            raise QuantityError(f"quantity {shown(text)} has no digits")
        power = -_int32(len(frac) + _int32(-exponent))
    value = _scaled(text, mantissa, power)
    return -value if negative else value


def _scaled(text: str, mantissa: int, power: int) -> Fraction:
    """mantissa * 10^power rounded up to a nano unit, refused at or past MAX_MAGNITUDE, without
    ever building a number from a huge ``power``."""
    if mantissa == 0:
        return Fraction(0)
    digits = len(str(mantissa))  # at most MAX_QUANTITY_CHARS
    if digits - 1 + power >= 36:  # mantissa * 10^power >= 10^36
        raise _out_of_range(text)
    if digits + power < -9:  # below 1n: rounds up to it
        return Fraction(1, _NANO)
    value = Fraction(mantissa) * Fraction(10) ** power
    if value >= MAX_MAGNITUDE:
        raise _out_of_range(text)
    return _round_up_nano(value)


def _binary(text: str, negative: bool, num: str, frac: str, exponent: int, has_digits: bool) -> Fraction:
    if not frac and 14 - len(num) - 3 * (exponent // 10) >= 0 and (fast := int(num) << exponent) <= _INT64_MAX:
        value = Fraction(fast)  # Go's int64 fast path
    else:
        if not has_digits:
            raise QuantityError(f"quantity {shown(text)} has no digits")
        value = min(_round_up_nano(Fraction(int(num + frac), 10 ** len(frac)) * 2**exponent), Fraction(_INT64_MAX))
    return -value if negative else value


def _round_up_nano(value: Fraction) -> Fraction:
    return Fraction(-((-value.numerator * _NANO) // value.denominator), _NANO)


def _too_long(value: Any) -> QuantityError:
    return QuantityError(f"a quantity must be at most {MAX_QUANTITY_CHARS} characters long, got {shown(value)}")


def _out_of_range(text: str) -> QuantityError:
    return QuantityError(f"quantity {shown(text)} is out of range: railyard reads magnitudes below 10^36")


def json_quantity(value: Any) -> Fraction:
    """A Quantity field's value as decoded from JSON, read as Quantity.UnmarshalJSON reads it:
    a string trimmed of surrounding spaces, a number by its JSON text, null as 0.

    A float is read from its shortest repr, the JSON text unless that had over 17 digits.
    """
    if value is None:
        return Fraction(0)  # UnmarshalJSON("null") leaves the zero Quantity
    if isinstance(value, str):
        if len(value) > MAX_QUANTITY_CHARS:  # before strip: bounded work on any input
            raise _too_long(value)
        return parse_quantity(value.strip(_JSON_SPACE))
    if isinstance(value, bool):
        raise QuantityError(f"a quantity must be a string or a number, got {shown(value)}")
    if isinstance(value, int):
        if not -(10**MAX_QUANTITY_CHARS) < value < 10**MAX_QUANTITY_CHARS:  # before str(): bounded
            raise _too_long(value)
        return parse_quantity(str(value))
    if isinstance(value, float):
        return parse_quantity(repr(value))
    raise QuantityError(f"a quantity must be a string or a number, got {shown(value)}")


def pod_quantity(value: Any, what: str, whole: bool) -> Fraction:
    """A quantity a pod states (a container's request or limit, the pod's overhead), refused
    where the API server refuses it (ValidateResourceQuantityValue in
    pkg/apis/core/validation): a negative value, and where ``whole`` (an integer resource:
    extended resources such as nvidia.com/gpu, and pods) one that is not a whole number, so
    "500m" GPUs is an error, not 0 nor 1. Messages, for ``what`` = "init container w nvidia.com/gpu":
        init container w nvidia.com/gpu: quantity 'abc' is not a number with an optional suffix (...)
        init container w nvidia.com/gpu must be a whole number, got '500m' (0.5)
        init container w nvidia.com/gpu must not be negative, got -8
    """
    try:
        q = json_quantity(value)
    except QuantityError as exc:
        raise QuantityError(f"{what}: {exc}") from None
    if q < 0:
        raise QuantityError(f"{what} must not be negative, got {_with_number(value, q)}")
    if whole and q.denominator != 1:
        raise QuantityError(f"{what} must be a whole number, got {_with_number(value, q)}")
    return q


def decimal_text(q: Fraction) -> str:
    """A quantity (a whole number of nano units) as a plain decimal: 0.5, -1536, 0.000000001."""
    n = q * _NANO
    if n.denominator != 1:
        raise ValueError(f"{q} is not a whole number of nano units")
    sign = "-" if n < 0 else ""
    units, nanos = divmod(abs(n.numerator), _NANO)
    return f"{sign}{units}" + (f".{nanos:09d}".rstrip("0") if nanos else "")


def _with_number(value: Any, q: Fraction) -> str:
    text = decimal_text(q)
    return shown(value) if text in (value, str(value)) else f"{shown(value)} ({text})"


def bounded_int(text: Any, what: str, lo: int, hi: int) -> int:
    """An integer written in ASCII digits (an annotation value, or a JSON integer from a
    PodGroup spec), from ``lo`` to ``hi``. Unicode digits ("²", "٣"), signs, spaces, fractions
    and exponents are refused. The one message, for what = "railyard.io/min-member":
        railyard.io/min-member must be an integer from 1 to 100000, got '1000000000000'
    """
    number: int | None = None
    if isinstance(text, str):
        if len(text) <= MAX_INT_CHARS and text.isascii() and text.isdigit():
            number = int(text)
    elif isinstance(text, int) and not isinstance(text, bool):
        number = text
    if number is None or not lo <= number <= hi:
        raise QuantityError(f"{what} must be an integer from {lo} to {hi}, got {shown(text)}")
    return number
