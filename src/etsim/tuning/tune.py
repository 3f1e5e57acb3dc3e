"""``etsim tune`` as a library: measure candidates per point, pick the fastest, write and check the table.

Typical use::

    from etsim.tuning import TuneRequest, tune

    out = tune(TuneRequest(topology="topologies/ring8.yaml", collectives=["all_reduce"],
                           sizes=parse_sizes("1KiB..1GiB"), candidates=["ring", "tree", "hd"]), jobs=1)
    print(out.table_text)
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveName, CollectiveType, NodeType
from etsim.chakra.io import load_workload
from etsim.errors import ConfigError, EtsimError
from etsim.network import NETWORK_MODELS, NetworkConfig, load_network
from etsim.network.hardware import GpuCluster
from etsim.options import Integer, ListOf, Optional, Parser, Text, option
from etsim.system.algorithms import AlgorithmContext, resolve_algorithm
from etsim.system.collective import System
from etsim.system.config import SystemConfig
from etsim.system.groups import CommGroups, groups_from_metadata, load_comm_groups
from etsim.system.rules import SelectionRule
from etsim.tuning.points import Point, WorkloadPoint
from etsim.tuning.runner import Measurement, Setup, run_points
from etsim.tuning.table import TunedPoint, table_rules, table_yaml, winners
from etsim.units import format_size, parse_size

__all__ = [
    "Call",
    "TuneRequest",
    "TuneResult",
    "expand_candidates",
    "parse_sizes",
    "tune",
    "workload_calls",
]

_RANGE = re.compile(r"(.+?)\.\.(.+)")
#: The most sizes one --sizes value may expand to.
MAX_SIZES = 64


def parse_sizes(text: str, key: str = "--sizes") -> list[int]:
    """``4KiB,1MiB,64MiB`` or ``1KiB..1GiB`` (every power of two from the first to the last) → sorted bytes.

    Raises:
        ConfigError: a bad size, a range whose ends are not powers of two or run backwards, or no size.
    """
    sizes: set[int] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        m = _RANGE.fullmatch(item)
        if m is None:
            size = parse_size(item, key=key, default_unit="B")
            if size < 1:
                raise ConfigError(f"{key}: {item!r}: a collective moves at least 1 byte")
            sizes.add(size)
            continue
        low, high = (parse_size(v.strip(), key=key, default_unit="B") for v in m.groups())
        for end in (low, high):
            if end < 1 or end & (end - 1):
                raise ConfigError(f"{key}: {item!r}: a range runs over powers of two, and {end} is not one")
        if low > high:
            raise ConfigError(f"{key}: {item!r} runs backwards")
        s = low
        while s <= high:
            sizes.add(s)
            s *= 2
    if not sizes:
        raise ConfigError(f"{key}: no size given")
    if len(sizes) > MAX_SIZES:
        raise ConfigError(f"{key}: {len(sizes)} sizes; at most {MAX_SIZES}")
    return sorted(sizes)


_RANK_FILE = re.compile(r"(.*)\.\d+\.et(\.gz)?$")


def expand_candidates(text: str) -> list[str]:
    """A comma-separated candidate list with globs expanded (``algorithms/*.et`` → one entry per family).

    Raises:
        ConfigError: a glob that matches nothing, or no candidate.
    """
    items: list[str] = []
    for part in filter(None, (part.strip() for part in text.split(","))):
        if items and "=" in part and ":" not in part and ":" in items[-1] and "=" in items[-1]:
            items[-1] += "," + part  # (a parameter of the spec before: tacos:chunks_per_npu=2,seed=3)
        else:
            items.append(part)
    out: list[str] = []
    for item in items:
        if not any(ch in item for ch in "*?["):
            out.append(item)
            continue
        matches = glob.glob(item)
        if item.endswith(".et"):  # `algorithms/*_8npus.et` names families, whose files are P.0.et …
            matches += glob.glob(item[: -len(".et")] + ".[0-9]*.et")
        matches = sorted(set(matches))
        if not matches:
            raise ConfigError(f"--candidates: {item!r} matches no file")
        for path in matches:
            m = _RANK_FILE.fullmatch(path)
            out.append(f"{m.group(1)}.et" if m else path)
    unique = list(dict.fromkeys(out))
    if not unique:
        raise ConfigError("--candidates: no candidate given")
    return unique


@dataclass(frozen=True)
class Call:
    """A distinct (collective, size, group) a workload makes; ``group`` is the first group of its shape."""

    collective: str
    size: int
    group_size: int
    dimension: int | None
    group: tuple[int, ...]


def _dimension_of(system: System, group: tuple[int, ...], multi: bool) -> int | None:
    return system.group_dimension(group) if multi else None


def workload_calls(workload: str, net: NetworkConfig, config: SystemConfig) -> list[Call]:
    """The distinct calls *workload* makes, one per (collective, size, group size, dimension).

    Raises:
        ConfigError: the workload cannot be read, or a group is undefined (named).
    """
    wl = load_workload(workload)
    n = wl.num_ranks
    groups = CommGroups(n)
    if config.comm_groups:
        for name, members in load_comm_groups(config.resolve_path(config.comm_groups), n).groups.items():
            groups.add(name, members)
    groups_from_metadata(wl, groups)
    system = System(SystemConfig(), groups, topology=net.topology)
    multi = len(net.topology.dims) > 1
    found: dict[tuple[str, int, int, int | None], Call] = {}
    for trace in wl:
        for pos, node_type in enumerate(trace.types):
            if node_type != NodeType.COMM_COLL_NODE or trace.is_cpu_op[pos] or trace.comm_type[pos] is None:
                continue
            collective = COLLECTIVE_NAMES[CollectiveType(trace.comm_type[pos])]  # type: ignore[arg-type]
            group = groups.resolve(trace.pg_name[pos])
            if len(group) == 1:
                continue
            size = trace.comm_size[pos] or 0
            dim = _dimension_of(system, group, multi)
            key = (collective, size, len(group), dim)
            if key not in found:
                found[key] = Call(collective, size, len(group), dim, group)
    # (a group spanning no single dimension has none: after the others of its shape)
    return sorted(found.values(), key=lambda c: (c.collective, c.size, c.group_size, c.dimension is None,
                                                 c.dimension or 0, c.group))  # fmt: skip


class SizeList(Parser):
    """Collective sizes: a list, or text ``4KiB,1MiB`` / ``1KiB..1GiB`` (:func:`parse_sizes`)."""

    metavar = "SIZES"

    def __call__(self, value: Any, *, key: str) -> list[int]:
        """Sorted bytes."""
        if isinstance(value, str):
            return parse_sizes(value, key)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected sizes such as '1KiB..1GiB', got {value!r}")
        return parse_sizes(",".join(str(v) for v in value), key)

    def show(self, value: Any) -> str:
        """As written."""
        return str(value)


class Candidates(Parser):
    """``--algo`` values, comma-separated, globs expanded (:func:`expand_candidates`)."""

    metavar = "ALGOS"

    def __call__(self, value: Any, *, key: str) -> list[str]:
        """The candidates."""
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected comma-separated algorithms, got {value!r}")
        return expand_candidates(value)

    def show(self, value: Any) -> str:
        """As written."""
        return ",".join(value) if isinstance(value, list | tuple) else str(value)


@dataclass(kw_only=True)
class TuneRequest:
    """What to tune: the ``etsim tune`` options (each declared once; the command line's flags come from here)."""

    topology: str = option(help="topology YAML", parse=Text(empty=False), metavar="FILE")
    candidates: Sequence[str] = option(
        ("ring", "direct", "tree", "hd"),
        "comma-separated --algo values: native names, ET families and MSCCL-IR files (globs allowed: "
        "'algorithms/*.et', 'path/*.xml'), tacos[:k=v,…]",
        Candidates(),
    )
    collectives: Sequence[str] = option(
        ("all_reduce",),
        "collective to tune (comma-separated)",
        ListOf(CollectiveName(), what="collectives"),
        flag="--collective",
        metavar="C",
    )
    sizes: Sequence[int] = option(
        help="sizes: a list '4KiB,1MiB,64MiB' or a power-of-two range '1KiB..1GiB' (default 1KiB..1GiB)",
        parse=SizeList(),
        default_factory=lambda: parse_sizes("1KiB..1GiB"),
    )
    group_sizes: Sequence[int] = option(
        (), "group sizes: the first N NPUs (default: all of them)", ListOf(Integer(1), what="integers"), metavar="N,…"
    )
    """Empty: every live NPU of the topology."""
    model: str | None = option(
        None, "network model (default: the topology file's, else flow)", Optional(Text(empty=False)), metavar="MODEL"
    )
    system: SystemConfig = field(default_factory=SystemConfig)
    settings: dict[str, Any] = field(default_factory=dict)
    """Other keys of the base system YAML, copied into the table."""
    workload: str | None = option(
        None,
        "tune the (collective, size, group) calls this workload makes, then report its time with the table and with "
        "each candidate alone",
        Optional(Text(empty=False)),
        metavar="WORKLOAD",
    )
    fallback: str | None = option(
        "auto",
        "the table's {default: ALGO} rule, or 'none'; auto: nccl on a gpu_cluster that names its GPUs, else ring",
        Optional(Text(), none="none"),
    )
    output: str = option("table.yaml", "the selection table (system YAML) to write", Text(empty=False), flag=False)

    def __post_init__(self) -> None:
        self.group_sizes = sorted(set(self.group_sizes))


@dataclass
class TuneResult:
    """Everything a tuning run produced."""

    measurements: list[Measurement]
    tuned: list[TunedPoint]
    rules: list[SelectionRule]
    table_text: str
    notes: list[str]
    comparison: list[Measurement] = field(default_factory=list)
    """Workload mode: the whole workload under the tuned table, then under each candidate alone."""


def _points(request: TuneRequest, net: NetworkConfig) -> list[Point]:
    topo = net.topology
    multi = len(topo.dims) > 1
    live = topo.live_npus
    if request.workload:
        calls = workload_calls(request.workload, net, request.system)
        if not calls:
            raise ConfigError(f"workload {request.workload}: it makes no collective call over more than one rank")
        return [Point(c.collective, c.size, c.group, cand, c.dimension) for c in calls for cand in request.candidates]
    system = System(SystemConfig(), CommGroups(topo.npus), topology=topo)
    points = []
    for g in request.group_sizes or [len(live)]:
        if g < 2 or g > len(live):
            raise ConfigError(f"--group-sizes: {g} is not between 2 and the topology's {len(live)} NPUs")
        group = tuple(live[:g])
        dim = _dimension_of(system, group, multi)
        for collective in request.collectives:
            for size in request.sizes:
                for cand in request.candidates:
                    points.append(Point(collective, size, group, cand, dim))
    return points


def tune(request: TuneRequest, *, jobs: int | None = None) -> TuneResult:
    """Measure, choose, build the table (text), and in workload mode compare the whole workload.

    The table is written by the caller; in workload mode it is loaded back from *request.output*'s
    text (its relative paths resolve against that file's directory) before the comparison runs.

    Raises:
        ConfigError: a bad topology, collective, group size or workload (named); no point any candidate serves.
    """
    valid = set(COLLECTIVE_NAMES.values())
    for c in request.collectives:
        if c not in valid:
            raise ConfigError(f"--collective: unknown collective {c!r}; valid: {', '.join(sorted(valid))}")
    net = load_network(request.topology)
    if request.model is not None:
        # A model no run could load fails every point: say so once, before any work.
        try:
            NETWORK_MODELS.get(request.model)
        except EtsimError as exc:
            raise ConfigError(f"--model: {exc}") from None
    if request.fallback == "auto":  # the runs' own default: NCCL on a GPU cluster
        request = replace(request, fallback="nccl" if isinstance(net.topology.hardware, GpuCluster) else "ring")
    if request.fallback is not None:
        # The table's default rule must name an algorithm a later run can load: check it before any work.
        try:
            resolve_algorithm(request.fallback, AlgorithmContext(base_dir=os.getcwd()), origin="--fallback")
        except EtsimError as exc:
            raise ConfigError(str(exc)) from None
    setup = Setup(request.topology, request.model, request.system)
    points = _points(request, net)
    measurements = run_points(points, setup, jobs)
    notes = []
    for m in measurements:
        p = m.point
        assert isinstance(p, Point)
        if m.time_ns is None:
            notes.append(f"{p.candidate} on {p.collective} of {p.size} bytes over {p.group_size} ranks: {m.note}")
    tuned = winners(measurements, request.candidates)
    if not tuned:
        raise ConfigError("no candidate could serve any tuned point:\n" + "\n".join(dict.fromkeys(notes)))
    rules = table_rules(tuned, dimensions=len(net.topology.dims) > 1, fallback=request.fallback)
    sizes = sorted(request.sizes)
    mode = (
        f"workload {request.workload}"
        if request.workload
        else f"{len(sizes)} sizes from {format_size(sizes[0])} to {format_size(sizes[-1])}"
    )
    header = [
        f"etsim tune: topology {request.topology}, model {request.model or net.model}",
        f"candidates: {', '.join(request.candidates)}; {mode}",
        "first matching rule wins; each rule lists the tuned points it serves (size, simulated time)",
    ]
    out = Path(request.output)
    text = table_yaml(rules, tuned, out=out, header=header, settings=request.settings)
    return TuneResult(measurements, tuned, rules, text, list(dict.fromkeys(notes)))


def compare_workload(request: TuneRequest, table: SystemConfig, *, jobs: int | None = None) -> list[Measurement]:
    """The whole workload under *table*, then under each candidate as the only algorithm (its default).

    A candidate that does not implement a collective of the workload leaves it to that collective's default
    (ring, or direct for gather/scatter), and the run's warnings say so.
    """
    assert request.workload is not None
    setup = Setup(request.topology, request.model, request.system)
    points = [WorkloadPoint(request.workload, "tuned table", table)]
    for cand in request.candidates:
        config = replace(request.system, algorithms={"default": cand}, algorithm_origins={}, algorithm_rules=())
        points.append(WorkloadPoint(request.workload, cand, config))
    return run_points(points, setup, jobs)


def base_settings(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The keys of a base system YAML other than ``algorithms`` (copied into the table as written)."""
    if path is None:
        return {}
    import yaml

    from etsim.files import read_text

    data = yaml.safe_load(read_text(path, "system file")) or {}
    if not isinstance(data, dict):
        return {}
    settings = {k: v for k, v in data.items() if k != "algorithms"}
    groups = settings.get("comm_groups")
    if isinstance(groups, str) and not os.path.isabs(groups):  # (the table writes it relative to where it is)
        settings["comm_groups"] = os.path.abspath(os.path.join(os.path.dirname(os.fspath(path)), groups))
    return settings
