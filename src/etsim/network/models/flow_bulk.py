"""``flow`` in bulk: a collective's messages timed at once, alone on their links or sharing them.

The fast path (``workload/bulk.py``) hands :class:`FlowTiming` a collective's messages node by node. Where every
message is alone on its links while it drains, its delivery is the closed form ``(t + size / min B) + Σ L``, the
floats the event path computes. Where messages of the collective share links (a direct all-to-all's sends leave
one NPU together), :meth:`FlowTiming.post` collects them until the walker needs a delivery, and
:meth:`FlowTiming.settle` runs the event path's own sharing over the collected flows alone: the same instants
(starts, and ends of draining), the same progressive filling (:func:`~etsim.network.models.maxmin.fill`, whose floats
depend only on the routes allocated together), the same per-flow updates (bytes left, rate, predicted end) only
where a rate changed. So deliveries equal the event path's to the bit (``tests/network/test_flow_bulk.py``, and the
differential tests of ``tests/workload/test_bulk.py``), at the cost of one allocation per distinct instant over the
flows connected to what changed, with no SimPy event, walker step or object per message.

Exactness needs the collected flows to be alone with each other: no event-path flow drains on their links when
the collective is evaluated, none of their links still carries an earlier committed flow when one of them starts,
and later traffic on their links waits for their ends (the committed links are claimed; an event-path message on
one raises :class:`~etsim.errors.FastPathConflict` and the run is redone with the collective on the event path).
A settle refuses (``None``) otherwise.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from etsim.network.bulk import BulkTiming
from etsim.network.models.maxmin import fill

if TYPE_CHECKING:
    import numpy as np

    from etsim.network.models.flow import FlowNetwork

__all__ = ["FlowTiming", "RouteTable"]


class FlowTiming(BulkTiming):
    """``flow`` in bulk: lone messages in closed form, messages sharing links by the event path's sharing.

    :meth:`post` and :meth:`settle` time several nodes' messages together, sharing links or not (:meth:`send`, one
    node's). A message is
    timed only if none of its links carries an event-path flow now and, on each of its links, the previous flow
    committed before (of either path) has drained by the time it starts. Committed links are claimed up to the
    end of their last flow.
    """

    stateful = True
    batches = True

    def __init__(self, model: FlowNetwork) -> None:
        import numpy as np

        self.model = model
        n = len(model._bw)
        self.active = np.array([bool(flows) for flows in model._on_link], dtype=bool)
        self.busy_until = np.array(model._busy_until, dtype=float)
        # Statistics continue the model's, in the order the event path would add them (each link's flows in turn).
        self.bytes = np.array(model._bytes, dtype=float)
        self.msgs = np.array(model._msgs, dtype=np.int64)
        self.touched = np.zeros(n, dtype=bool)
        self._routes: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._posted: list[tuple[Any, Any, Any, Any, Any, float]] = []

    def _route(self, src: np.ndarray, dst: np.ndarray) -> tuple[Any, Any, Any, Any]:
        """``(matrix, valid, latency, bottleneck)`` of the routes from ``src[i]`` to ``dst[i]`` (cached by identity)."""
        key = (id(src), id(dst))
        found = self._routes.get(key)
        if found is None:
            matrix, latency, bottleneck = self.model.route_table().rows(src, dst)
            found = self._routes[key] = (matrix, matrix >= 0, latency, bottleneck, src, dst)
        return found[0], found[1], found[2], found[3]

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """One node's messages timed on their own (:meth:`post`, then :meth:`settle`); None where not timed here."""
        self.post(src, dst, size, t, after, cause)
        settled = self.settle()
        return None if settled is None else settled[0]

    def post(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> None:
        """Collect one node's messages (as :meth:`send` takes them) for the next :meth:`settle`."""
        matrix, valid, latency, bottleneck = self._route(src, dst)
        self._posted.append((matrix, valid, latency, bottleneck, t + after if after > 0 else t, size))
        self._count(matrix, valid, size)

    def settle(self) -> list[np.ndarray] | None:
        """The deliveries of every message posted since the last settle, per post; None: not timed here."""
        import numpy as np

        posted, self._posted = self._posted, []
        out: list[np.ndarray] = []
        parts: list[tuple[int, Any]] = []  # (post, its rows that are flows: bytes over at least one link)
        for k, (_, valid, latency, _, start, nbytes) in enumerate(posted):
            rows = valid.any(axis=1)
            out.append(start + latency if rows.any() else start.copy())  # (a zero-byte message takes Σ L)
            if nbytes > 0 and rows.any():
                parts.append((k, rows.nonzero()[0]))
        if not parts:
            return out
        width = max(posted[k][0].shape[1] for k, _ in parts)
        matrix = np.concatenate([
            np.pad(posted[k][0][rows], ((0, 0), (0, width - posted[k][0].shape[1])), constant_values=-1)
            for k, rows in parts
        ])  # fmt: skip
        start = np.concatenate([posted[k][4][rows] for k, rows in parts])
        size = np.concatenate([np.full(len(rows), posted[k][5], dtype=float) for k, rows in parts])
        bottleneck = np.concatenate([posted[k][3][rows] for k, rows in parts])
        valid = matrix >= 0
        links = matrix[valid]
        starts = np.broadcast_to(start[:, None], matrix.shape)[valid]
        if bool(self.active[links].any()) or bool((starts < self.busy_until[links]).any()):
            return None  # an event-path flow drains there now, or an earlier committed flow still does
        end = _alone(matrix, valid, start, size / bottleneck)
        if end is None:
            end = _shared(self.model, matrix, valid, start, size)
        np.maximum.at(self.busy_until, links, np.broadcast_to(end[:, None], matrix.shape)[valid])
        at = 0
        for k, rows in parts:
            out[k][rows] = end[at : at + len(rows)] + posted[k][2][rows]
            at += len(rows)
        return out

    def _count(self, matrix: Any, valid: Any, size: float) -> None:
        import numpy as np

        links = matrix[valid]
        np.add.at(self.bytes, links, size)  # (zero-byte messages may share a link)
        np.add.at(self.msgs, links, 1)
        self.touched[links] = True

    def commit(self, owner: tuple[object, int]) -> None:
        """Add the statistics, and claim every link used up to the end of its last flow."""
        model = self.model
        ends = {link: float(self.busy_until[link]) for link in self.touched.nonzero()[0].tolist()}
        model.take_bulk(self.bytes.tolist(), self.msgs.tolist(), ends)
        for link, end in ends.items():
            model.claims.claim(link, end, owner)
        self._routes.clear()

    def abort(self) -> None:
        """Leave the model as it was."""
        self._routes.clear()
        self._posted.clear()


def _alone(matrix: Any, valid: Any, start: Any, drain: Any) -> Any:
    """Each flow's end of draining if none shares a link while it drains (the closed form), else None.

    Flows are taken per link in start order: one that starts before the previous one ended would share.
    """
    import numpy as np

    end = start + drain
    flow = np.broadcast_to(np.arange(len(start))[:, None], matrix.shape)[valid]
    links = matrix[valid]
    order = np.lexsort((start[flow], links))
    links, flow = links[order], flow[order]
    same = links[1:] == links[:-1]
    if bool((same & (start[flow[1:]] < end[flow[:-1]])).any()):
        return None
    return end


def _shared(model: FlowNetwork, matrix: Any, valid: Any, start: Any, size: Any) -> Any:
    """Each flow's end of draining, the flows sharing their links max-min fairly, as the event path shares them.

    At each instant (a start or a predicted end): the flows whose end is due leave, those starting join, and the
    flows connected to their links (through shared links) are allocated together; a flow whose rate changed has
    its bytes left brought up to date and a new predicted end. The float operations are ``_allocate``'s and
    ``_complete_due``'s (``flow.py``), elementwise here; predicted ends are kept per distinct value (flows of one
    route class end together), so that a wave of a million flows is a few instants. Where a quarter or more of the
    flows in flight joined or left, every flow in flight is allocated (the flows not connected to a change keep
    their rates to the bit: :func:`~etsim.network.models.maxmin.fill` gives each connected set its own floats).
    """
    import numpy as np

    count = len(start)
    if bool(valid.all()):
        route: list[tuple[int, ...]] = list(zip(*matrix.T.tolist(), strict=True))
    else:
        route = [tuple(x for x in row if x >= 0) for row in matrix.tolist()]
    n = len(model._bw)
    on_link: list[dict[int, None]] = [{} for _ in range(n)]
    left = size.astype(float)
    rate = np.zeros(count)
    last = np.zeros(count)
    version = np.zeros(count, dtype=np.int64)
    running = np.zeros(count, dtype=bool)
    end_of = np.zeros(count)
    fixed = [-1.0] * count
    left_cap, link_count = [0.0] * n, [0] * n
    bw = model._bw
    order = np.argsort(start, kind="stable")
    begins = start[order]
    instants = begins[np.r_[True, begins[1:] != begins[:-1]]].tolist()
    cuts = np.searchsorted(begins, [*instants, np.inf]).tolist()
    due: dict[float, list[tuple[Any, Any]]] = {}  # predicted end -> (flows, their versions) that predicted it
    ends: list[float] = []  # the distinct predicted ends, a heap
    k = 0
    while k < len(instants) or ends:
        now = min(instants[k] if k < len(instants) else np.inf, ends[0] if ends else np.inf)
        dirty: dict[int, None] = {}
        changes = 0
        if ends and ends[0] == now:
            heapq.heappop(ends)
            leaving = np.concatenate([f[version[f] == v] for f, v in due.pop(now)])
            version[leaving] = -1  # (ended: no prediction of it stands)
            end_of[leaving] = now
            running[leaving] = False
            dirty.update(dict.fromkeys(_on_links(on_link, matrix, leaving, join=False)))
            changes += len(leaving)
        if k < len(instants) and instants[k] == now:
            joining = order[cuts[k] : cuts[k + 1]]
            last[joining] = now
            running[joining] = True
            dirty.update(dict.fromkeys(_on_links(on_link, matrix, joining, join=True)))
            changes += len(joining)
            k += 1
        if 4 * changes >= int(running.sum()):
            group_array = running.nonzero()[0]
            rows = matrix[group_array]
            group, links = group_array.tolist(), np.unique(rows[rows >= 0]).tolist()
        else:
            group, links = _connected(dirty, on_link, route)
        if not group:
            continue
        fill(group, links, route, on_link, bw, left_cap, link_count, fixed)
        g = np.array(group, dtype=np.int64)
        new = np.array([fixed[f] for f in group])
        changed = new != rate[g]  # unchanged: its predicted end stands, to the bit
        g, new = g[changed], new[changed]
        if not len(g):
            continue
        old = rate[g]
        moving = old != 0
        left[g[moving]] = left[g[moving]] - old[moving] * (now - last[g[moving]])
        last[g] = now
        rate[g] = new
        version[g] += 1
        _predict(due, ends, g, now + left[g] / new, version)
    return end_of


def _predict(due: dict[float, list[tuple[Any, Any]]], ends: list[float], flows: Any, end: Any, version: Any) -> None:
    """File each of *flows* under its predicted *end* (with its version); a new value goes on the heap *ends*."""
    import numpy as np

    by_end = np.argsort(end, kind="stable")
    values = end[by_end]
    firsts = np.r_[True, values[1:] != values[:-1]].nonzero()[0].tolist()
    for a, b in zip(firsts, [*firsts[1:], len(values)], strict=True):
        value = float(values[a])
        members = flows[by_end[a:b]]
        bucket = due.get(value)
        if bucket is None:
            bucket = due[value] = []
            heapq.heappush(ends, value)
        bucket.append((members, version[members]))


def _on_links(on_link: list[dict[int, None]], matrix: Any, flows: Any, *, join: bool) -> list[int]:
    """Put *flows* on (or take them off) the links of their routes; return those links."""
    import numpy as np

    rows = matrix[flows]
    used = rows >= 0
    links = rows[used]
    if not len(links):
        return []
    members = np.broadcast_to(flows[:, None], rows.shape)[used]
    by_link = np.argsort(links, kind="stable")
    links, members = links[by_link], members[by_link]
    cuts = np.r_[0, (links[1:] != links[:-1]).nonzero()[0] + 1, len(links)].tolist()
    touched = links[cuts[:-1]].tolist()
    members_list = members.tolist()
    for link, a, b in zip(touched, cuts[:-1], cuts[1:], strict=True):
        held = on_link[link]
        if join:
            held.update(dict.fromkeys(members_list[a:b]))
        elif b - a == len(held):
            held.clear()  # (every flow on it leaves)
        else:
            for f in members_list[a:b]:
                del held[f]
    return touched


def _connected(dirty: dict[int, None], on_link: list[dict[int, None]], route: list[tuple[int, ...]]) -> tuple[
    list[int], list[int]
]:  # fmt: skip
    """The flows connected to the *dirty* links through shared links, and their links (both sorted)."""
    seen: dict[int, None] = dict.fromkeys(dirty)
    found: dict[int, None] = {}
    stack = list(dirty)
    while stack:
        for f in on_link[stack.pop()]:
            if f not in found:
                found[f] = None
                for other in route[f]:
                    if other not in seen:
                        seen[other] = None
                        stack.append(other)
    return sorted(found), sorted(seen)


class RouteTable:
    """Routes between NPU pairs as numpy rows (links, padded with -1; Σ latency; bottleneck), made once per pair.

    Rows are the model's own ``_route`` (the same links, and the latency summed in route order as the event path
    sums it); a dense pair index serves networks of up to :data:`DENSE_NPUS` NPUs, a dict larger ones.
    """

    #: Networks with at most this many NPUs index their pairs with a dense array (4 bytes per pair).
    DENSE_NPUS = 2048

    def __init__(self, model: FlowNetwork) -> None:
        import numpy as np

        self.model = model
        self.npus = model.topology.npus
        self.dense = np.full(self.npus * self.npus, -1, dtype=np.int32) if self.npus <= self.DENSE_NPUS else None
        self.index: dict[int, int] = {}
        self.links = np.full((16, 1), -1, dtype=np.int64)
        self.latency = np.zeros(16)
        self.bottleneck = np.zeros(16)
        self.count = 0

    def rows(self, src: np.ndarray, dst: np.ndarray) -> tuple[Any, Any, Any]:
        """``(links matrix, latency, bottleneck)`` of each route ``src[i] -> dst[i]``."""
        import numpy as np

        pairs = src.astype(np.int64) * self.npus + dst
        rows = self._lookup(pairs)
        missing = rows < 0
        if missing.any():
            self._add(np.unique(pairs[missing]).tolist())
            rows = self._lookup(pairs)
        width = int((self.links[rows] >= 0).sum(axis=1).max()) if len(rows) else 0
        return self.links[rows, : max(width, 1)], self.latency[rows], self.bottleneck[rows]

    def _lookup(self, pairs: np.ndarray) -> np.ndarray:
        import numpy as np

        if self.dense is not None:
            return self.dense[pairs]
        get = self.index.get
        return np.fromiter((get(p, -1) for p in pairs.tolist()), dtype=np.int64, count=len(pairs))

    def _add(self, pairs: list[int]) -> None:
        """Rows for these pairs: the router's routes, their latency and bottleneck as the event path computes them."""
        import numpy as np

        # (Not the router's cache: the rows are this table's, and a million routes cached twice cost 300 MB.)
        n, route = self.npus, self.model.router.checked_route
        found = [route(pair // n, pair % n) for pair in pairs]
        lengths = np.array([len(links) for links in found], dtype=np.int64)
        first, added = self.count, len(found)
        width = max(int(lengths.max()), self.links.shape[1])
        if first + added > len(self.latency) or width > self.links.shape[1]:
            size = (
                len(self.latency) if first + added <= len(self.latency) else max(2 * len(self.latency), first + added)
            )
            grown = np.full((size, width), -1, dtype=np.int64)
            grown[:first, : self.links.shape[1]] = self.links[:first]
            self.links = grown
            self.latency = np.resize(self.latency, size)
            self.bottleneck = np.resize(self.bottleneck, size)
        block = np.full((added, width), -1, dtype=np.int64)
        rows = np.repeat(np.arange(added), lengths)
        block[rows, np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = [
            link for links in found for link in links
        ]
        latency, bottleneck = np.zeros(added), np.full(added, np.inf)
        lat, bw = np.asarray(self.model._lat, dtype=float), np.asarray(self.model._bw, dtype=float)
        for column in block.T:  # hop by hop: Σ L in route order, as FlowNetwork._route sums it
            hop = column >= 0
            latency[hop] = latency[hop] + lat[column[hop]]
            bottleneck[hop] = np.minimum(bottleneck[hop], bw[column[hop]])
        self.links[first : first + added] = block
        self.latency[first : first + added] = latency
        self.bottleneck[first : first + added] = bottleneck
        self.count += added
        numbers = np.arange(first, first + added)
        if self.dense is not None:
            self.dense[pairs] = numbers
        else:
            self.index.update(zip(pairs, numbers.tolist(), strict=True))
