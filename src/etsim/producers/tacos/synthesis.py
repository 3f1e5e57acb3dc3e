"""Synthesis runs, lower bounds, and the algorithm family a schedule becomes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from etsim import progress
from etsim.algo.family_io import write_family_by_rank
from etsim.algo.graph import AlgoGraph
from etsim.chakra.graph import CollectiveType, parse_collective
from etsim.errors import ConfigError
from etsim.network.bounds import CollectiveBounds, TimeBound
from etsim.network.topology import Topology
from etsim.producers.tacos.family import FamilyEncoder, position_graph, transfers_by_position
from etsim.producers.tacos.greedy import Schedule, concat, greedy_all_gather, retime, reverse
from etsim.producers.tacos.links import LinkGraph, LowerBound, build_link_graph, lower_bound

__all__ = ["COLLECTIVES", "Synthesis", "algo_graphs", "synthesize", "write_synthesis"]

#: Collectives this producer synthesises.
COLLECTIVES: dict[str, CollectiveType] = {
    "all_gather": CollectiveType.ALL_GATHER,
    "reduce_scatter": CollectiveType.REDUCE_SCATTER,
    "all_reduce": CollectiveType.ALL_REDUCE,
}


#: The most chunk transfers one synthesis may schedule (memory and time grow with them).
MAX_TRANSFERS = 1 << 26
#: The most chunks (NPUs × chunks per NPU) one synthesis may move: a 64x64 mesh at 16 chunks per NPU.
MAX_CHUNKS = 1 << 16


@dataclass(eq=False)
class Synthesis:
    """A synthesised collective and what is known about it.

    Attributes:
        collective: ``all_gather``, ``reduce_scatter`` or ``all_reduce``.
        topology: the network it was synthesised for.
        schedule: the transfers.
        chunk_bytes: bytes per chunk (``size / (n·k)``).
        size: the collective's whole output (All-Gather) or buffer (others) in bytes.
        bound: lower bounds of schedules of the kind TACOS searches (whole chunks, one at a time per
            logical link, reduce-scatter before all-gather): not of the collective itself, which other
            algorithms may beat (see :meth:`physical_bound`).
        seed: seed of the kept run.
        runs: runs tried.
        wall_s: synthesis wall time in seconds (all runs, bounds excluded).
    """

    collective: str
    topology: Topology
    schedule: Schedule
    chunk_bytes: float
    size: float
    bound: LowerBound
    seed: int
    runs: int
    wall_s: float

    def physical_bound(self) -> TimeBound:
        """The least time any algorithm needs for this collective on this network (:mod:`etsim.network.bounds`)."""
        return CollectiveBounds(self.topology).bound(COLLECTIVES[self.collective], self.size, self.group)

    @property
    def time_ns(self) -> float:
        """Synthesised collective time (ns)."""
        return self.schedule.time_ns

    @property
    def links(self) -> LinkGraph:
        """The logical network."""
        return self.schedule.links

    @property
    def group(self) -> list[int]:
        """Global NPU ranks of the group, by position."""
        return self.schedule.links.group


def _one_run(collective: str, lg: LinkGraph, w: list[float], k: int, seed: int) -> Schedule:
    if collective == "all_gather":
        return greedy_all_gather(lg, w, k, seed)
    rs = retime(reverse(greedy_all_gather(lg.transposed(), w, k, seed)))
    if collective == "reduce_scatter":
        return rs
    ag = greedy_all_gather(lg, w, k, seed + 0x9E3779B9)
    return concat(rs, ag)


def _bound(collective: str, lg: LinkGraph, chunk_bytes: float, k: int) -> LowerBound:
    if collective == "all_gather":
        return lower_bound(lg, chunk_bytes, k)
    rs = lower_bound(lg.transposed(), chunk_bytes, k)
    if collective == "reduce_scatter":
        return rs
    ag = lower_bound(lg, chunk_bytes, k)
    # Each NPU must receive (n-1)/n·M in the All-Gather part and send as much in the Reduce-Scatter part
    # over distinct time; the chunk-step bounds add the same way. Distance: a chunk must be reduced
    # to its owner and travel back out.
    return LowerBound(max(rs.chunk_steps, ag.chunk_steps), rs.bandwidth + ag.bandwidth, max(rs.distance, ag.distance))


def synthesize(
    topology: Topology,
    collective: str | CollectiveType,
    *,
    size: float,
    chunks_per_npu: int = 1,
    seed: int = 0,
    runs: int = 1,
    group: Sequence[int] | None = None,
) -> Synthesis:
    """Synthesise *collective* for *topology* and keep the best of *runs* seeds.

    Args:
        topology: any topology (switches are unwound, failures respected; see
            :mod:`etsim.producers.tacos`).
        collective: ``all_gather``, ``reduce_scatter`` or ``all_reduce``.
        size: bytes of the collective's whole output buffer (each of the ``n·k`` chunks is
            ``size / (n·k)``).
        chunks_per_npu: k.
        seed: first seed; run ``i`` uses ``seed + i``.
        runs: number of seeds tried; the fastest schedule (then the smallest seed) is kept.
        group: NPU ranks taking part (default: every live NPU).

    Raises:
        ConfigError: bad arguments or a group that cannot reach itself.
    """
    name = _collective_name(collective)
    if isinstance(chunks_per_npu, bool) or not isinstance(chunks_per_npu, int) or chunks_per_npu < 1:
        raise ConfigError(f"chunks per NPU must be an integer >= 1, got {chunks_per_npu!r}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigError(f"runs must be an integer >= 1, got {runs!r}")
    if not size >= 0:
        raise ConfigError(f"size must be >= 0 bytes, got {size!r}")
    lg = build_link_graph(topology, group)
    k = chunks_per_npu
    transfers = lg.n * (lg.n - 1) * k * (2 if name == "all_reduce" else 1)
    if transfers > MAX_TRANSFERS:
        raise ConfigError(
            f"{k} chunks per NPU on {lg.n} NPUs make {transfers:,} transfers, more than etsim's limit of "
            f"{MAX_TRANSFERS:,} per synthesis (a 64x64 mesh all-gather with one chunk per NPU has 16.8 million)"
        )
    if lg.n * k > MAX_CHUNKS:
        raise ConfigError(
            f"{k} chunks per NPU on {lg.n} NPUs make {lg.n * k:,} chunks, more than etsim's limit of {MAX_CHUNKS:,} "
            "per synthesis (each NPU's chunks are a bit mask of them all: the work grows as transfers x chunks)"
        )
    chunk_bytes = size / (lg.n * k)
    w = lg.weights(chunk_bytes)
    wall0 = time.perf_counter()
    best: Schedule | None = None
    best_seed = seed
    watch = progress.stage(f"synthesising {name} on {topology.name}", runs, "runs")
    for i in range(runs):
        sched = _one_run(name, lg, w, k, seed + i)
        watch.advance()
        if best is None or sched.time_ns < best.time_ns:
            best, best_seed = sched, seed + i
    wall = time.perf_counter() - wall0
    assert best is not None
    return Synthesis(
        name, topology, best, chunk_bytes, float(size), _bound(name, lg, chunk_bytes, k), best_seed, runs, wall
    )


def _collective_name(collective: str | CollectiveType) -> str:
    try:
        parsed = parse_collective(collective)
    except ValueError:
        parsed = None
    for key, value in COLLECTIVES.items():
        if value == parsed:
            return key
    what = parsed.name.lower() if parsed is not None else repr(collective)
    raise ConfigError(f"TACOS synthesis supports {', '.join(COLLECTIVES)}, not {what}")


def algo_graphs(sched: Schedule) -> list[AlgoGraph]:
    """Per-position algorithm graphs (symbolic sizes, one chunk per message) for *sched*.

    Each transfer becomes a SEND at its source and a RECV at its destination, tagged with the
    logical link id. The SEND depends on the previous SEND on that link and on every earlier node
    that brought its chunk to the source (the RECV, or for reductions the COMP that folded it in).
    RECVs have no dependencies: the k-th RECV on a link matches the k-th SEND. Each position's graph
    is made on its own (:func:`write_synthesis` makes and writes them one at a time).

    Data annotations (in place, for :mod:`etsim.algo.verify`): chunk ``i·n + p`` (position p's
    i-th) is buffer chunk ``p·k + i``; a transfer sends the source's copy of it and the receiver
    stores it, or for a reduction lands it in scratch and the COMP node adds it into its own.
    """
    touching = transfers_by_position(sched)
    return [position_graph(sched, touching, p) for p in range(sched.links.n)]


def write_synthesis(
    syn: Synthesis | Schedule, prefix: str | Path, *, jobs: int | None = None, size: int | None = None
) -> list[Path]:
    """Write the algorithm as a Chakra ET family ``PREFIX.<position>.et``; return the paths.

    A trailing ``.et`` on *prefix* is dropped. The family runs with ``--algo PREFIX`` on the
    group's ranks; peers are group positions. Ranks are made and written one at a time (memory stays
    that of one rank), over *jobs* processes (default: the CPU count; the files are the same). With
    *size* (the collective's buffer in bytes, a multiple of its chunk count) every message also carries
    its ``comm_size``.
    """
    sched = syn.schedule if isinstance(syn, Synthesis) else syn
    metadata = {"collective": syn.collective} if isinstance(syn, Synthesis) else {}
    n = sched.links.n
    total = n * sched.chunks_per_npu
    if size is not None and size % total:
        raise ValueError(f"a buffer of {size} bytes does not split into the algorithm's {total} chunks")
    # The files are what encode_algo_graph writes of algo_graphs(sched), framed from the transfers directly.
    encoder = FamilyEncoder(sched, transfers_by_position(sched), metadata=metadata, size=size)
    return write_family_by_rank(encoder.encode, n, prefix, jobs=jobs)
