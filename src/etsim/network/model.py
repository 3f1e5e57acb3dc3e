"""The :class:`NetworkModel` plug-in point, its option schema and the model registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import simpy

from etsim.errors import ConfigError, EtsimError, SimulationError
from etsim.network.routing import Router, make_router
from etsim.network.scheduling import LATE, CountingEnvironment, SharedDeliveries, schedule_at, succeed_at
from etsim.network.topology import Topology
from etsim.options import Integer, Text, option, option_help, parse_options
from etsim.registry import Registry

if TYPE_CHECKING:
    from etsim.network.bulk import BulkTiming

__all__ = [
    "DEFAULT_MODEL",
    "LATE",
    "NETWORK_MODELS",
    "CountingEnvironment",
    "LinkStats",
    "NetworkModel",
    "SharedDeliveries",
    "build_model",
    "option",
    "schedule_at",
    "succeed_at",
]


@dataclass(frozen=True, slots=True)
class LinkStats:
    """Traffic carried by one directed link during a run.

    Attributes:
        link: link id (index into :attr:`Topology.links`).
        src: node the link leaves.
        dst: node the link enters.
        bandwidth: bytes per ns.
        latency: ns.
        bytes: bytes carried.
        busy: ns spent serialising.
        messages: messages carried (a packetised message counts once).
    """

    link: int
    src: int | str
    dst: int | str
    bandwidth: float
    latency: float
    bytes: float
    busy: float
    messages: int


class NetworkModel:
    """Base class of network models: given ``transfer(src, dst, size)``, deliver messages.

    Contract for subclasses and guarantees to callers:

    - Constructed as ``Model(env, topology, **options)`` with a :class:`simpy.Environment`, a
      :class:`~etsim.network.topology.Topology` and the model's options; unknown option keys raise
      :class:`~etsim.errors.ConfigError` listing the valid ones. Each model declares its options as a
      frozen dataclass ``Options`` (subclassing ``NetworkModel.Options``) whose fields are made with
      :func:`option` (default, help text, parser).
    - ``transfer(src, dst, size) -> simpy.Event`` never blocks the caller; it returns an event that
      succeeds (value ``None``) when the last byte has been delivered at NPU ``dst``. ``size`` is in
      bytes (``>= 0``), ``src`` and ``dst`` are live NPU ranks.
    - The sender's link is busy only while serialising the message (``size / bandwidth``); the link
      latency is added after the link is released, so back-to-back messages over one link of latency L
      and bandwidth B arrive at ``L + S/B`` and ``L + 2S/B``.
    - Zero-byte messages are legal and cost latency only; ``src == dst`` is legal and is delivered
      immediately (0 ns).
    - Deterministic: the same topology, options (including ``seed``) and call sequence give the same
      delivery times.
    - Optional hooks: :meth:`setup` (called once before the run), :meth:`link_stats` (per directed
      link: bytes carried, busy time, messages) for reporting, :meth:`bulk_timing` (exact delivery
      times of many messages at once, for the fast path), :meth:`change_links` (links that degrade, fail
      or recover during a run) and :meth:`stop_npu` (an NPU that failed sends no more).
    - Routes come from :attr:`router` (option ``router``), cached per ``(src, dst)``; :meth:`route`
      returns them as link ids. The simulation may hand the model its router instead (keyword ``routing``, which
      a subclass passes on to this constructor with its options): replica folding routes over the links of the
      simulated ranks that way.

    Args:
        env: the SimPy environment messages are scheduled in.
        topology: the network.
        routing: the router to use instead of the one option ``router`` names (None: that one).
        **options: values for the fields of the model's ``Options``.
    """

    #: Registry name of the model (informational; the registry key is what selects it).
    name: ClassVar[str] = ""
    #: What the model models, in a few words (``--model`` help, ``etsim`` listings).
    summary: ClassVar[str] = ""
    #: Whether concurrent messages share link bandwidth. A model that says False gets a warning after
    #: any run in which a link carried more bytes than it could in the run's time.
    congestion_aware: ClassVar[bool] = True

    @dataclass(frozen=True, kw_only=True)
    class Options:
        """Options every model accepts."""

        router: str = option(
            "default", "routing: 'default' (dimension order), 'shortest' or 'package.module:Class'", Text()
        )
        seed: int = option(0, "seed for models with random choices (the built-in ones are deterministic)", Integer())

    def __init__(
        self, env: simpy.Environment, topology: Topology, *, routing: Router | None = None, **options: Any
    ) -> None:
        self.env = env
        self.topology = topology
        self.options = self.checked_options(options)
        self.router: Router = routing if routing is not None else make_router(self.options.router, topology)

    @classmethod
    def option_help(cls) -> dict[str, str]:
        """Option name → help text, for documentation and ``--help``."""
        return option_help(cls.Options)

    @classmethod
    def parse_options(cls, options: Mapping[str, Any], *, key: str = "network") -> Any:
        """Validate *options* (configuration values) into an instance of ``cls.Options``.

        Args:
            options: option name → value as written in a configuration file.
            key: prefix for error messages (``network.packet_size: …``).

        Raises:
            ConfigError: an unknown option (the message lists the valid ones) or a bad value.
        """
        values = parse_options(
            cls.Options,
            options,
            key=lambda name: f"{key}.{name}",
            unknown=f"{{key}}: unknown option of network model {cls.__name__}; valid: {{valid}}",
        )
        return cls.Options(**values)

    @classmethod
    def checked_options(cls, options: Mapping[str, Any], *, key: str = "network") -> Any:
        """:meth:`parse_options`, with an exception of the model's own code made a :class:`ConfigError` naming it.

        A plug-in's option parser (or its ``Options.__post_init__``, or an overriding :meth:`parse_options`) should
        raise :class:`~etsim.errors.ConfigError`; one that raises ``ValueError`` or anything else is reported the
        same way, as one line naming the model and its options, never as a traceback.
        """
        try:
            return cls.parse_options(options, key=key)
        except EtsimError:
            raise
        except Exception as exc:
            given = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "none"
            raise ConfigError(
                f"{key}: network model {cls.__name__} refused its options ({given}): {type(exc).__name__}: {exc}"
            ) from None

    def route(self, src: int, dst: int) -> list[int]:
        """Link ids from *src* to *dst* (cached)."""
        return self.router.lookup(src, dst)

    def transfer(self, src: int, dst: int, size: float) -> simpy.Event:
        """Send *size* bytes from NPU *src* to NPU *dst*; return an event that succeeds on delivery."""
        raise NotImplementedError

    def transfer_after(self, src: int, dst: int, size: float, after: float) -> simpy.Event:
        """Start :meth:`transfer` *after* ns from now (e.g. an endpoint delay); return its delivery event.

        The default waits with a timeout and then transfers; models whose delivery time does not
        depend on when a message starts (no link state) may add *after* to the delay instead.
        """
        done = self.env.event()

        def delivered(_event: simpy.Event) -> None:
            done.succeed()

        def start(_event: simpy.Event) -> None:
            self.transfer(src, dst, size).callbacks.append(delivered)

        self.env.timeout(after).callbacks.append(start)
        return done

    def transfer_then(self, src: int, dst: int, size: float, then: float) -> simpy.Event:
        """:meth:`transfer` now; the returned event fires *then* ns after the message arrives (receiver processing)."""
        done = self.env.event()

        def processed(_event: simpy.Event) -> None:
            done.succeed()

        def arrived(_event: simpy.Event) -> None:
            self.env.timeout(then).callbacks.append(processed)

        self.transfer(src, dst, size).callbacks.append(arrived)
        return done

    def offers_bulk_timing(self) -> bool:
        """Whether :meth:`bulk_timing` may return a timing (without making one)."""
        return type(self).bulk_timing is not NetworkModel.bulk_timing

    def bulk_timing(self) -> BulkTiming | None:
        """Message timing in bulk for the fast path, or None (the default: every message takes the event path).

        A model that offers one (:class:`~etsim.network.bulk.BulkTiming`) must make it return exactly the
        delivery times :meth:`transfer` would give; see ``network/bulk.py`` for the contract.
        """
        return None

    def setup(self) -> None:
        """Hook called once after construction and before the simulation runs (default: nothing)."""

    def change_links(self, bandwidths: Mapping[int, float], router: Router) -> None:
        """From now on, link id → its new bandwidth (0: the link failed), routes from *router* (optional hook).

        A model that implements it re-shares, or re-routes, the messages in flight at once; a message with no route
        left raises :class:`~etsim.errors.SimulationError` naming it. The default model takes no change:
        :func:`~etsim.network.faults.schedule_link_changes` refuses a run that asks for one.
        """
        raise NotImplementedError(f"{type(self).__name__} does not model links changing during a run")

    def stop_npu(self, npu: int) -> None:
        """NPU *npu* failed now: the bytes of the messages it sends not yet on the wire are not sent (optional hook).

        Their deliveries never happen. The default keeps them: a model that reserves its links ahead (``link``) or
        ignores contention (``analytical``) has no bandwidth to give back.
        """

    def link_stats(self) -> list[LinkStats]:
        """Per directed link traffic so far (default: none recorded)."""
        return []

    def _bad_size(self, size: object) -> SimulationError:
        return SimulationError(f"transfer size must be a number of bytes >= 0, got {size!r}")


#: The network model of a run that names none (``--model``, a topology file's ``network: {model: …}``): flows
#: sharing links max-min fairly, cut-through, so that no result is faster than the links can carry and no
#: multi-hop route pays its bandwidth term once per hop (``link``, ``analytical``: explicit choices; see
#: docs/network-models.md).
DEFAULT_MODEL = "flow"

#: The network-model registry: built-ins, the ``etsim.network_models`` entry points, ``module:Class``.
NETWORK_MODELS: Registry[NetworkModel] = Registry(
    "network model", "etsim.network_models", NetworkModel, builtins="etsim.network.models"
)


def build_model(
    env: simpy.Environment,
    topology: Topology,
    name: str = DEFAULT_MODEL,
    options: Mapping[str, Any] | None = None,
    *,
    routing: Router | None = None,
) -> NetworkModel:
    """Resolve the model *name* in :data:`NETWORK_MODELS`, construct it and call its :meth:`~NetworkModel.setup`.

    Args:
        env: the SimPy environment.
        topology: the network.
        name: a registered name (``link``, ``analytical``, ``ideal``, an entry point) or ``module:Class``.
        options: the model's options as written in configuration (unit strings allowed).
        routing: a router the model uses instead of the one its options name (replica folding's), or None.

    Raises:
        RegistryError: unknown name (the message lists the available ones).
        ConfigError: unknown or invalid option.
    """
    cls = NETWORK_MODELS.get(name)
    extra = {} if routing is None else {"routing": routing}
    model = cls(env, topology, **dict(options or {}), **extra)
    model.setup()
    return model
