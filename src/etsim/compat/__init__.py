"""Compatibility with other simulators' inputs and conventions (ASTRA-sim).

Everything specific to another simulator lives here: :mod:`~etsim.compat.astra` (ASTRA-sim's
system/remote-memory JSON, its settings of etsim's general mechanisms, ``run_astra``),
:mod:`~etsim.compat.collectives` (its native collective implementations as per-dimension phases, the
``astra:`` algorithm source),
:mod:`~etsim.compat.network` (its network YAML) and :mod:`~etsim.compat.cli` (``etsim astra``).
"""

from etsim.compat.astra import astra_output, astra_settings, load_astra_system, run_astra

__all__ = ["astra_output", "astra_settings", "load_astra_system", "run_astra"]
