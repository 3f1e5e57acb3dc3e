"""``ideal``: a fixed-delay, infinite-bandwidth network for testing the layers above the network."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from etsim.network.bulk import BulkTiming
from etsim.network.model import NETWORK_MODELS, NetworkModel, option
from etsim.network.topology import Topology
from etsim.options import Time

if TYPE_CHECKING:
    import numpy as np

__all__ = ["IdealNetwork", "IdealTiming"]


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
    summary = "a fixed delay per message"
    congestion_aware = False

    @dataclass(frozen=True, kw_only=True)
    class Options(NetworkModel.Options):
        """Options of the ideal model."""

        delay: float = option(0.0, "fixed delivery delay (a time; bare numbers are ns)", Time(bare_unit="ns"))

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
        return IdealTiming(self)


class IdealTiming(BulkTiming):
    """``ideal``: a fixed delay between different NPUs, none to itself; no state, no statistics."""

    def __init__(self, model: IdealNetwork) -> None:
        self.delay = model._delay

    def send(
        self, src: np.ndarray, dst: np.ndarray, size: float, t: np.ndarray, after: float, cause: tuple[int, int]
    ) -> np.ndarray | None:
        """``(t + after) + delay`` (the base ``transfer_after``: a timeout, then the transfer)."""
        import numpy as np

        t1 = t + after if after > 0 else t
        return t1 + np.where(src == dst, 0.0, self.delay)
