"""The one exception hierarchy of etsim.

Every error etsim reports to a user is an :class:`EtsimError`; the command line prints its
message and exits non-zero, never a traceback. Messages name the file, rank, node or key and
say what is wrong. What is legal but may mislead is an :class:`EtsimWarning`.
"""

from __future__ import annotations

import warnings

__all__ = [
    "ConfigError",
    "DeadlockError",
    "EtsimError",
    "EtsimWarning",
    "FastPathConflict",
    "FoldConflict",
    "Interrupted",
    "RegistryError",
    "SimulationError",
    "TopologyError",
    "TraceError",
    "ValidationError",
    "warn",
]


class EtsimError(Exception):
    """Base class of every error etsim raises on purpose."""


class TraceError(EtsimError):
    """A Chakra ET file or family cannot be read, written or resolved."""


class ValidationError(TraceError):
    """A trace is readable but violates the rules a simulator relies on."""


class ConfigError(EtsimError):
    """A configuration file, option or value is invalid."""


class TopologyError(ConfigError):
    """A topology description is invalid."""


class RegistryError(ConfigError):
    """A plug-in name cannot be resolved."""


class SimulationError(EtsimError):
    """A simulation was set up inconsistently or failed while running."""


class DeadlockError(SimulationError):
    """A simulation cannot progress; the message names the stuck ranks and nodes."""


class FoldConflict(SimulationError):
    """A run with mirrored replicas met something the mirrors cannot reproduce exactly.

    Internal: :func:`etsim.simulation.simulate` catches it and runs every rank instead, so a user never sees it.
    """


class FastPathConflict(SimulationError):
    """The fast path evaluated a collective ahead and cannot prove the event path would agree.

    For example other traffic reached its links, or a phase would end before its last member started.

    Internal: :func:`etsim.simulation.simulate` catches it and runs again with that collective on the event
    path, so a user never sees it.

    Attributes:
        namespace: the collective instance, stream and phase to run on the event path next time (None:
            every collective).
        signature: the structure of its algorithm graph, when known: parts with the same graph are
            likely to conflict the same way, so they take the event path too.
    """

    def __init__(self, message: str, namespace: object, signature: int | None = None) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.signature = signature


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT or SIGTERM) after putting what it finished in order.

    A KeyboardInterrupt, so code that handles Ctrl-C handles it; :attr:`signum` tells the command line
    which exit status to give (128 + the signal's number, as a shell does).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class EtsimWarning(UserWarning):
    """Something that may make a result misleading, though it is not wrong: said once, never silent.

    The command line prints each as one ``etsim: warning: …`` line; a result also lists them
    (``Result.warnings``). Library users see them through the :mod:`warnings` machinery.
    """


def warn(message: str) -> None:
    """Issue *message* as an :class:`EtsimWarning` (attributed to the caller's caller)."""
    warnings.warn(message, EtsimWarning, stacklevel=3)
