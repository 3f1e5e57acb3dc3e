"""The :class:`Result` of a simulation and its table and JSON forms (times in ns)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from etsim.units import format_size, format_time

__all__ = ["CollectiveRecord", "RankResult", "Result"]


@dataclass(frozen=True, slots=True)
class RankResult:
    """Times of one rank."""

    rank: int
    finish_ns: float
    compute_ns: float
    """Time with at least one compute node running."""
    comm_ns: float
    """Time with at least one communication node (collective, send, receive) in flight."""
    exposed_comm_ns: float
    """Time with communication in flight and no compute running."""


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One rank's part of one collective."""

    rank: int
    node_id: int
    type: str
    bytes: int
    group: list[int]
    algorithm: str
    start_ns: float
    end_ns: float
    rule: str = ""
    """The selection rule that chose the algorithm (``algorithms[2]``, ``algorithms.all_reduce``, ``--algo``,
    ``built-in default``, ``per-node algorithm``)."""


@dataclass
class Result:
    """Everything a run reports; :meth:`to_json` gives the documented JSON document."""

    finish_ns: float
    ranks: list[RankResult]
    collectives: list[CollectiveRecord]
    network: dict[str, Any]
    sim: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    links: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What may make the numbers misleading (each also issued as an ``EtsimWarning``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        out = {
            "finish_ns": self.finish_ns,
            "ranks": [asdict(r) for r in self.ranks],
            "collectives": [asdict(c) for c in self.collectives],
            "network": self.network,
            "sim": self.sim,
        }
        if self.config:
            out["config"] = self.config
        if self.links:
            out["links"] = self.links
        out["warnings"] = self.warnings
        return out

    def to_json(self, *, indent: int | None = 1) -> str:
        """The JSON document (deterministic key order)."""
        return json.dumps(self.to_dict(), indent=indent)

    def table(self, *, max_ranks: int = 16) -> str:
        """A short human-readable summary."""
        lines = [f"finish time: {format_time(self.finish_ns)}  ({self.finish_ns:.1f} ns)"]
        ranks = self.ranks
        header = f"{'rank':>6} {'finish':>12} {'compute':>12} {'comm':>12} {'exposed comm':>13}"
        if len(ranks) <= max_ranks:
            lines.append(header)
            for r in ranks:
                lines.append(
                    f"{r.rank:>6} {format_time(r.finish_ns):>12} {format_time(r.compute_ns):>12} "
                    f"{format_time(r.comm_ns):>12} {format_time(r.exposed_comm_ns):>13}"
                )
        elif ranks:
            lines.append(f"{len(ranks)} ranks (min / mean / max):")
            for label, key in (
                ("finish", "finish_ns"),
                ("compute", "compute_ns"),
                ("comm", "comm_ns"),
                ("exposed comm", "exposed_comm_ns"),
            ):
                vals = [getattr(r, key) for r in ranks]
                lines.append(
                    f"  {label:<13} {format_time(min(vals)):>12} {format_time(sum(vals) / len(vals)):>12} "
                    f"{format_time(max(vals)):>12}"
                )
        groups: dict[tuple[str, int, str], list[float]] = {}
        for c in self.collectives:
            groups.setdefault((c.type, c.bytes, c.algorithm), []).append(c.end_ns - c.start_ns)
        if groups:
            lines.append("collectives (per rank, min / max duration):")
            for (ctype, size, algo), durs in groups.items():
                lines.append(
                    f"  {ctype.lower():<15} {format_size(size):>10}  {algo:<20} x{len(durs):<5} "
                    f"{format_time(min(durs)):>12} {format_time(max(durs)):>12}"
                )
        net = self.network
        lines.append(
            f"network: {net.get('model')} on {net.get('topology')}, {net.get('messages')} messages, "
            f"{format_size(net.get('bytes', 0))}"
        )
        lines.append(f"simulated in {self.sim.get('wall_s', 0):.3f} s ({self.sim.get('events', 0)} events)")
        return "\n".join(lines)
