"""What each job of a cluster run put on each link: messages charged along their routes, shared links named."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etsim.network import NETWORK_MODELS, NetworkConfig
from etsim.network.routing import make_router
from etsim.report.record import RunRecorder

__all__ = ["TrafficByPair", "link_tables", "traffic"]


class TrafficByPair(RunRecorder):
    """A run recorder that also adds up every message by (source, destination) rank: [bytes, messages]."""

    def __init__(self) -> None:
        super().__init__(messages=True, message_limit=0)
        self.pairs: dict[tuple[int, int], list[float]] = {}

    def message_sent(self, run: Any, j: int, src: int, dst: int, tag: int, size: float) -> None:
        """Count the message's bytes (no row is kept)."""
        use = self.pairs.get((src, dst))
        if use is None:
            self.pairs[(src, dst)] = [size, 1]
        else:
            use[0] += size
            use[1] += 1


def traffic(
    net: NetworkConfig, pairs: dict[tuple[int, int], list[float]], owner: dict[int, int], jobs: int
) -> dict[int, list[list[float]]]:
    """Link id → per job, the [bytes, messages] its messages put on it (each charged along its route)."""
    router = make_router(NETWORK_MODELS.get(net.model).checked_options(net.options).router, net.topology)
    per_link: dict[int, list[list[float]]] = {}
    for (src, dst), (size, count) in sorted(pairs.items()):
        if src == dst:
            continue
        job = owner[src]
        for link in router.route(src, dst):
            use = per_link.setdefault(link, [[0.0, 0] for _ in range(jobs)])[job]
            use[0] += size
            use[1] += count
    return per_link


def link_tables(
    net: NetworkConfig,
    per_link: dict[int, list[list[float]]],
    run_links: list[dict[str, Any]],
    names: Sequence[str],
    durations: Sequence[float],
) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Each job's links and the links jobs shared.

    A link one job used alone is the run's entry for it (busy time as the model measured it); on a shared link a
    job's busy time is its bytes at the link's rate, its utilisation that over its duration. Where the shared link's
    rate changed during the run, or it carried other bytes than those charged (a failed GPU's unsent rest, a
    detour), neither is known per job: the shared-links table gives None, the job's own entry its bytes at the
    link's rate and no utilisation (the run's own link statistics hold the whole).
    """
    topo = net.topology
    measured = {entry["link"]: entry for entry in run_links}
    rate_changed = {link for change in net.changes for link in change.link_ids(topo)}
    mine: list[list[dict[str, Any]]] = [[] for _ in names]
    shared = []
    for link in sorted(per_link):
        src, dst = topo.links[link]
        rate = topo.bandwidths[link]
        uses = [(j, use) for j, use in enumerate(per_link[link]) if use[0] > 0]
        total = sum(use[0] for _, use in uses)
        run = measured.get(link)
        # Where the link's rate changed during the run, or it carried other bytes than the messages charged to it
        # (a failed GPU's unsent rest, a detour), the jobs sharing it are not known each a time: the run's link
        # statistics hold the whole (split by bytes, a job was given 150% of its own time).
        other_bytes = run is not None and abs(run["bytes"] - total) > 1e-9 * max(total, 1.0)
        unknown = len(uses) > 1 and (link in rate_changed or other_bytes)
        users = {}
        for j, (nbytes, count) in uses:
            busy = run["busy_ns"] if run is not None and len(uses) == 1 else nbytes / rate
            share = busy / durations[j] if durations[j] > 0 and not unknown else None
            entry = {"link": link, "src": src, "dst": dst, "bytes": nbytes, "busy_ns": busy, "messages": int(count),
                     "bandwidth_GBps": rate, "utilisation": share}  # fmt: skip
            mine[j].append(entry)
            part = None if unknown and other_bytes else nbytes
            users[names[j]] = {"bytes": part, "busy_ns": None if unknown else busy, "utilisation": share}
        if len(users) > 1:
            shared.append({"link": link, "src": src, "dst": dst, "bandwidth_GBps": rate, "jobs": users})
    return mine, shared
