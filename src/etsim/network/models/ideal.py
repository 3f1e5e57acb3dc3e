"""``ideal``: a fixed-delay, infinite-bandwidth network for testing the layers above the network."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from etsim.network.model import NETWORK_MODELS, NetworkModel, option
from etsim.network.topology import Topology
from etsim.units import parse_time

if TYPE_CHECKING:
    from etsim.network.bulk import IdealTiming

__all__ = ["IdealNetwork"]


def _parse_delay(value: object, *, key: str) -> float:
    return parse_time(value, key=key, default_unit="ns")


@NETWORK_MODELS.register("ideal")
class IdealNetwork(NetworkModel):
    """Every message between two different NPUs arrives exactly ``delay`` ns after it is sent.

    Size, route and contention are ignored (infinite bandwidth); ``src == dst`` takes 0 ns. One SimPy
    event per message. Also published through the entry point ``etsim-test-ideal`` so tests prove the
    entry-point path of the registry works.

    Args:
        env: the SimPy environment.
        topology: the network (only used to validate ranks).
        **options: ``delay`` (a time such as ``"1 us"``; bare numbers are ns), plus the base options.
    """

    name = "ideal"
    congestion_aware = False

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options of the ideal model."""

        delay: float = option(0.0, "fixed delivery delay (a time; bare numbers are ns)", _parse_delay)

    def __init__(self, env: simpy.Environment, topology: Topology, **options: Any) -> None:
        super().__init__(env, topology, **options)
        self._delay = self.options.delay
        self._npus = topology.npus

    def transfer(self, src: int, dst: int, size: float) -> simpy.Event:
        """Deliver after the fixed delay (0 ns when ``src == dst``)."""
        if not size >= 0:
            raise self._bad_size(size)
        npus = self._npus
        if src.__class__ is not int or dst.__class__ is not int or not (0 <= src < npus and 0 <= dst < npus):
            self.router.lookup(src, dst)  # raises the standard error
        return self.env.timeout(0 if src == dst else self._delay)

    def bulk_timing(self) -> IdealTiming:
        """Delivery times in bulk (a fixed delay; no state)."""
        from etsim.network.bulk import IdealTiming

        return IdealTiming(self)
