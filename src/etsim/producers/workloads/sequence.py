"""``sequence``: several collectives one after the other on every rank (the seed paper's two-collective workload)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import Trace
from etsim.errors import ConfigError
from etsim.options import Integer, Optional, Parser, Size, keys_named, option, parse_options
from etsim.producers.workloads.base import (
    WORKLOAD_GENERATORS,
    CollectiveName,
    GroupName,
    Npus,
    WorkloadGenerator,
    define_groups,
    every_rank_group,
)

__all__ = ["SequenceGenerator"]


@dataclass(frozen=True, kw_only=True)
class Step:
    """One entry of ``collectives``: *count* collectives of one type and size."""

    type: str = option(help="collective type", parse=CollectiveName())
    size: int | None = option(None, "bytes (default: the generator's size)", Optional(Size()))
    count: int = option(1, "back-to-back collectives", Integer(1))


class Steps(Parser):
    """A non-empty list of steps: ``{type, size, count}`` mappings, or a bare collective name.

    On the command line: ``TYPE[:SIZE[:COUNT]]`` items separated by commas (``all_reduce:1MiB:2,all_gather``).
    """

    metavar = "TYPE[:SIZE[:COUNT]],…"

    def from_text(self, text: str, *, key: str) -> list[dict[str, Any]]:
        """``all_reduce:1MiB:2,all_gather`` → the steps."""
        steps: list[Any] = []
        for item in text.split(","):
            parts = [part.strip() for part in item.split(":")]
            if not parts[0] or len(parts) > 3:
                raise ConfigError(f"{key}: expected TYPE[:SIZE[:COUNT]] items separated by commas, got {item!r}")
            step: dict[str, Any] = {"type": parts[0]}
            if len(parts) > 1 and parts[1]:
                step["size"] = parts[1]
            if len(parts) > 2:
                step["count"] = Integer(1).from_text(parts[2], key=f"{key} {item!r}: COUNT")
            steps.append(step)
        return self(steps, key=key)

    def __call__(self, value: Any, *, key: str) -> list[dict[str, Any]]:
        """Each step as a mapping (sizes in bytes, None where the generator's size applies)."""
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{key}: expected a non-empty list such as [{{type: all_reduce}}]")
        steps = []
        for i, entry in enumerate(value):
            where = f"{key}[{i}]"
            if isinstance(entry, str):
                entry = {"type": entry}
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{where}: expected a mapping {{type, size, count}}, got {entry!r}")
            values = parse_options(
                Step,
                entry,
                key=keys_named(prefix=f"{where}."),
                unknown="{key}: unknown key; valid: {valid}",
                sort_valid=False,
            )
            step = Step(**values)
            steps.append({"type": step.type, "size": step.size, "count": step.count})
        return steps


@WORKLOAD_GENERATORS.register("sequence")
class SequenceGenerator(WorkloadGenerator):
    """Several collectives one after the other on every rank: each waits for the one before."""

    name = "sequence"
    summary = "several collectives one after the other on every rank"

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        """The steps, in order."""

        npus: int = option(help="ranks", parse=Npus())
        collectives: list[dict[str, Any]] = option(
            help="the steps, e.g. [{type: all_reduce, size: 1 MiB}, {type: all_gather, count: 2}] "
            "(on the command line all_reduce:1MiB,all_gather::2)",
            parse=Steps(),
        )
        size: int | None = option(None, "the size of steps that give none", Optional(Size()))
        pg_name: str | None = option(None, "communicator group id for pg_name", Optional(GroupName()))

    def check(self, options: Any, key: Callable[[str], str]) -> Any:
        """Every step has a size: its own or the generator's."""
        steps = []
        for i, step in enumerate(options.collectives):
            if step["size"] is None:
                if options.size is None:
                    where = f"{key('collectives')}[{i}]"
                    raise ConfigError(f"{where}.size: missing (and the generator has no default size)")
                step = {**step, "size": options.size}
            steps.append(step)
        return replace(options, collectives=steps)

    def nodes(self, options: Any) -> int:
        """One node per collective per rank."""
        return sum(step["count"] for step in options.collectives) * options.npus

    def generate(self, options: Any) -> list[Trace]:
        """The steps on every rank; a *pg_name* is defined in every rank's metadata as the group of every rank."""
        traces = []
        for rank in range(options.npus):
            b = TraceBuilder()
            prev: list[int] = []
            for i, step in enumerate(options.collectives):
                ctype = CollectiveName.type_of(step["type"])
                for j in range(step["count"]):
                    # Each collective waits for the one before: the steps run back to back, in order.
                    name = f"{step['type']}_{i}" + (f"_{j}" if step["count"] > 1 else "")
                    prev = [b.collective(ctype, step["size"], deps=prev, name=name, pg_name=options.pg_name)]
            traces.append(b.build(rank=rank))
        return define_groups(traces, self.comm_groups(options))

    def comm_groups(self, options: Any) -> dict[str, list[int]] | None:
        """The one group, every rank; None for the default group."""
        return every_rank_group(options.pg_name, options.npus)

    def collectives(self, options: Any) -> list[str]:
        """The steps' types, in order of first use."""
        return list(dict.fromkeys(step["type"] for step in options.collectives))
