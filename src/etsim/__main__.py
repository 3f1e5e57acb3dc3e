"""``python -m etsim``: the command line."""

from etsim.cli import console

console()
