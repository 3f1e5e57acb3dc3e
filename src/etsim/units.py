"""Unit strings, parsed once into etsim's internal units.

Configuration files write quantities with their unit (``"50 GB/s"``, ``"1.5 us"``, ``"1 MiB"``); this
module turns them into the canonical internal units used everywhere else:

=========  ==========================  =====================================
quantity   internal unit               examples accepted
=========  ==========================  =====================================
time       nanoseconds (``float``)     ``500 ns``, ``1.5 us``, ``1.5 µs``, ``2 ms``, ``1 s``, ``10 ps``
size       bytes (``int``)             ``512 B``, ``64 KB`` (10^3), ``1 MiB`` (2^20), ``2 GiB``
bandwidth  bytes per ns (``float``)    ``50 GB/s`` (= 50.0 B/ns), ``50 GiB/s`` (50·2^30 B/s),
                                       ``400 Gb/s`` = ``400 Gbps`` (bits: 50.0 B/ns), ``8 B/ns``
=========  ==========================  =====================================

Decimal prefixes (k/K, M, G, T, P) are powers of 10, binary prefixes (Ki, Mi, Gi, Ti, Pi) powers of 2.
A capital ``B`` means bytes and a lower-case ``b`` (or ``bps``) bits. So 1 GB/s is exactly 1.0 B/ns.

A bare number (``50`` or ``"50"``) is an error unless the caller passes ``default_unit``: the
network YAML of some simulators writes bandwidth as bare GB/s meaning 2^30 B/s
(``default_unit="GiB/s"``) and latency as bare ns (``default_unit="ns"``).

Every parser takes an optional ``key`` (``"links[3].bandwidth"``) that is named in the
:class:`~etsim.errors.ConfigError` raised for a bad value.
"""

from __future__ import annotations

import math
import re

from etsim.errors import ConfigError

__all__ = [
    "BANDWIDTH_UNITS",
    "MAX_SIZE",
    "MIN_BANDWIDTH",
    "SIZE_UNITS",
    "TIME_UNITS",
    "format_bandwidth",
    "format_size",
    "format_time",
    "parse_bandwidth",
    "parse_size",
    "parse_time",
]

_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def _size_units() -> dict[str, int]:
    units: dict[str, int] = {}
    for prefix, factor in (_DECIMAL | _BINARY).items():
        units[f"{prefix}B"] = factor
    return units


def _bandwidth_units() -> dict[str, float]:
    # value: bytes per nanosecond for 1 unit
    units: dict[str, float] = {}
    for prefix, factor in (_DECIMAL | _BINARY).items():
        units[f"{prefix}B/s"] = factor / 1e9
        units[f"{prefix}b/s"] = factor / 8e9
        units[f"{prefix}bps"] = factor / 8e9
        units[f"{prefix}bit/s"] = factor / 8e9
    units["B/ns"] = 1.0
    units["b/ns"] = 1 / 8
    return units


#: Size unit → bytes.
SIZE_UNITS: dict[str, int] = _size_units()
#: The largest size etsim parses, in bytes (1 EiB).
MAX_SIZE = 1 << 60
#: The smallest bandwidth etsim parses, in bytes per ns (1 B/s).
MIN_BANDWIDTH = 1e-9
#: Bandwidth unit → bytes per nanosecond.
BANDWIDTH_UNITS: dict[str, float] = _bandwidth_units()
#: Time unit → nanoseconds.
TIME_UNITS: dict[str, float] = {
    "ps": 1e-3, "ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9, "h": 3600e9,
}  # fmt: skip

_QUANTITY = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([^\s\d].*?)?\s*$")


def _where(key: str | None) -> str:
    return f"{key}: " if key else ""


def _split(value: object, what: str, example: str, key: str | None, default_unit: str | None) -> tuple[float, str]:
    """Split *value* into (number, unit); apply *default_unit* to bare numbers."""
    if isinstance(value, bool):
        raise ConfigError(f"{_where(key)}expected a {what} such as {example!r}, got {value!r}")
    if isinstance(value, int | float):
        try:
            number, unit = float(value), ""
        except OverflowError:  # an int beyond the largest float
            raise ConfigError(f"{_where(key)}{what} {value!r} is not finite") from None
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if match is None:
            raise ConfigError(f"{_where(key)}cannot parse {value!r} as a {what} (expected e.g. {example!r})")
        number, unit = float(match.group(1)), match.group(2) or ""
    else:
        raise ConfigError(f"{_where(key)}expected a {what} such as {example!r}, got {type(value).__name__} {value!r}")
    if not math.isfinite(number):
        raise ConfigError(f"{_where(key)}{what} {value!r} is not finite")
    if not unit:
        if default_unit is None:
            raise ConfigError(f"{_where(key)}{what} {value!r} has no unit (write e.g. {example!r})")
        unit = default_unit
    return number, unit


def parse_size(value: object, *, key: str | None = None, default_unit: str | None = None) -> int:
    """Parse a size such as ``"1 MiB"``, ``"64 KB"`` or ``"512 B"`` into bytes.

    Args:
        value: the string (or, with *default_unit*, a bare number) to parse.
        key: configuration key named in error messages.
        default_unit: unit of a bare number (e.g. ``"B"``); bare numbers are an error without it.

    Returns:
        The size in whole bytes (``>= 0``).

    Raises:
        ConfigError: unknown unit, negative size, or a fractional number of bytes.
    """
    number, unit = _split(value, "size", "1 MiB", key, default_unit)
    factor = SIZE_UNITS.get(unit)
    if factor is None:
        raise ConfigError(f"{_where(key)}unknown size unit {unit!r} in {value!r}; use one of {', '.join(SIZE_UNITS)}")
    if number < 0:
        raise ConfigError(f"{_where(key)}size {value!r} is negative")
    nbytes = number * factor
    if not nbytes <= MAX_SIZE:
        raise ConfigError(f"{_where(key)}size {value!r} is larger than etsim's limit of {MAX_SIZE:,} bytes (1 EiB)")
    rounded = round(nbytes)
    if abs(nbytes - rounded) > 1e-9 * max(1.0, abs(nbytes)):
        raise ConfigError(f"{_where(key)}size {value!r} is not a whole number of bytes ({nbytes!r})")
    return int(rounded)


def parse_bandwidth(value: object, *, key: str | None = None, default_unit: str | None = None) -> float:
    """Parse a bandwidth such as ``"50 GB/s"``, ``"50 GiB/s"`` or ``"400 Gbps"`` into bytes per ns.

    Args:
        value: the string (or, with *default_unit*, a bare number) to parse.
        key: configuration key named in error messages.
        default_unit: unit of a bare number (e.g. ``"GiB/s"`` for files whose GB is 2^30 B).

    Returns:
        The bandwidth in bytes per nanosecond (``> 0``); 1 GB/s = 1.0.

    Raises:
        ConfigError: unknown unit or a bandwidth that is not strictly positive.
    """
    number, unit = _split(value, "bandwidth", "50 GB/s", key, default_unit)
    factor = BANDWIDTH_UNITS.get(unit)
    if factor is None:
        choices = "B/s, KB/s, MB/s, GB/s, TB/s, KiB/s … TiB/s, Gb/s, Gbps, B/ns"
        raise ConfigError(f"{_where(key)}unknown bandwidth unit {unit!r} in {value!r}; use e.g. {choices}")
    if number <= 0:
        raise ConfigError(f"{_where(key)}bandwidth {value!r} must be positive")
    bandwidth = number * factor
    if not bandwidth >= MIN_BANDWIDTH:  # a subnormal rate would make times infinite
        raise ConfigError(f"{_where(key)}bandwidth {value!r} is below etsim's limit of 1 B/s")
    return bandwidth


def parse_time(value: object, *, key: str | None = None, default_unit: str | None = None) -> float:
    """Parse a duration such as ``"500 ns"``, ``"1.5 us"``, ``"2 ms"`` or ``"1 s"`` into nanoseconds.

    Args:
        value: the string (or, with *default_unit*, a bare number) to parse.
        key: configuration key named in error messages.
        default_unit: unit of a bare number (e.g. ``"ns"``); bare numbers are an error without it.

    Returns:
        The duration in nanoseconds (``>= 0``).

    Raises:
        ConfigError: unknown unit or a negative duration.
    """
    number, unit = _split(value, "time", "500 ns", key, default_unit)
    factor = TIME_UNITS.get(unit)
    if factor is None:
        raise ConfigError(f"{_where(key)}unknown time unit {unit!r} in {value!r}; use one of ps, ns, us, ms, s, min, h")
    if number < 0:
        raise ConfigError(f"{_where(key)}time {value!r} is negative")
    return number * factor


def _fmt(number: float) -> str:
    text = f"{number:.6g}"
    return text


def _in(number: float, factor: float) -> bool:
    """Whether |*number*| shown in the unit of *factor* (6 digits) is at least 1 of it: 999,999.7 ns is "1 ms"."""
    return abs(float(f"{number / factor:.6g}")) >= 1


def format_time(ns: float) -> str:
    """Format a duration in nanoseconds with a readable unit (``1500.0`` → ``"1.5 us"``)."""
    for unit, factor in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if _in(ns, factor):
            return f"{_fmt(ns / factor)} {unit}"
    return f"{_fmt(ns)} ns"


def format_size(nbytes: float) -> str:
    """Format a size in bytes with a binary prefix (``1048576`` → ``"1 MiB"``)."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if _in(nbytes, factor):
            return f"{_fmt(nbytes / factor)} {unit}"
    return f"{_fmt(nbytes)} B"


def format_bandwidth(bytes_per_ns: float) -> str:
    """Format a bandwidth in bytes per ns with a decimal prefix (``50.0`` → ``"50 GB/s"``)."""
    per_second = bytes_per_ns * 1e9
    for unit, factor in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if _in(per_second, factor):
            return f"{_fmt(per_second / factor)} {unit}"
    return f"{_fmt(per_second)} B/s"
