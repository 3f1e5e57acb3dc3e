"""Max-min fair rates by progressive filling: the one allocation both of ``flow``'s paths use.

The event path (``flow.py``) and the fast path (``flow_bulk.py``) allocate the same flows with this function, so
their rates are the same floats.
"""

from __future__ import annotations

import heapq

__all__ = ["fill"]


def fill(
    flows: list[int],
    links: list[int],
    route: list[tuple[int, ...]],
    on_link: list[dict[int, None]],
    bw: list[float],
    left_cap: list[float],
    count: list[int],
    fixed: list[float],
    weight: list[int] | None = None,
    load: list[int] | None = None,
) -> None:
    """Progressive filling: the tightest link fixes the share of its flows, which leave; repeat.

    Sets ``fixed[f]`` for every flow of *flows* (slots into *route*; *on_link* lists each link's flows, *links* every
    link they cross, and *flows* every flow on those links: a connected set, as both callers take); *left_cap* and
    *count* are scratch per link. The floats depend only on the routes of the
    flows, not on their slots or order: a link's flows all leave with its share, and links are taken in (share,
    link) order. So the event path and the fast path, which allocate the same flows, agree to the bit.

    A slot may stand for ``weight[slot]`` equal flows (one route, one start, one size: max-min gives them one
    rate); *load* is then each link's flows counted with their weights. Such a class takes its share once per
    member from every link it crosses, subtraction by subtraction as its members one by one would: the floats are
    those of the flows taken apart.
    """
    for link in links:
        left_cap[link] = bw[link]
        count[link] = len(on_link[link]) if load is None else load[link]  # (every flow there is one of *flows*)
    for slot in flows:
        fixed[slot] = -1.0
    heap = [(left_cap[link] / count[link], link) for link in links if count[link]]
    heapq.heapify(heap)
    while heap:
        share, link = heapq.heappop(heap)
        if not count[link]:
            continue
        current = left_cap[link] / count[link]
        if current != share:  # shares only grow as flows leave: a stale entry goes back with its new value
            heapq.heappush(heap, (current, link))
            continue
        for slot in on_link[link]:
            if fixed[slot] >= 0:
                continue
            fixed[slot] = share
            members = 1 if weight is None else weight[slot]
            if members == 1:
                for other in route[slot]:
                    left_cap[other] -= share
                    count[other] -= 1
                continue
            for other in route[slot]:
                cap = left_cap[other]
                for _ in range(members):
                    cap -= share
                left_cap[other] = cap
                count[other] -= members
