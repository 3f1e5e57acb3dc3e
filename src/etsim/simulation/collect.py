"""The collect phase's pieces: a result's network section and links, and a folded run's mirrors filled in."""

from __future__ import annotations

import dataclasses
from typing import Any

from etsim.network.model import LinkStats
from etsim.network.topology import Topology
from etsim.report.result import CollectiveRecord, RankResult
from etsim.workload.fold import ReplicaFold

__all__ = ["instance_weights", "link_entries", "mirror_results", "network_info"]


def network_info(topo: Topology, label: str, model: str, messages: int, nbytes: float) -> dict[str, Any]:
    """The result's ``network`` section: *model* on topology *topo* (named *label*), the messages and bytes sent."""
    info: dict[str, Any] = {"model": model, "topology": label, "messages": messages, "bytes": nbytes}
    if topo.dims:  # lets plots lay links out on the grid of a mesh or torus
        info["dims"] = [{"kind": d.kind, "npus": d.npus} for d in topo.dims]
    return info


def link_entries(stats: list[LinkStats], finish: float) -> list[dict[str, Any]]:
    """The result's ``links``: every link that carried traffic (utilisation: the share of the run spent serialising)."""
    return [
        {
            "link": s.link,
            "src": s.src,
            "dst": s.dst,
            "bytes": s.bytes,
            "busy_ns": s.busy,
            "messages": s.messages,
            "bandwidth_GBps": s.bandwidth,
            "utilisation": s.busy / finish if finish > 0 else None,
        }
        for s in stats
        if s.messages
    ]


def mirror_results(
    fold: ReplicaFold, topo: Topology, ranks: list[RankResult], stats: list[LinkStats]
) -> tuple[list[RankResult], list[LinkStats]]:
    """A folded run's ranks and links, every one: each mirror takes its representative's (exact by symmetry)."""
    by_rank = {r.rank: r for r in ranks}
    ranks = [dataclasses.replace(by_rank[fold.rep[r]], rank=r) for r in range(len(fold.rep))]
    used = {s.link: s for s in stats}
    links = []
    for rep, orbit in fold.link_orbits().items():
        s = used.get(rep)
        if s is not None:
            links += [dataclasses.replace(s, link=x, src=topo.links[x][0], dst=topo.links[x][1]) for x in orbit]
    links.sort(key=lambda s: s.link)
    return ranks, links


def instance_weights(fold: ReplicaFold, records: list[CollectiveRecord]) -> list[int]:
    """How many members of its instance each of the simulated ranks' collective records stands for (bound check).

    A record's instance is complete once every member is counted: the record's rank and its mirrors in the same
    instance, the images of its rank under the elements that map its group onto itself (the data-parallel shifts
    for a data-parallel group), which have the record's times. (The group acts freely: the images are distinct.)
    """
    elements = fold.elements()[1:]
    fixing: dict[tuple[int, ...], int] = {}
    seen: dict[int, int] = {}  # (records of one call share their group's list)
    out = []
    for c in records:
        found = seen.get(id(c.group))
        if found is None:
            group = tuple(c.group)
            found = fixing.get(group)
            if found is None:
                members = frozenset(group)
                found = fixing[group] = 1 + sum(
                    1 for g in elements if frozenset(fold.apply(g, m) for m in group) == members
                )
            seen[id(c.group)] = found
        out.append(found)
    return out
