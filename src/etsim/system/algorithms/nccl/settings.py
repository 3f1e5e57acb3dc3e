"""NCCL's knobs, by NCCL's own names: the system YAML's ``nccl:`` block (``SystemConfig.nccl``).

``nccl: {algo: Ring, proto: Simple, min_channels: 8, max_channels: 16, nvls: false, collnet: true,
version: "2.18"}`` reproduces a run with ``NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=8
NCCL_MAX_NCHANNELS=16 NCCL_NVLS_ENABLE=0 NCCL_COLLNET_ENABLE=1`` on NCCL 2.18. The channel knobs bound rings and
trees; ``min_ctas``/``max_ctas`` (``NCCL_MIN_CTAS``/``NCCL_MAX_CTAS``, NCCL 2.17+) bound NVLS as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from etsim.errors import ConfigError
from etsim.options import Boolean, Integer, Optional, Parser, option

__all__ = ["ALGORITHMS", "PROTOCOLS", "NameSet", "NcclSettings", "Version", "forced"]

#: NCCL's algorithms (``NCCL_ALGO`` values), in the order its tuner scans them.
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
#: The newest NCCL whose behaviour is modelled (its source: ``docs/nccl.md``).
NEWEST = (2, 29)
#: NCCL's protocols (``NCCL_PROTO`` values), in the order its tuner scans them.
PROTOCOLS = ("LL", "LL128", "Simple")


class NameSet(Parser):
    """An ``NCCL_ALGO``/``NCCL_PROTO`` list: ``Ring``, ``ring,tree``, ``^LL128`` (all but), or a YAML list.

    NCCL's names, case-insensitive; ``CollNet`` means both CollNet algorithms. The value is the frozenset of
    allowed names.
    """

    metavar = "NAME,…"

    def __init__(self, names: tuple[str, ...], what: str) -> None:
        self.names = names
        self.what = what

    def __call__(self, value: Any, *, key: str) -> frozenset[str]:
        """The allowed names."""
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{key}: expected {self.what} names ({', '.join(self.names)}), got {value!r}")
        text = value.strip()
        negate = text.startswith("^")
        by_lower = {n.lower(): n for n in self.names}
        chosen: set[str] = set()
        for item in filter(None, (part.strip().lower() for part in text.lstrip("^").split(","))):
            if item == "collnet" and "CollNetDirect" in self.names:
                chosen |= {"CollNetDirect", "CollNetChain"}
            elif item in by_lower:
                chosen.add(by_lower[item])
            else:
                raise ConfigError(f"{key}: unknown {self.what} {item!r}; NCCL's are {', '.join(self.names)}")
        return frozenset(set(self.names) - chosen if negate else chosen)

    def show(self, value: Any) -> str:
        """``Ring,Tree``."""
        return ",".join(n for n in self.names if n in value)


class Version(Parser):
    """An NCCL version, ``2.18`` or ``2.18.3``: its ``(major, minor)``."""

    metavar = "X.Y"

    def __call__(self, value: Any, *, key: str) -> tuple[int, int]:
        """``(2, 18)``."""
        match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?(?:-\d+)?\s*", str(value))
        if match is None or isinstance(value, bool):
            raise ConfigError(f"{key}: expected an NCCL version such as 2.18 or 2.27.7, got {value!r}")
        version = (int(match.group(1)), int(match.group(2)))
        if version < (2, 8) and isinstance(value, float):  # (YAML reads 2.10 as the number 2.1)
            raise ConfigError(
                f"{key}: {value!r} is a number, not a version (YAML reads 2.10 as 2.1): quote it, e.g. '{value}0'"
            )
        if version < (2, 8):
            raise ConfigError(f"{key}: NCCL {version[0]}.{version[1]} is older than the oldest modelled (2.8)")
        if version > NEWEST:
            raise ConfigError(
                f"{key}: NCCL {version[0]}.{version[1]} is newer than the newest modelled ({NEWEST[0]}.{NEWEST[1]}; "
                "give that to run its model)"
            )
        return version

    def show(self, value: Any) -> str:
        """``2.27``."""
        return f"{value[0]}.{value[1]}"


@dataclass(frozen=True, kw_only=True)
class NcclSettings:
    """How the ``nccl`` algorithm runs collectives: NCCL's environment, version and launch (see the module)."""

    version: tuple[int, int] = option(
        (2, 27), "the NCCL version whose tuning model and latencies to use (2.8 and later)", Version()
    )
    algo: frozenset[str] | None = option(
        None, "NCCL_ALGO: the algorithms NCCL may choose (None: every one the hardware has)",
        Optional(NameSet(ALGORITHMS, "algorithm")),
    )  # fmt: skip
    proto: frozenset[str] | None = option(
        None, "NCCL_PROTO: the protocols NCCL may choose (None: every one)", Optional(NameSet(PROTOCOLS, "protocol"))
    )
    min_channels: int | None = option(None, "NCCL_MIN_NCHANNELS: rings' and trees' channels", Optional(Integer(1, 64)))
    max_channels: int | None = option(None, "NCCL_MAX_NCHANNELS: rings' and trees' channels", Optional(Integer(1, 64)))
    min_ctas: int | None = option(
        None, "NCCL_MIN_CTAS (2.17+): every algorithm's channels, NVLS's too", Optional(Integer(1, 64))
    )
    max_ctas: int | None = option(
        None, "NCCL_MAX_CTAS (2.17+): every algorithm's channels, NVLS's too", Optional(Integer(1, 64))
    )
    nvls: bool = option(True, "NCCL_NVLS_ENABLE: NVLink SHARP where the NVSwitch has it", Boolean())
    collnet: bool = option(
        False, "NCCL_COLLNET_ENABLE: in-network reduction where the fabric has it (SHARP)", Boolean()
    )
    p2p: bool = option(
        True, "workload send/receive as NCCL's ncclSend/ncclRecv (their launch and peer-copy costs)", Boolean()
    )
    gpus_per_process: int = option(
        1, "GPUs one launching thread drives (nccl-tests -g N): their launches are serialised on the host", Integer(1)
    )

    def __post_init__(self) -> None:
        if (self.min_ctas or self.max_ctas) and self.version < (2, 17):
            raise ConfigError(f"min_ctas/max_ctas are NCCL 2.17's; NCCL {self.version[0]}.{self.version[1]} "
                              "has only min_channels/max_channels")  # fmt: skip
        for low, high in (("min_channels", "max_channels"), ("min_ctas", "max_ctas")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError(f"{low} {lo} is more than {high} {hi}")


def forced(spec: str, settings: NcclSettings) -> NcclSettings:
    """*settings* with the choice a ``nccl:ALGO[/PROTO[/CHANNELS]]`` spec forces.

    ``nccl:Ring/LL128/8`` is ``NCCL_ALGO=Ring NCCL_PROTO=LL128 NCCL_MIN_CTAS=NCCL_MAX_CTAS=8`` (the CTA bounds,
    because NVLS takes its channels from them alone; before 2.17, ``NCCL_MIN/MAX_NCHANNELS``): the label a result
    gives a call of the ``nccl`` algorithm is the spec that reproduces it (``nccl:discarded``, a call of no bytes NCCL
    returns from at once, forces nothing). As in NCCL, a call too small for its channels still runs on fewer.

    Raises:
        ConfigError: a part that is not an NCCL algorithm, protocol or channel count (named).
    """
    from dataclasses import replace

    if spec.partition(":")[2] == "discarded":  # (a call of no bytes: NCCL discards it whatever it is set to)
        return settings
    parts = spec.partition(":")[2].split("/")
    if not parts[0] or len(parts) > 3:
        raise ConfigError(f"{spec!r}: expected nccl:ALGO[/PROTO[/CHANNELS]], e.g. nccl:Ring/LL128/8")
    changes: dict[str, Any] = {"algo": NameSet(ALGORITHMS, "algorithm")(parts[0], key=spec)}
    if len(parts) > 1:
        changes["proto"] = NameSet(PROTOCOLS, "protocol")(parts[1], key=spec)
    if len(parts) > 2:
        channels = Integer(1, 64)(int(parts[2]) if parts[2].isdigit() else parts[2], key=spec)
        if settings.version < (2, 17):  # no NVLS, nor CTA knobs, before 2.17: the channel knobs say it all
            changes.update(min_channels=channels, max_channels=channels)
        else:
            changes.update(min_ctas=channels, max_ctas=channels)
    return replace(settings, **changes)
