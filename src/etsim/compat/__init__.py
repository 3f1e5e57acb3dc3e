"""Compatibility with other simulators' inputs and conventions (ASTRA-sim)."""

from etsim.compat.astra import astra_output, load_astra_system, run_astra

__all__ = ["astra_output", "load_astra_system", "run_astra"]
