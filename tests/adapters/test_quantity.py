"""Quantities read as Kubernetes reads them, and the integers railyard reads from annotations.

Vectors marked "quantity_test.go" are copied from k8s.io/apimachinery v0.37.2 (Kubernetes
1.37.2, the version tools/ pins), pkg/api/resource/quantity_test.go: TestQuantityParse (its
table, its negative and explicit "+" variants, its invalid list), TestParseQuantityString,
TestQuantityString (canonical and alternate spellings), TestQuantityParseEmit, TestParseQuantity
and TestJSONWhitespace. decQuantity(m, e) there is m * 10^e here.
"""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.adapters.quantity import (
    MAX_MAGNITUDE,
    MAX_QUANTITY_CHARS,
    QuantityError,
    bounded_int,
    decimal_text,
    json_quantity,
    parse_quantity,
    pod_quantity,
)
from extender.adapters.echo import clip, shown

INT64_MAX = 2**63 - 1


def dec(mantissa: int, exponent: int) -> Fraction:
    return Fraction(mantissa) * Fraction(10) ** exponent


# quantity_test.go TestQuantityParse, its table: (input, mantissa, exponent).
PARSE = [
    ("0", 0, 0), ("0n", 0, 0), ("0u", 0, 0), ("0m", 0, 0), ("0Ki", 0, 0), ("0k", 0, 0),
    ("0Mi", 0, 0), ("0M", 0, 0), ("0Gi", 0, 0), ("0G", 0, 0), ("0Ti", 0, 0), ("0T", 0, 0),
    # Quantity less numbers are allowed
    ("1", 1, 0),
    # Binary suffixes
    ("1Ki", 1024, 0), ("8Ki", 8 * 1024, 0), ("7Mi", 7 * 1024**2, 0), ("6Gi", 6 * 1024**3, 0),
    ("5Ti", 5 * 1024**4, 0), ("4Pi", 4 * 1024**5, 0), ("3Ei", 3 * 1024**6, 0),
    ("10Ti", 10 * 1024**4, 0), ("100Ti", 100 * 1024**4, 0),
    # Decimal suffixes
    ("5n", 5, -9), ("4u", 4, -6), ("3m", 3, -3), ("9", 9, 0), ("8k", 8, 3), ("50k", 5, 4),
    ("7M", 7, 6), ("6G", 6, 9), ("5T", 5, 12), ("40T", 4, 13), ("300T", 3, 14), ("2P", 2, 15),
    ("1E", 1, 18),
    # Decimal exponents
    ("1E-3", 1, -3), ("1e3", 1, 3), ("1E6", 1, 6), ("1e9", 1, 9), ("1E12", 1, 12), ("1e15", 1, 15),
    ("1E18", 1, 18),
    # Nonstandard but still parsable
    ("1e14", 1, 14), ("1e13", 1, 13), ("1e3", 1, 3), ("100.035k", 100035, 0),
    # Things that look like floating point
    ("0.001", 1, -3), ("0.0005k", 5, -1), ("0.005", 5, -3), ("0.05", 5, -2), ("0.5", 5, -1),
    ("0.00050k", 5, -1), ("0.00500", 5, -3), ("0.05000", 5, -2), ("0.50000", 5, -1),
    ("0.5e0", 5, -1), ("0.5e-1", 5, -2), ("0.5e-2", 5, -3), ("0.5e0", 5, -1), ("10.035M", 10035, 3),
    ("1.2e3", 12, 2), ("1.3E+6", 13, 5), ("1.40e9", 14, 8), ("1.53E12", 153, 10), ("1.6e15", 16, 14),
    ("1.7E18", 17, 17),
    ("9.01", 901, -2), ("8.1k", 81, 2), ("7.123456M", 7123456, 0), ("6.987654321G", 6987654321, 0),
    ("5.444T", 5444, 9), ("40.1T", 401, 11), ("300.2T", 3002, 11), ("2.5P", 25, 14), ("1.01E", 101, 16),
    # Things that saturate/round
    ("3.001n", 4, -9), ("1.1E-9", 2, -9), ("0.0000000001", 1, -9), ("0.0000000005", 1, -9),
    ("0.00000000050", 1, -9), ("0.5e-9", 1, -9), ("0.9n", 1, -9), ("0.00000012345", 124, -9),
    ("0.00000012354", 124, -9), ("9Ei", INT64_MAX, 0), ("9223372036854775807Ki", INT64_MAX, 0),
    ("12E", 12, 18),
    # We'll accept fractional binary stuff, too.
    ("100.035Ki", 10243584, -2), ("0.5Mi", 512 * 1024, 0), ("0.05Gi", 536870912, -1),
    ("0.025Ti", 274877906944, -1),
    # Things written by trolls
    ("0.000000000001Ki", 2, -9),  # rounds up, changes format
    (".001", 1, -3), (".0001k", 100, -3), ("1.", 1, 0), ("1.G", 1, 9),
]

# quantity_test.go TestQuantityParse, its invalid list (and "" and TestQuantityParseNonNumericPanic).
INVALID = ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-",
           " 1", "1 ",  # trailing whitespace is forbidden
           "", "Non-Numeric"]

# quantity_test.go TestParseQuantity: the edges of 18 digits, int64 and 20 digits.
EDGES = [
    ("-999999999999999999", "-999999999999999999"), ("999999999999999999", "999999999999999999"),
    ("-999999999999999999.0", "-999999999999999999"), ("999999999999999999.0", "999999999999999999"),
    ("-999999999999999999.1", "-999999999999999999.1"), ("999999999999999999.1", "999999999999999999.1"),
    ("-9999999999999999999", "-9999999999999999999"), ("9999999999999999999", "9999999999999999999"),
    ("-1E", "-1000000000000000000"), ("1E", "1000000000000000000"),
    ("-1000000000000000000", "-1000000000000000000"), ("1000000000000000000", "1000000000000000000"),
    ("-9999999999999999999.0", "-9999999999999999999"), ("9999999999999999999.0", "9999999999999999999"),
    ("-1.0E", "-1000000000000000000"), ("1.0E", "1000000000000000000"),
    ("-1000000000000000000.0", "-1000000000000000000"), ("1000000000000000000.0", "1000000000000000000"),
    ("-9999999999999999999000m", "-9999999999999999999"), ("9999999999999999999000m", "9999999999999999999"),
    ("-9999999999999999999.1", "-9999999999999999999.1"), ("9999999999999999999.1", "9999999999999999999.1"),
    ("-1.0000000000000000001E", "-1000000000000000000.1"), ("1.0000000000000000001E", "1000000000000000000.1"),
    ("-1000000000000000000.1", "-1000000000000000000.1"), ("1000000000000000000.1", "1000000000000000000.1"),
    ("-1.000000000000000001E", "-1000000000000000001"), ("1.000000000000000001E", "1000000000000000001"),
    ("-1000000000000000001", "-1000000000000000001"), ("1000000000000000001", "1000000000000000001"),
    ("-10E", "-10000000000000000000"), ("10E", "10000000000000000000"),
    ("-10000000000000000000", "-10000000000000000000"), ("10000000000000000000", "10000000000000000000"),
    ("-10.0E", "-10000000000000000000"), ("10.0E", "10000000000000000000"),
    ("-10000000000000000000.0", "-10000000000000000000"), ("10000000000000000000.0", "10000000000000000000"),
    ("-10000000000000000000000m", "-10000000000000000000"), ("10000000000000000000000m", "10000000000000000000"),
    ("-10.0000000000000000001E", "-10000000000000000000.1"), ("10.0000000000000000001E", "10000000000000000000.1"),
    ("-10000000000000000000.1", "-10000000000000000000.1"), ("10000000000000000000.1", "10000000000000000000.1"),
    ("-10.000000000000000001E", "-10000000000000000001"), ("10.000000000000000001E", "10000000000000000001"),
    ("-10000000000000000001", "-10000000000000000001"), ("10000000000000000001", "10000000000000000001"),
    ("-9223372036854775809", "-9223372036854775809"), ("9223372036854775806", "9223372036854775806"),
    ("-9223372036854775809.0", "-9223372036854775809"), ("9223372036854775806.0", "9223372036854775806"),
    ("-9223372036854775809000m", "-9223372036854775809"), ("9223372036854775806000m", "9223372036854775806"),
    ("-9223372036854775809.1", "-9223372036854775809.1"), ("9223372036854775806.1", "9223372036854775806.1"),
    ("-9223372036854775808", "-9223372036854775808"), ("9223372036854775807", "9223372036854775807"),
    ("-9223372036854775808.0", "-9223372036854775808"), ("9223372036854775807.0", "9223372036854775807"),
    ("-9223372036854775808000m", "-9223372036854775808"), ("9223372036854775807000m", "9223372036854775807"),
    ("-9223372036854775808.1", "-9223372036854775808.1"), ("9223372036854775807.1", "9223372036854775807.1"),
    ("-9223372036854775807", "-9223372036854775807"), ("9223372036854775808", "9223372036854775808"),
    ("-9223372036854775807.0", "-9223372036854775807"), ("9223372036854775808.0", "9223372036854775808"),
    ("-9223372036854775807000m", "-9223372036854775807"), ("9223372036854775808000m", "9223372036854775808"),
    ("-9223372036854775807.1", "-9223372036854775807.1"), ("9223372036854775808.1", "9223372036854775808.1"),
]

# quantity_test.go TestQuantityString: (value, canonical, alternate spelling or "").
SPELLINGS = [
    (dec(1024**3, 0), "1Gi", "1024Mi"), (dec(300 * 1024**2, 0), "300Mi", "307200Ki"),
    (dec(6 * 1024, 0), "6Ki", ""), (dec(1001 * 1024**3, 0), "1001Gi", "1025024Mi"),
    (dec(1024**4, 0), "1Ti", "1024Gi"), (dec(5, 0), "5", "5000m"), (dec(500, -3), "500m", "0.5"),
    (dec(1, 9), "1G", "1000M"), (dec(1000, 6), "1G", "0.001T"), (dec(1, -3), "1m", "1000u"),
    (dec(80, -3), "80m", ""), (dec(1080, -3), "1080m", "1.08"), (dec(108, -2), "1080m", "1080000000n"),
    (dec(300, 6), "300M", ""), (dec(1, 12), "1T", ""), (dec(1234567, 6), "1234567M", ""),
    (dec(1234567, -3), "1234567m", ""), (dec(3, 3), "3k", ""), (dec(1025, 0), "1025", ""),
    (dec(0, 0), "0", ""), (dec(1, 9), "1e9", ".001e12"), (dec(1, -3), "1e-3", "0.001e0"),
    (dec(1, -9), "1e-9", "1000e-12"), (dec(80, -3), "80e-3", ""), (dec(300, 6), "300e6", ""),
    (dec(1, 12), "1e12", ""), (dec(3, 3), "3e3", ""), (dec(0, 0), "0", "00"), (dec(1, -9), "1n", ""),
    (dec(80, -9), "80n", ""), (dec(1080, -9), "1080n", ""), (dec(1, -6), "1u", ""), (dec(1080, -6), "1080u", ""),
]

# quantity_test.go TestQuantityParseEmit: (input, what it prints as).
EMIT = [("1Ki", "1Ki"), ("1Mi", "1Mi"), ("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1000M", "1G"),
        (".001Ki", "1024m"), (".000001Ki", "1024u"), (".000000001Ki", "1024n"), (".000000000001Ki", "2n")]

# Read off quantity.go (not in its tests) and each checked against ParseQuantity v0.37.2, run:
# Go's fast path for short values asks for no digit, its big-decimal path does; the exponent
# is an int64 kept as int32.
QUIRKS = [
    (".", 0), ("-.", 0), ("-", 0), ("+", 0), ("k", 0), ("Ki", 0), (".Ti", 0), ("e5", 0),  # fast path
    (".Ei", None), ("-Pi", None), ("Ei", None), (".e-10", None),  # big-decimal path: no digits
    ("1e4294967296", 1), ("1e-4294967296", 1), ("1e9223372036854775807", Fraction(1, 10)),
    ("1e9223372036854775808", None),  # not an int64
    ("1e+5", 10**5), ("1e05", 10**5), ("1ee5", None), ("1e5e", None), ("1E+", None), ("1k8", None),
    ("0.0000000000000000000001Ei", Fraction(115293, 10**9)), ("99999999999999999999Ei", INT64_MAX),
    ("²", None), ("٣", None), ("1\n", None),
]


@pytest.mark.parametrize("text, mantissa, exponent", PARSE)
def test_quantity_test_go_table(text, mantissa, exponent):
    expected = dec(mantissa, exponent)
    assert parse_quantity(text) == expected
    assert parse_quantity("-" + text) == -expected
    assert parse_quantity("+" + text) == expected


@pytest.mark.parametrize("text", INVALID)
def test_quantity_test_go_invalid(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("text, value", EDGES)
def test_quantity_test_go_edges(text, value):
    assert parse_quantity(text) == Fraction(value)


@pytest.mark.parametrize("value, canonical, alternate", SPELLINGS)
def test_quantity_test_go_spellings_are_one_value(value, canonical, alternate):
    assert parse_quantity(canonical) == value
    if alternate:
        assert parse_quantity(alternate) == value


@pytest.mark.parametrize("text, printed", EMIT)
def test_quantity_test_go_emit(text, printed):
    assert parse_quantity(text) == parse_quantity(printed)
    assert parse_quantity("-" + text) == -parse_quantity(printed)


def test_quantity_test_go_parse_quantity_string_cases():
    # TestParseQuantityString: these scan without error (and so are 0, or 1.025Ti, ...).
    assert parse_quantity(".") == parse_quantity("-.") == 0
    assert parse_quantity("0.025Ti") == Fraction(25, 1000) * 2**40
    assert parse_quantity("-1.025Ti") == -Fraction(1025, 1000) * 2**40
    assert parse_quantity("1E-3") == Fraction(1, 1000)


@pytest.mark.parametrize("text, value", QUIRKS)
def test_go_quirks(text, value):
    if value is None:
        with pytest.raises(QuantityError):
            parse_quantity(text)
    else:
        assert parse_quantity(text) == value


@pytest.mark.parametrize("value, expected", [
    # quantity_test.go TestJSONWhitespace: `" 1"`, `"1 "`, `1`, `10`, `-1` (JSON texts).
    (" 1", 1), ("1 ", 1), (1, 1), (10, 10), (-1, -1),
    (None, 0),  # UnmarshalJSON("null")
    (1.5, Fraction(3, 2)), (8.0, 8), (1e-5, Fraction(1, 10**5)), ("\u00a08\u3000", 8),
])
def test_json_values_read_as_unmarshal_json_does(value, expected):
    assert json_quantity(value) == expected


@pytest.mark.parametrize("value", [True, False, [1], {"a": 1}, "\t1", "1\n", float("nan"), float("inf")])
def test_json_values_that_are_no_quantity(value):
    # "\t" and "\n" can only reach Go escaped inside a JSON string, and a backslash is no quantity.
    with pytest.raises(QuantityError):
        json_quantity(value)


def test_railyard_bounds_where_go_has_none():
    assert parse_quantity("999999999999999999E") == 10**36 - 10**18
    assert parse_quantity("9" * 36) == 10**36 - 1
    for text in ("1e36", "1" + "0" * 36, "1e999999999", "1e2147483647", "1e-2147483648", "-1e36"):
        with pytest.raises(QuantityError, match=r"is out of range: railyard reads magnitudes below 10\^36"):
            parse_quantity(text)
    # Go computes 10^99999999 to round this up to 1n (over 30 s on this machine); we do not.
    assert parse_quantity("1e-99999999") == Fraction(1, 10**9)
    assert parse_quantity("0" * MAX_QUANTITY_CHARS) == 0
    with pytest.raises(QuantityError, match=r"^a quantity must be at most 64 characters long, got "
                                            r"'0000000000000000000000000000000000000000'\.\.\. \(65 characters\)$"):
        parse_quantity("0" * 65)


@pytest.mark.parametrize("text, message", [
    ("abc", "quantity 'abc' is not a number with an optional suffix "
            "(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)"),
    ("0.1mi", "quantity '0.1mi' has an unknown suffix 'mi' (n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)"),
    (".Ei", "quantity '.Ei' has no digits"),
    ("", "a quantity must not be empty"),
    (5, "a quantity must be a string, got 5"),
])
def test_parse_messages(text, message):
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value) == message


GPU = "pod ml/a nvidia.com/gpu"


@pytest.mark.parametrize("value, message", [
    # The fuzz run's findings: each used to count as 0 GPUs, or answer HTTP 500.
    ("abc", f"{GPU}: quantity 'abc' is not a number with an optional suffix "
            "(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)"),
    ("500m", f"{GPU} must be a whole number, got '500m' (0.5)"),
    ("1.0001", f"{GPU} must be a whole number, got '1.0001'"),
    ("1n", f"{GPU} must be a whole number, got '1n' (0.000000001)"),
    (1.5, f"{GPU} must be a whole number, got 1.5"),
    (-8, f"{GPU} must not be negative, got -8"),
    ("-8", f"{GPU} must not be negative, got '-8'"),
    ("²", f"{GPU}: quantity '²' is not a number with an optional suffix "
          "(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)"),
    pytest.param("9" * 5000, f"{GPU}: a quantity must be at most 64 characters long, got "
                             f"'{'9' * 40}'... (5000 characters)", id="5000-digit-string"),
    pytest.param(10**5000, f"{GPU}: a quantity must be at most 64 characters long, got an integer of about "
                           "5001 digits", id="5001-digit-int"),
    (True, f"{GPU}: a quantity must be a string or a number, got True"),
    ([8], f"{GPU}: a quantity must be a string or a number, got a list"),
])
def test_pod_quantity_messages(value, message):
    with pytest.raises(QuantityError) as info:
        pod_quantity(value, GPU, whole=True)
    assert str(info.value) == message


@pytest.mark.parametrize("value, count", [("8", 8), (8, 8), ("8000m", 8), ("1k", 1000), ("0", 0), (None, 0),
                                          (" 4", 4), (4.0, 4), ("0.008k", 8), ("1e3", 1000),
                                          ("1Ki", 1024), ("1e9", 10**9), (2**64, 2**64)])
def test_pod_quantity_reads_every_spelling_of_a_whole_number(value, count):
    assert pod_quantity(value, GPU, whole=True) == count


@pytest.mark.parametrize("value, amount", [("500m", Fraction(1, 2)), (1.5, Fraction(3, 2)), ("1n", Fraction(1, 10**9))])
def test_pod_quantity_takes_fractions_of_what_is_not_counted_whole(value, amount):
    # cpu and memory: the API server accepts "500m" (memory "500m" with a warning, not an error).
    assert pod_quantity(value, "container main cpu", whole=False) == amount
    with pytest.raises(QuantityError, match="must be a whole number"):
        pod_quantity(value, "container main example.com/nic", whole=True)


MIN_MEMBER = "railyard.io/min-member"


@pytest.mark.parametrize("text, value", [("8", 8), ("08", 8), ("100000", 100000), (12, 12)])
def test_bounded_int_reads(text, value):
    assert bounded_int(text, MIN_MEMBER, 1, 100000) == value


@pytest.mark.parametrize("text, got", [
    ("1000000000000", "'1000000000000'"), ("²", "'²'"), ("٣", "'٣'"), ("0", "'0'"), ("-1", "'-1'"),
    ("+1", "'+1'"), (" 8", "' 8'"), ("8.0", "'8.0'"), ("1e3", "'1e3'"), ("", "''"),
    pytest.param("9" * 5000, f"'{'9' * 40}'... (5000 characters)", id="5000-digits"), (True, "True"), (8.0, "8.0"), (None, "None"),
    (10**30, "1000000000000000000000000000000"),
])
def test_bounded_int_refuses_with_numbers(text, got):
    with pytest.raises(QuantityError) as info:
        bounded_int(text, MIN_MEMBER, 1, 100000)
    assert str(info.value) == f"{MIN_MEMBER} must be an integer from 1 to 100000, got {got}"


def test_echo_cuts_what_it_quotes():
    assert shown("x" * 41) == f"'{'x' * 40}'... (41 characters)"
    assert shown(10**40) == "an integer of about 41 digits" and shown(-(10**39)) == f"-{10**39}"
    assert shown({"a": 1}) == "a dict"
    assert clip("y" * 10**6, 100) == "y" * 69 + "... (1000000 characters in all)"
    assert len(clip("y" * 10**6, 100)) == 100 and clip("short", 100) == "short" and clip("abcdef", 3) == "abc"


def test_decimal_text():
    assert [decimal_text(parse_quantity(t)) for t in ("500m", "-1536", "1n", "0", "1.5Ki", "12E")] == [
        "0.5", "-1536", "0.000000001", "0", "1536", "12000000000000000000"]


# -- properties ------------------------------------------------------------------------------

# Written out here, apart from the module's tables: what each suffix multiplies by.
UNITS = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1, "k": 1000,
         "M": 1000000, "G": 1000000000, "T": 1000000000000, "P": 1000000000000000,
         "E": 1000000000000000000, "Ki": 1024, "Mi": 1048576, "Gi": 1073741824, "Ti": 1099511627776,
         "Pi": 1125899906842624, "Ei": 1152921504606846976}


@settings(max_examples=300)
@given(n=st.integers(0, 10**18 - 1), suffix=st.sampled_from(sorted(UNITS)), zeros=st.integers(0, 3),
       sign=st.sampled_from(["", "+", "-"]))
def test_an_integer_with_a_suffix_is_that_many_units(n, suffix, zeros, sign):
    # Below 10^18: with the suffix E that stays under railyard's bound of 10^36 (MAX_MAGNITUDE).
    value = n * UNITS[suffix]
    if suffix.endswith("i"):
        value = min(value, INT64_MAX)  # binary quantities are capped at int64
    text = f"{sign}{'0' * zeros}{n}{suffix}"
    assert parse_quantity(text) == (-value if sign == "-" else value)


@settings(max_examples=300)
@given(n=st.integers(0, 10**17), k=st.integers(0, 18))
def test_an_exponent_moves_the_point(n, k):
    # n e k, n with k zeros, and n e -k against n written with a decimal point: three spellings.
    assert parse_quantity(f"{n}e{k}") == parse_quantity(f"{n}{'0' * k}") == parse_quantity(f"{n}E+{k}")
    digits = str(n).rjust(k + 1, "0")
    pointed = f"{digits[:len(digits) - k]}.{digits[len(digits) - k:]}"
    assert parse_quantity(f"{n}e-{k}") == parse_quantity(pointed)


QUANTITY_CHARS = st.text(alphabet="0123456789.+-eEinumkKMGTP", max_size=30)


@settings(max_examples=500)
@given(QUANTITY_CHARS)
def test_values_are_whole_nano_units_and_signs_mirror(text):
    try:
        q = parse_quantity(text)
    except QuantityError:
        return
    assert (q * 10**9).denominator == 1  # Kubernetes rounds up to 1n, never finer
    assert abs(q) < MAX_MAGNITUDE
    if text and text[0] not in "+-":
        assert parse_quantity("-" + text) == -q  # quantity_test.go: "the negative version of everything"
        assert parse_quantity("+" + text) == q


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=500)
@given(st.one_of(JSON, QUANTITY_CHARS, st.text(alphabet=st.characters(codec="utf-8"), max_size=80)))
def test_only_quantity_errors_and_short_messages_whatever_the_value(value):
    for call in (lambda: parse_quantity(value), lambda: json_quantity(value),
                 lambda: pod_quantity(value, GPU, True), lambda: bounded_int(value, MIN_MEMBER, 1, 100000)):
        try:
            got = call()
        except QuantityError as exc:
            assert len(str(exc)) < 300
        else:
            assert isinstance(got, (int, Fraction))


@pytest.mark.parametrize("big", [
    "9" * 10**5, "1e" + "9" * 10**5, "1." + "0" * 10**5, " " * 10**5 + "1", "²" * 10**5, 10**100000 - 1,
], ids=["digits", "exponent", "fraction", "spaces", "unicode-digits", "int"])
def test_bounded_time_on_huge_input(big):
    for call in (parse_quantity, json_quantity, lambda v: pod_quantity(v, GPU, True),
                 lambda v: bounded_int(v, MIN_MEMBER, 1, 100000), shown):
        started = time.perf_counter()
        try:
            call(big)
        except QuantityError as exc:
            assert len(str(exc)) < 300
        assert time.perf_counter() - started < 0.05
