"""``flow``: a flow-level network: cut-through messages sharing links max-min fairly.

The model the field uses between store-and-forward links and congestion-unaware formulas (SimGrid's network
models are its best-known validated instance): each message is a *flow* over its route; at any instant the
flows that share links get a max-min fair share of the links' bandwidth (progressive filling); a flow's rate
changes only when a flow starts or ends.

Physics, for a message of S bytes over a route of links with bandwidths ``B_i`` and latencies ``L_i``:

- its bytes drain at the rate it is given, from the instant it is sent; alone, that rate is the bottleneck
  ``min B_i``, so it has drained after ``S / min B_i``;
- latency is paid once per hop by the head of the message, not per byte per hop (cut-through, as
  NVLink/NVSwitch, InfiniBand and RoCE fabrics forward): the message is delivered ``Σ L_i`` after its last
  byte left the source, ``Σ L_i + S / min B_i`` after it was sent when it is alone;
- k equal messages sent together over one link each get B/k and are delivered together, ``L + k·S/B`` after
  they were sent; a flow crossing two links shares each with the flows there, and gets what the tighter link
  leaves it (the textbook max-min examples hold; ``tests/network/test_flow.py``);
- zero-byte messages take ``Σ L_i``; a message to its own NPU is delivered at once.

Rates are recomputed only for the flows connected (through shared links) to a flow that started or ended, and
once per instant: flows that start at one instant are allocated together, after the instant's other events. The
only SimPy events are one per distinct completion instant and one per delivery; there is no event per packet
and no process per flow. Flows are flat lists indexed by a recycled slot.

Messages that start at one instant over one route with one size are one *class*: one slot with a weight. Max-min
gives equal flows equal rates, so a class drains and is delivered as its members would one by one, and
progressive filling takes its share member by member (``maxmin.fill``): the floats are those of the messages taken
apart (``tests/network/test_flow.py``). What a class changes is the order of same-instant deliveries: its members
are delivered together, in the order they were sent. An expert all-to-all of a folded run sends most of its
messages in such classes (the 63 of a rank to 64 peers fold onto about 7 routes).

:meth:`link_stats` reports each link's bytes, its busy time ``bytes / bandwidth`` (the time the link needed to
carry them, as for ``analytical``) and the messages that crossed it. The fast path
(:class:`~etsim.network.models.flow_bulk.FlowTiming`) times a collective's messages at once: in closed form where
none shares a link while it drains, else by the same max-min sharing over the collective's flows alone.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from etsim.errors import SimulationError
from etsim.network.bulk import LinkClaims
from etsim.network.model import NETWORK_MODELS, LinkStats, NetworkModel
from etsim.network.models.maxmin import fill
from etsim.network.routing import Router
from etsim.network.scheduling import LATE, event_at, succeed_at
from etsim.network.topology import Topology

if TYPE_CHECKING:
    from etsim.network.models.flow_bulk import FlowTiming, RouteTable

__all__ = ["FlowNetwork"]


@NETWORK_MODELS.register("flow")
class FlowNetwork(NetworkModel):
    """Cut-through messages as flows with max-min fair shares of the links they cross (see the module docstring).

    Args:
        env: the SimPy environment.
        topology: the network.
        **options: the base options (``router``, ``seed``).
    """

    name = "flow"
    summary = "cut-through flows sharing links max-min fairly"

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options of the flow model (the base ones)."""

    def __init__(self, env: simpy.Environment, topology: Topology, **options: Any) -> None:
        super().__init__(env, topology, **options)
        n = len(topology.links)
        self._bw = list(topology.bandwidths)  # (its own: links may change during the run, change_links)
        self._lat = topology.latencies
        self._bytes = [0.0] * n
        self._msgs = [0] * n
        # Links whose rate changed: bytes carried and their time at the earlier rates (link_stats' busy time).
        self._before: dict[int, tuple[float, float]] = {}
        # Per route: (links, Σ latency, bottleneck bandwidth).
        self._routes: dict[tuple[int, int], tuple[tuple[int, ...], float, float]] = {}
        self._interned: dict[tuple[int, ...], tuple[int, ...]] = {}
        # Flows, by slot: route, bytes left at `last`, rate (0 until allocated), when `left` was last brought up
        # to date, predicted end of draining, the delivery event, Σ latency, and a version that stale heap
        # entries carry.
        self._f_route: list[tuple[int, ...]] = []
        self._f_left: list[float] = []
        self._f_rate: list[float] = []
        self._f_last: list[float] = []
        self._f_end: list[float] = []
        self._f_done: list[simpy.Event | None] = []
        self._f_lat: list[float] = []
        self._f_version: list[int] = []
        # How many equal messages a slot carries: messages that start at one instant over one route with one size
        # drain as one class (max-min gives them one rate; ``fill`` takes their shares member by member).
        self._f_weight: list[int] = []
        self._free_slots: list[int] = []
        # The classes a message sent this instant may join, by (route's id, size), until the instant's allocation.
        self._joinable: dict[tuple[int, float], int] = {}
        self._join_at: float | None = None
        # Scratch of the allocation: per link the capacity left and the flows not yet fixed; per slot its share.
        self._left_cap = [0.0] * n
        self._count = [0] * n
        self._fixed: list[float] = []
        # Flows on each link (insertion-ordered: allocation iterates them deterministically), and their messages.
        self._on_link: list[dict[int, None]] = [{} for _ in range(n)]
        self._load = [0] * n
        # Links whose flows must be reallocated at the end of this instant; the instant it is armed for.
        self._dirty: dict[int, None] = {}
        self._realloc_at: float | None = None
        # (end, seq, slot, version): predicted ends of draining; the instants a wake-up is armed for.
        self._due: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._armed: set[float] = set()
        #: The fast path's claims: until when (and by whom) a collective evaluated ahead uses each link.
        self.claims = LinkClaims(n)
        self._claim = self.claims.until
        # When each link's last flow (either path's) finished draining.
        self._busy_until = [0.0] * n
        #: The routes the fast path has asked for, in arrays (made when it first asks).
        self._route_table: RouteTable | None = None

    # -- routes -------------------------------------------------------------------------------------------------

    def _route(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        found = self._routes.get((src, dst))
        if found is None:
            links = tuple(self.router.lookup(src, dst))
            links = self._interned.setdefault(links, links)  # (one object per route: classes join by its id)
            latency = 0.0
            for link in links:
                latency += self._lat[link]
            bottleneck = min((self._bw[link] for link in links), default=float("inf"))
            found = self._routes[src, dst] = (links, latency, bottleneck)
        return found

    # -- sending ------------------------------------------------------------------------------------------------

    def transfer(self, src: int, dst: int, size: float) -> simpy.Event:
        """Start the message's flow now; return its delivery event."""
        links, latency, _ = self._route(src, dst)
        if not size >= 0:
            raise self._bad_size(size)
        env = self.env
        if not links:
            return env.timeout(0)
        now = env.now
        if now < self.claims.latest:  # (the fast path has claimed links until a later instant)
            for link in links:
                if now < self._claim[link]:
                    raise self.claims.conflict(link, now)
        nbytes, msgs = self._bytes, self._msgs
        if self._join_at == now:
            slot = self._joinable.get((id(links), size), -1)  # (no class has size 0: such messages never join)
            if slot >= 0:  # one more member of a class that starts now: it drains and is delivered with it
                self._f_weight[slot] += 1
                load = self._load
                for link in links:  # (its bytes and message, and one more flow on the link: one pass)
                    nbytes[link] += size
                    msgs[link] += 1
                    load[link] += 1
                return self._f_done[slot]  # type: ignore[return-value]  # (set until the class ends)
        else:
            self._joinable.clear()
            self._join_at = now
        for link in links:
            nbytes[link] += size
            msgs[link] += 1
        if size == 0:
            return env.timeout(latency)
        done = env.event()
        slot = self._new_flow(links, size, latency, done, now)
        self._joinable[id(links), size] = slot
        self._admit(slot, now)
        return done

    def _admit(self, slot: int, now: float) -> None:
        """The flow starts draining now: it takes its share of every link of its route from this instant on."""
        self._f_last[slot] = now
        weight, load = self._f_weight[slot], self._load
        for link in self._f_route[slot]:
            self._on_link[link][slot] = None
            load[link] += weight
            self._dirty[link] = None
        self._arm_realloc(now)

    def _new_flow(self, links: tuple[int, ...], size: float, latency: float, done: simpy.Event, now: float) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
            self._f_route[slot] = links
            self._f_left[slot] = size
            self._f_rate[slot] = 0.0
            self._f_last[slot] = now
            self._f_end[slot] = float("inf")
            self._f_done[slot] = done
            self._f_lat[slot] = latency
            self._f_version[slot] += 1
            self._f_weight[slot] = 1
            return slot
        self._f_route.append(links)
        self._f_left.append(size)
        self._f_rate.append(0.0)
        self._f_last.append(now)
        self._f_end.append(float("inf"))
        self._f_done.append(done)
        self._f_lat.append(latency)
        self._f_version.append(0)
        self._f_weight.append(1)
        self._fixed.append(-1.0)
        return len(self._f_route) - 1

    # -- time: completions and reallocation ----------------------------------------------------------------------

    def _arm_realloc(self, now: float) -> None:
        if self._realloc_at != now:
            self._realloc_at = now
            event_at(self.env, now, LATE, now).callbacks.append(self._reallocate_event)

    def _reallocate_event(self, event: simpy.Event) -> None:
        self._realloc_at = None
        self._reallocate(self.env.now)

    def _arm_wake(self) -> None:
        due = self._due
        while due:
            end, _, slot, version = due[0]
            if self._f_version[slot] == version and self._f_done[slot] is not None:
                if end not in self._armed:
                    self._armed.add(end)
                    event_at(self.env, end, 1, end).callbacks.append(self._wake)
                return
            heapq.heappop(due)

    def _wake(self, event: simpy.Event) -> None:
        now = self.env.now
        self._armed.discard(now)
        self._complete_due(now)
        if self._dirty:  # the flows that shared links with the ended ones: reallocated once this instant is done
            self._arm_realloc(now)
        else:
            self._arm_wake()

    def _complete_due(self, now: float) -> None:
        """End every flow whose predicted end of draining is due; its delivery follows after its latency."""
        due = self._due
        while due and due[0][0] <= now:
            _, _, slot, version = heapq.heappop(due)
            done = self._f_done[slot]
            if self._f_version[slot] != version or done is None:
                continue
            busy_until, weight, load = self._busy_until, self._f_weight[slot], self._load
            for link in self._f_route[slot]:
                del self._on_link[link][slot]
                load[link] -= weight
                self._dirty[link] = None
                if busy_until[link] < now:
                    busy_until[link] = now  # the fast path must not start a flow here before this
            self._f_done[slot] = None
            self._free_slots.append(slot)
            succeed_at(self.env, done, self._f_lat[slot])

    def _reallocate(self, now: float) -> None:
        """Max-min fair rates for the flows connected to the dirty links; new predicted ends where rates changed."""
        self._complete_due(now)
        self._join_at = None  # (a message sent later this instant starts a class of its own)
        on_link = self._on_link
        seen_links: dict[int, None] = {}
        flows: dict[int, None] = {}
        stack = list(self._dirty)
        self._dirty.clear()
        for link in stack:
            seen_links[link] = None
        while stack:
            link = stack.pop()
            for slot in on_link[link]:
                if slot not in flows:
                    flows[slot] = None
                    for other in self._f_route[slot]:
                        if other not in seen_links:
                            seen_links[other] = None
                            stack.append(other)
        if flows:
            self._allocate(sorted(flows), sorted(seen_links), now)
        self._arm_wake()

    def _allocate(self, flows: list[int], links: list[int], now: float) -> None:
        """Max-min fair rates (:func:`fill`); flows whose rate changed get a new predicted end."""
        route, rate_of, fixed = self._f_route, self._f_rate, self._fixed
        fill(
            flows, links, route, self._on_link, self._bw, self._left_cap, self._count, fixed, self._f_weight, self._load
        )
        for slot in flows:
            rate = fixed[slot]
            if rate == rate_of[slot]:
                continue  # unchanged: its predicted end stands, to the bit
            old = rate_of[slot]
            if old:
                self._f_left[slot] -= old * (now - self._f_last[slot])
            self._f_last[slot] = now
            rate_of[slot] = rate
            end = now + self._f_left[slot] / rate
            self._f_end[slot] = end
            self._f_version[slot] += 1
            self._seq += 1
            heapq.heappush(self._due, (end, self._seq, slot, self._f_version[slot]))
        if len(self._due) > 4 * (len(self._f_route) - len(self._free_slots)) + 1024:
            self._compact()

    def _compact(self) -> None:
        """Drop the heap entries that rate changes made stale (they would otherwise pile up with reallocations)."""
        version, done = self._f_version, self._f_done
        self._due = [e for e in self._due if version[e[2]] == e[3] and done[e[2]] is not None]
        heapq.heapify(self._due)

    # -- links that change during the run -----------------------------------------------------------------------

    def change_links(self, bandwidths: Mapping[int, float], router: Router) -> None:
        """New bandwidths from now on, and *router*'s routes.

        Flows in flight over a changed link are re-shared; those over a failed link continue, with the bytes they
        have left, over *router*'s route around it (one more message on each link of the new route; those bytes
        move from the old route's links to the new one's).
        """
        now = self.env.now
        self.router = router
        self._routes.clear()
        self._interned.clear()
        self._join_at = None
        self._route_table = None
        failed = {link for link, bw in bandwidths.items() if bw == 0}
        for link, bw in bandwidths.items():
            self._close_period(link, now)
            self._dirty[link] = None
            if bw > 0:
                self._bw[link] = bw
        for slot, route in enumerate(self._f_route):
            if self._f_done[slot] is None or not failed.intersection(route):
                continue
            self._withdraw(slot, now)  # (the bytes it has left go by the new route instead)
            weight = self._f_weight[slot]
            src, dst = self.topology.links[route[0]][0], self.topology.links[route[-1]][1]  # (a route joins them)
            try:
                links, latency, _ = self._route(src, dst)  # type: ignore[arg-type]
            except SimulationError as exc:
                raise SimulationError(
                    f"at t = {now:.1f} ns a message from NPU {src} to NPU {dst} was in flight with "
                    f"{self._f_left[slot]:.0f} bytes left when its route failed, and has no other: {exc}"
                ) from None
            for link in links:
                self._bytes[link] += self._f_left[slot] * weight
                self._msgs[link] += weight
            self._f_route[slot], self._f_lat[slot] = links, latency
            self._f_rate[slot], self._f_end[slot] = 0.0, float("inf")
            self._f_version[slot] += 1  # (its predicted end is void)
            self._admit(slot, now)
        self._arm_realloc(now)

    def _withdraw(self, slot: int, now: float) -> None:
        """Take flow *slot* off its route's links now; they are re-shared this instant.

        Its bytes left leave the links' counts, which took them when it was sent (member by member, as the messages
        of a class taken apart). The links keep their rates, so their busy time stays their bytes at them
        (``_close_period`` is for a rate that changes).
        """
        if self._f_rate[slot]:
            self._f_left[slot] -= self._f_rate[slot] * (now - self._f_last[slot])
            self._f_last[slot] = now
        weight, left = self._f_weight[slot], self._f_left[slot]
        for link in self._f_route[slot]:
            del self._on_link[link][slot]
            self._load[link] -= weight
            self._dirty[link] = None
            for _ in range(weight):
                self._bytes[link] -= left

    def stop_npu(self, npu: int) -> None:
        """*npu* failed now: the flows it sends stop with the bytes they have left (never delivered).

        A dead GPU kept sending: its 10 MB message held half of a shared link for 1.5 ms after it failed. What live
        NPUs send it drains as sent (their senders know no better), as under the other models.
        """
        now, links = self.env.now, self.topology.links
        self._join_at = None  # (no message sent later this instant joins a class that stops)
        for slot, route in enumerate(self._f_route):
            if self._f_done[slot] is None or links[route[0]][0] != npu:
                continue
            self._withdraw(slot, now)  # (the bytes it has left are never sent)
            self._f_done[slot] = None
            self._f_version[slot] += 1
            self._free_slots.append(slot)
        if self._dirty:
            self._arm_realloc(now)

    # -- reporting and the fast path ------------------------------------------------------------------------------

    def route_table(self) -> RouteTable:
        """The routes the fast path has asked for, as arrays (made when it first asks)."""
        if self._route_table is None:
            from etsim.network.models.flow_bulk import RouteTable

            self._route_table = RouteTable(self)
        return self._route_table

    def take_bulk(self, nbytes: list[float], msgs: list[int], ends: dict[int, float]) -> None:
        """Continue from a bulk timing's statistics and its links' flow ends.

        *nbytes* and *msgs* are per link; *ends* maps a link to when its last flow finished draining.
        """
        self._bytes, self._msgs = nbytes, msgs
        for link, end in ends.items():
            self._busy_until[link] = end

    def _close_period(self, link: int, now: float) -> None:
        """Before *link*'s rate changes: the bytes it has carried so far, and their time at the rates it had."""
        in_flight = 0.0
        for slot in self._on_link[link]:  # (bytes left at `last`, less what the rate since drained; 0 before one)
            left = self._f_left[slot] - self._f_rate[slot] * (now - self._f_last[slot])
            in_flight += left * self._f_weight[slot]
        carried, busy = self._before.get(link, (0.0, 0.0))
        now_carried = max(carried, self._bytes[link] - in_flight)
        self._before[link] = (now_carried, busy + (now_carried - carried) / self._bw[link])

    def link_stats(self) -> list[LinkStats]:
        """Bytes, the time they need at the link's bandwidth (at each rate it had), and messages, per directed link."""
        topo = self.topology
        out = []
        for i, (u, v) in enumerate(topo.links):
            carried, busy = self._before.get(i, (0.0, 0.0))
            busy += (self._bytes[i] - carried) / self._bw[i]
            out.append(LinkStats(i, u, v, self._bw[i], self._lat[i], self._bytes[i], busy, self._msgs[i]))
        return out

    def bulk_timing(self) -> FlowTiming:
        """Delivery times in bulk for a collective's messages, lone or sharing links (``flow_bulk.py``)."""
        from etsim.network.models.flow_bulk import FlowTiming

        return FlowTiming(self)
