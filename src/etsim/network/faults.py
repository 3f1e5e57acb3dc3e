"""Links that degrade, fail or recover during a run.

A :class:`LinkChange` sets a link's bandwidth to a share of its own from a given time on (0 fails it, 1 restores
it). :func:`schedule_link_changes` checks the changes against the topology before the run and, at each change's
time, hands the model the new bandwidths (:meth:`~etsim.network.model.NetworkModel.change_links`) and, while links
are down, a router that avoids them (:class:`AvoidingRouter`). Only a model that implements ``change_links``
takes them (``flow``); the others refuse before the run starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etsim.errors import ConfigError, SimulationError
from etsim.network.routing import Router
from etsim.network.scheduling import event_at
from etsim.network.topology import Node, Topology

if TYPE_CHECKING:
    import simpy

    from etsim.network.model import NetworkModel

__all__ = ["AvoidingRouter", "LinkChange", "schedule_link_changes"]


@dataclass(frozen=True)
class LinkChange:
    """A link's bandwidth from a time on.

    From *at* (ns), link *link* ``(u, v)`` (and ``(v, u)`` when *bidirectional*) carries *share* of its bandwidth:
    0 fails it, 1 restores it.
    """

    at: float
    link: tuple[Node, Node]
    share: float
    bidirectional: bool = True

    def link_ids(self, topology: Topology) -> list[int]:
        """The directed links the change applies to.

        Raises:
            ConfigError: a link the topology does not have.
        """
        pairs = [self.link] + ([(self.link[1], self.link[0])] if self.bidirectional else [])
        missing = [p for p in pairs if p not in topology.link_ids]
        if missing:
            u, v = missing[0]
            raise ConfigError(f"link [{u}, {v}]: {topology.name} has no link from {u!r} to {v!r}")
        return [topology.link_ids[p] for p in pairs]


class AvoidingRouter(Router):
    """Routes of *base*, but a route over a failed link is replaced by a fewest-hop path around the failed links.

    Args:
        base: the router to follow where it can.
        failed: link ids that are down.
    """

    def __init__(self, base: Router, failed: set[int]) -> None:
        super().__init__(base.topology)
        self.base = base
        self.failed = frozenset(failed)

    def route(self, src: int, dst: int) -> list[int]:
        """The base route if it avoids the failed links, else the fewest hops around them."""
        route = self.base.lookup(src, dst)
        if not self.failed.intersection(route):
            return list(route)
        import networkx as nx

        topo = self.topology
        down = [topo.links[link] for link in self.failed]
        try:
            nodes = nx.shortest_path(nx.restricted_view(topo.graph, [], down), src, dst)
        except nx.NetworkXNoPath:
            names = ", ".join(f"{u}->{v}" for u, v in sorted(down, key=str))
            raise SimulationError(
                f"{topo.name}: no path from NPU {src} to NPU {dst} while link(s) {names} are down"
            ) from None
        return self.nodes_to_links(nodes)


def schedule_link_changes(env: simpy.Environment, model: NetworkModel, changes: Sequence[LinkChange]) -> None:
    """At each change's time, set the links' bandwidths in *model* (and route around the failed ones).

    Raises:
        ConfigError: a link that does not exist, or a model that cannot change links during a run.
    """
    if not changes:
        return
    from etsim.network.model import NetworkModel

    if type(model).change_links is NetworkModel.change_links:
        raise ConfigError(
            f"network model {model.name or type(model).__name__!r} does not model links changing during a run "
            "(a fault at a time after 0): use the flow model"
        )
    topo = model.topology
    resolved = sorted(((c.at, c.link_ids(topo), c.share) for c in changes), key=lambda c: c[0])
    base = model.router
    failed: set[int] = set()

    def fire(event: Any) -> None:
        now = event.value
        bandwidths: dict[int, float] = {}
        for at, links, share in resolved:
            if at != now:
                continue
            for link in links:
                bandwidths[link] = topo.bandwidths[link] * share
                (failed.add if share == 0 else failed.discard)(link)
        model.change_links(bandwidths, AvoidingRouter(base, failed) if failed else base)

    for at in sorted({c[0] for c in resolved}):
        event_at(env, at, 0, at).callbacks.append(fire)
