"""Selection rules: the list form of a system YAML's ``algorithms`` (which algorithm serves which call).

A selection *table* is an ordered list of rules; the first rule that matches a collective call serves it::

    algorithms:
      - {collective: all_reduce, max_bytes: 256 KiB, algorithm: tree}
      - {collective: all_reduce, min_bytes: 256 KiB, group_size: 2..64, algorithm: algorithms/msccl_ring.xml}
      - {collective: all_to_all, algorithm: direct}
      - {default: ring}

Keys of a rule (all optional but ``algorithm``, or ``default`` alone):

=============  ==========================================================================================
key            matches
=============  ==========================================================================================
collective     the call's collective (``all_reduce`` …; a reduce-scatter-block also matches ``reduce_scatter``)
min_bytes      calls of at least this many bytes (``comm_size`` as the workload states it; inclusive)
max_bytes      calls of at most this many bytes (inclusive)
group_size     the communicator group's size: ``8`` (exactly), ``[4, 8]`` (any of) or ``2..64`` (a range)
pg_name        the group's name (``pg_name``; ``"0"`` is the group of all ranks), or a list of names
dimension      the topology dimension the group spans (its members differ in that coordinate only)
algorithm      any ``--algo`` value: a native name, a Chakra ET family, an MSCCL-IR XML, ``tacos[:k=v,…]``
default        the algorithm for every call no earlier rule matched (a rule of its own)
=============  ==========================================================================================

Parsing (this module) checks keys, collectives, sizes and bounds; :class:`~etsim.system.selection.
AlgorithmSelection` resolves the algorithms, turns MSCCL-IR ``minBytes``/``maxBytes`` into bounds and warns
about rules that can never fire.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from etsim.chakra.graph import COLLECTIVE_NAMES
from etsim.errors import ConfigError
from etsim.units import format_size, parse_size

__all__ = ["RULE_KEYS", "CallInfo", "SelectionRule", "parse_group_sizes", "parse_rules", "shadowing"]

#: Keys a rule may have.
RULE_KEYS = ("collective", "min_bytes", "max_bytes", "group_size", "pg_name", "dimension", "algorithm", "default")

_RANGE = re.compile(r"\s*(\d+)\s*\.\.\s*(\d+)\s*")


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What every rank of a group knows about a collective call, and all a rule may look at."""

    collective: str
    """The collective's name (``all_reduce`` …)."""
    size: int
    """``comm_size`` in bytes, as the workload states it."""
    group_size: int
    pg_name: str
    """The group's name (``"0"`` for all ranks)."""
    dimension: int | None = None
    """The topology dimension the group spans, or None (several, or an irregular topology)."""

    def describe(self) -> str:
        """``all_reduce of 1 MiB (1048576 bytes) over group '0' (8 ranks)``."""
        where = f", dimension {self.dimension}" if self.dimension is not None else ""
        return (
            f"{self.collective} of {format_size(self.size)} ({self.size} bytes) over group {self.pg_name!r} "
            f"({self.group_size} ranks{where})"
        )


@dataclass(frozen=True, slots=True)
class SelectionRule:
    """One rule of a selection table (see the module docstring).

    ``group_sizes`` is a union of inclusive ranges (``8`` is ``((8, 8),)``), None for any size.
    """

    algorithm: str
    name: str
    """Short label reported per call (``algorithms[2]``, ``algorithms.all_reduce``, ``--algo``)."""
    origin: str
    """Where the rule was given, for messages (``sys.yaml: algorithms[2]``)."""
    collective: str | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    group_sizes: tuple[tuple[int, int], ...] | None = None
    pg_names: frozenset[str] | None = None
    dimension: int | None = None
    is_default: bool = False
    bounds_from_file: bool = False
    """The byte bounds came from the algorithm's file (MSCCL-IR ``minBytes``/``maxBytes``)."""

    def matches(self, call: CallInfo, lookup: str | None = None) -> bool:
        """True when every key of the rule accepts *call* (*lookup*: the collective an algorithm is asked for)."""
        if self.collective is not None and self.collective != call.collective and self.collective != lookup:
            return False
        if self.min_bytes is not None and call.size < self.min_bytes:
            return False
        if self.max_bytes is not None and call.size > self.max_bytes:
            return False
        if self.group_sizes is not None and not any(lo <= call.group_size <= hi for lo, hi in self.group_sizes):
            return False
        if self.pg_names is not None and call.pg_name not in self.pg_names:
            return False
        return self.dimension is None or self.dimension == call.dimension

    def with_bounds(self, low: int | None, high: int | None, group_size: int | None) -> SelectionRule:
        """A copy with byte bounds (and an exact group size) taken from the algorithm's file."""
        return replace(
            self,
            min_bytes=low,
            max_bytes=high,
            group_sizes=((group_size, group_size),)
            if group_size is not None and self.group_sizes is None
            else self.group_sizes,
            bounds_from_file=True,
        )

    def describe(self) -> str:
        """The rule as YAML flow mapping, e.g. ``{collective: all_reduce, max_bytes: 256 KiB, algorithm: tree}``."""
        if self.is_default:
            return f"{{default: {self.algorithm}}}"
        parts = []
        if self.collective is not None:
            parts.append(f"collective: {self.collective}")
        if self.min_bytes is not None:
            parts.append(f"min_bytes: {_size_text(self.min_bytes)}")
        if self.max_bytes is not None:
            parts.append(f"max_bytes: {_size_text(self.max_bytes)}")
        if self.group_sizes is not None:
            parts.append(f"group_size: {group_sizes_text(self.group_sizes)}")
        if self.pg_names is not None:
            names = sorted(self.pg_names)
            parts.append(f"pg_name: {names[0]!r}" if len(names) == 1 else f"pg_name: {names}")
        if self.dimension is not None:
            parts.append(f"dimension: {self.dimension}")
        parts.append(f"algorithm: {self.algorithm}")
        return "{" + ", ".join(parts) + "}"

    def covers(self, other: SelectionRule) -> bool:
        """True when every call *other* matches, this rule matches too (bytes aside: see :func:`shadowing`)."""
        if self.collective is not None and self.collective != other.collective:
            return False
        if self.group_sizes is not None:
            if other.group_sizes is None:
                return False
            if not all(any(a <= lo and hi <= b for a, b in self.group_sizes) for lo, hi in other.group_sizes):
                return False
        if self.pg_names is not None and (other.pg_names is None or not other.pg_names <= self.pg_names):
            return False
        return self.dimension is None or self.dimension == other.dimension


def _size_text(n: int) -> str:
    """``64 KiB`` when that is exactly *n* bytes, else the integer."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return str(n)


def group_sizes_text(ranges: tuple[tuple[int, int], ...]) -> str:
    """``8``, ``[4, 8]`` or ``2..64`` (the forms :func:`parse_group_sizes` reads)."""
    if all(lo == hi for lo, hi in ranges):
        values = [lo for lo, _ in ranges]
        return str(values[0]) if len(values) == 1 else str(values)
    if len(ranges) == 1:
        return f"{ranges[0][0]}..{ranges[0][1]}"
    return str([f"{lo}..{hi}" if lo != hi else lo for lo, hi in ranges])


def parse_group_sizes(value: object, key: str) -> tuple[tuple[int, int], ...]:
    """``8`` → ((8, 8),); ``[4, 8]`` → ((4, 4), (8, 8)); ``"2..64"`` → ((2, 64),); lists may mix both."""
    items: Iterable[object] = value if isinstance(value, list) else [value]
    out: list[tuple[int, int]] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            if item < 1:
                raise ConfigError(f"{key}: a group size must be >= 1, got {item}")
            out.append((item, item))
            continue
        m = _RANGE.fullmatch(item) if isinstance(item, str) else None
        if m is None:
            raise ConfigError(
                f"{key}: expected a group size (8), a list of sizes ([4, 8]) or a range ('2..64'), got {item!r}"
            )
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1 or lo > hi:
            raise ConfigError(f"{key}: range {item!r} is empty or starts below 1")
        out.append((lo, hi))
    if not out:
        raise ConfigError(f"{key}: an empty list matches no group")
    return tuple(out)


def _bytes(value: object, key: str) -> int:
    return parse_size(value, key=key, default_unit="B")


def parse_rules(value: Sequence[Any], where: str) -> tuple[SelectionRule, ...]:
    """Parse a selection table (the list form of ``algorithms``).

    Args:
        value: the YAML list.
        where: the file (or ``system config``), named in messages and origins.

    Raises:
        ConfigError: a rule that is not a mapping, an unknown key or collective, a bad size, min > max, a
            missing or empty algorithm (each message names the file and the rule).
    """
    collectives = set(COLLECTIVE_NAMES.values())
    rules: list[SelectionRule] = []
    for i, item in enumerate(value):
        origin = f"{where}: algorithms[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(
                f"{origin}: expected a rule such as {{collective: all_reduce, algorithm: ring}}, got {item!r}"
            )
        unknown = [k for k in item if k not in RULE_KEYS]
        if unknown:
            raise ConfigError(f"{origin}: unknown key {unknown[0]!r}; valid keys: {', '.join(RULE_KEYS)}")
        if "default" in item:
            if len(item) != 1:
                others = ", ".join(str(k) for k in item if k != "default")
                raise ConfigError(f"{origin}: a default rule has no other keys ({others}); write {{default: ALGO}}")
            algorithm = item["default"]
            if not isinstance(algorithm, str) or not algorithm:
                raise ConfigError(f"{origin}.default: expected an algorithm, got {algorithm!r}")
            rules.append(SelectionRule(algorithm, f"algorithms[{i}]", origin, is_default=True))
            continue
        algorithm = item.get("algorithm")
        if not isinstance(algorithm, str) or not algorithm:
            raise ConfigError(f"{origin}: expected 'algorithm: ALGO' (a name, an ET family or an MSCCL-IR file)")
        collective = item.get("collective")
        if collective is not None and not isinstance(collective, str):
            raise ConfigError(
                f"{origin}.collective: expected one collective name, got {collective!r}; write one rule per collective"
            )
        if collective is not None and collective not in collectives:
            raise ConfigError(
                f"{origin}.collective: unknown collective {collective!r}; valid: {', '.join(sorted(collectives))}"
            )
        low = _bytes(item["min_bytes"], f"{origin}.min_bytes") if "min_bytes" in item else None
        high = _bytes(item["max_bytes"], f"{origin}.max_bytes") if "max_bytes" in item else None
        if low is not None and high is not None and low > high:
            raise ConfigError(f"{origin}: min_bytes {low} is greater than max_bytes {high}; no call can match")
        groups = parse_group_sizes(item["group_size"], f"{origin}.group_size") if "group_size" in item else None
        pg_names = None
        if "pg_name" in item:
            names = item["pg_name"] if isinstance(item["pg_name"], list) else [item["pg_name"]]
            if not names or not all(isinstance(n, (str, int)) and not isinstance(n, bool) for n in names):
                raise ConfigError(
                    f"{origin}.pg_name: expected a group name or a list of names, got {item['pg_name']!r}"
                )
            pg_names = frozenset("0" if str(n) in ("", "0") else str(n) for n in names)
        dimension = item.get("dimension")
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 0):
            raise ConfigError(f"{origin}.dimension: expected a dimension index >= 0, got {dimension!r}")
        rules.append(
            SelectionRule(
                algorithm,
                f"algorithms[{i}]",
                origin,
                collective=collective,
                min_bytes=low,
                max_bytes=high,
                group_sizes=groups,
                pg_names=pg_names,
                dimension=dimension,
            )
        )
    return tuple(rules)


def shadowing(rules: Sequence[SelectionRule]) -> list[tuple[SelectionRule, list[SelectionRule]]]:
    """Rules that can never fire, each with the earlier rules that take every call it matches.

    A rule is shadowed when the earlier rules that match at least its collective, group sizes, groups and
    dimension (a default matches everything) together cover its whole byte range.
    """
    out: list[tuple[SelectionRule, list[SelectionRule]]] = []
    for j, rule in enumerate(rules):
        earlier = [r for r in rules[:j] if r.is_default or r.covers(rule)]
        if not earlier:
            continue
        low = rule.min_bytes or 0
        high = rule.max_bytes
        spans = sorted(((r.min_bytes or 0), r.max_bytes) for r in earlier)
        reach = low  # every size below `reach` (from `low` on) is taken
        for a, b in spans:
            if a > reach:
                break
            if b is None:
                reach = -1
                break
            reach = max(reach, b + 1)
        covered = reach == -1 or (high is not None and reach > high)
        if covered:
            out.append((rule, earlier))
    return out
