import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etsim.errors import ConfigError
from etsim.units import (
    format_bandwidth,
    format_size,
    format_time,
    parse_bandwidth,
    parse_size,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512 B", 512),
        ("64 KB", 64_000),
        ("64 kB", 64_000),
        ("1 MiB", 2**20),
        ("1.5 KiB", 1536),
        ("2GiB", 2 * 2**30),
        ("1e3 B", 1000),
        ("0 B", 0),
    ],
)
def test_parse_size(text, expected):
    value = parse_size(text)
    assert value == expected
    assert isinstance(value, int)


def test_bare_size_needs_default_unit():
    with pytest.raises(ConfigError, match=r"message\.size: size 1024 has no unit"):
        parse_size(1024, key="message.size")
    assert parse_size(1024, default_unit="B") == 1024
    assert parse_size("1024", default_unit="B") == 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50 GB/s", 50.0),
        ("50 GiB/s", 50 * 2**30 / 1e9),
        ("400 Gb/s", 50.0),
        ("400 Gbps", 50.0),
        ("1 TB/s", 1000.0),
        ("100 MB/s", 0.1),
        ("8 B/ns", 8.0),
    ],
)
def test_parse_bandwidth(text, expected):
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


def test_astra_bare_bandwidth_is_binary_gb():
    # ASTRA-sim: 50 GB/s with 1 GB = 2^30 B is 53.6870912 B/ns
    assert parse_bandwidth(50, default_unit="GiB/s") == pytest.approx(53.6870912, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("500 ns", 500.0), ("1.5 us", 1500.0), ("1.5 µs", 1500.0), ("2 ms", 2e6), ("1 s", 1e9), ("0 ns", 0.0)],
)
def test_parse_time(text, expected):
    assert parse_time(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("func", "value", "message"),
    [
        (parse_bandwidth, "50 GB", r"links\[3\]\.bandwidth: unknown bandwidth unit 'GB'"),
        (parse_bandwidth, "50", r"links\[3\]\.bandwidth: bandwidth '50' has no unit"),
        (parse_bandwidth, "0 GB/s", r"links\[3\]\.bandwidth: bandwidth '0 GB/s' must be positive"),
        (parse_bandwidth, "fast", r"links\[3\]\.bandwidth: cannot parse 'fast'"),
        (parse_time, "-1 ns", r"links\[3\]\.bandwidth: time '-1 ns' is negative"),
        (parse_time, "5 parsecs", r"unknown time unit 'parsecs'"),
        (parse_time, True, r"expected a time"),
        (parse_time, [1], r"expected a time"),
        (parse_size, "1.5 B", r"not a whole number of bytes"),
        (parse_size, "-3 KB", r"negative"),
        (parse_size, "3 KBps", r"unknown size unit"),
        (parse_time, "inf ns", r"cannot parse|not finite"),
    ],
)
def test_bad_values_name_the_key(func, value, message):
    with pytest.raises(ConfigError, match=message):
        func(value, key="links[3].bandwidth")


def test_formatters():
    assert format_time(1500.0) == "1.5 us"
    assert format_time(500.0) == "500 ns"
    assert format_time(2e9) == "2 s"
    assert format_size(2**20) == "1 MiB"
    assert format_size(100) == "100 B"
    assert format_bandwidth(50.0) == "50 GB/s"
    assert format_bandwidth(0.5) == "500 MB/s"


@given(st.floats(min_value=1e-3, max_value=1e15, allow_nan=False))
def test_time_round_trip(ns):
    assert parse_time(format_time(ns)) == pytest.approx(ns, rel=1e-5)


@given(st.floats(min_value=1e-6, max_value=1e6, allow_nan=False))
def test_bandwidth_round_trip(bw):
    assert parse_bandwidth(format_bandwidth(bw)) == pytest.approx(bw, rel=1e-5)


@given(st.integers(min_value=0, max_value=2**50))
def test_size_round_trip(n):
    text = format_size(n)
    number, unit = text.split()
    factor = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
    assert math.isclose(float(number) * factor, n, rel_tol=1e-5)


def test_a_value_that_rounds_up_to_the_next_unit_is_shown_in_it() -> None:
    # 999,999.7 ns printed as "1000 us": the unit is chosen on the digits shown.
    from etsim.units import format_bandwidth, format_size, format_time

    assert (format_time(999_999.7), format_time(999.9999), format_time(1500.0)) == ("1 ms", "1 us", "1.5 us")
    assert (format_size(2**20 - 0.1), format_size(1048570)) == ("1 MiB", "1023.99 KiB")
    assert (format_size(2**30), format_size(2**40), format_time(1e9)) == ("1 GiB", "1 TiB", "1 s")  # (exact: kept)
    assert format_bandwidth(999.9999999) == "1 TB/s"
