"""A researcher's own network model, in a file of their own (see docs/extending-network.md).

Links are store-and-forward FIFO servers, as in etsim's ``link`` model, and every switch holds each
message for a fixed processing time before forwarding it. Select it from a topology YAML with
``network: {model: processing_switch.py:ProcessingSwitchNetwork, processing: 200 ns}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import simpy

from etsim.network import NetworkModel
from etsim.network.model import option
from etsim.units import parse_time


def _time(value: object, *, key: str) -> float:
    return parse_time(value, key=key)


class ProcessingSwitchNetwork(NetworkModel):
    """Store-and-forward links plus a per-message processing delay in every switch."""

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options: the switch processing time."""

        processing: float = option(100.0, "ns a switch holds each message before forwarding it", _time)

    def setup(self) -> None:
        """One busy-until time per directed link."""
        self.free = [0.0] * len(self.topology.links)

    def transfer(self, src: int, dst: int, size: float) -> simpy.Event:
        """Forward hop by hop; the returned event succeeds when the message reaches *dst*."""
        done = self.env.event()
        self._hop(self.route(src, dst), 0, size, done)
        return done

    def _hop(self, route: list[int], i: int, size: float, done: simpy.Event, _event: Any = None) -> None:
        if i == len(route):
            done.succeed()
            return
        link = route[i]
        now = self.env.now
        serialise = size / self.topology.bandwidths[link]
        start = max(now, self.free[link])  # FIFO: wait for the messages queued before this one
        self.free[link] = start + serialise  # the link is busy only while serialising
        arrival = start + serialise + self.topology.latencies[link]
        _, head = self.topology.links[link]
        if isinstance(head, str):  # switches are named "s0", "s1", …; NPUs are integers
            arrival += self.options.processing
        self.env.timeout(arrival - now).callbacks.append(lambda event: self._hop(route, i + 1, size, done, event))
