"""Built-in network models; importing this package registers them in ``NETWORK_MODELS``."""

from __future__ import annotations

from etsim.network.models.analytical import AnalyticalNetwork
from etsim.network.models.ideal import IdealNetwork
from etsim.network.models.link import LinkNetwork

__all__ = ["AnalyticalNetwork", "IdealNetwork", "LinkNetwork"]
