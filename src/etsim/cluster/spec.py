"""A cluster file: one topology, several jobs placed on its GPUs, stragglers and faults (``docs/cluster.md``).

The file's keys are declared as options (:class:`ClusterFile`, :class:`JobEntry`, :class:`StragglerEntry`,
:class:`FaultEntry`); values shared with experiment files (a workload path or ``{generate: …}``, a topology file
or inline mapping, a system mapping or path, a model and its options) are resolved as experiments resolve them,
against the cluster file's directory. Everything is checked before anything runs; errors name the file and key
(``c.yaml: jobs[1].placement: GPU 3 is job 'a''s too``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etsim.cluster.reliability import Reliability
from etsim.errors import ConfigError
from etsim.files import read_yaml_mapping
from etsim.options import (
    Boolean,
    Integer,
    ListOf,
    Name,
    Nested,
    Number,
    Optional,
    Parser,
    Time,
    keys_named,
    option,
    parse_options,
)
from etsim.simulation.inputs import Values

__all__ = [
    "ClusterFile",
    "ClusterSpec",
    "FaultEntry",
    "JobEntry",
    "Placement",
    "StragglerEntry",
    "cluster_spec",
    "load_cluster",
]


class Placement(Parser):
    """``packed``, ``spread``, ``{random: SEED}`` or an explicit list of GPUs (job rank r on the r-th)."""

    def __call__(self, value: Any, *, key: str) -> str | tuple[str, int] | tuple[int, ...]:
        """``"packed"``, ``"spread"``, ``("random", seed)`` or a tuple of GPUs."""
        if value in ("packed", "spread"):
            return str(value)
        if isinstance(value, dict) and set(value) == {"random"}:
            return ("random", Integer(0)(value["random"], key=f"{key}.random"))
        if isinstance(value, list) and value:
            gpus = tuple(Integer(0)(v, key=f"{key}[{i}]") for i, v in enumerate(value))
            if len(set(gpus)) != len(gpus):
                twice = next(g for g in gpus if gpus.count(g) > 1)
                raise ConfigError(f"{key}: GPU {twice} is listed twice")
            return gpus
        raise ConfigError(f"{key}: expected packed, spread, {{random: SEED}} or a list of GPUs, got {value!r}")


class Fraction(Parser):
    """A share of a link's bandwidth: ``50%`` or ``0.5``, from 0 (the link fails) to 1."""

    def __call__(self, value: Any, *, key: str) -> float:
        """The share as a number in [0, 1]."""
        number = value
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                number = float(value.strip()[:-1]) / 100
            except ValueError:
                number = None
        if isinstance(number, bool) or not isinstance(number, int | float) or not 0 <= number <= 1:
            raise ConfigError(f"{key}: expected a share of the bandwidth from 0% (failed) to 100%, got {value!r}")
        return float(number)


@dataclass(frozen=True, kw_only=True)
class JobEntry:
    """One job of a cluster file."""

    name: str = option(help="the job's name (letters, digits, '.', '_', '-')", parse=Name())
    workload: Any = option(help="a trace path, or {generate: KIND, …} as in experiments")
    placement: Any = option("packed", "packed | spread | {random: SEED} | [GPU, …]", Placement())
    start: float = option(0.0, "when the job starts (its arrival)", Time())
    system: Any = option(None, "the job's system settings: a mapping, or a system YAML path")


@dataclass(frozen=True, kw_only=True)
class StragglerEntry:
    """GPUs whose compute is slower (for a while, with ``from``/``until``)."""

    gpus: list[int] = option(help="the slow GPUs", parse=ListOf(Integer(0)))
    slowdown: float = option(1.0, "factor on each compute node's time (1.5 = 50% longer)", Number(1e-9))
    delay: float = option(0.0, "time added to each compute node (after the factor; the whole run)", Time())
    start: float = option(0.0, "from when (``from:`` in the file: compute nodes starting from then)", Time())
    until: float | None = option(None, "until when (default: the end)", Time())


#: A straggler entry's keys as the file writes them.
_STRAGGLER_KEYS = "gpus, slowdown, delay, from, until"


class _Stragglers(Nested):
    """:class:`StragglerEntry` mappings, whose ``start`` is written ``from:`` (a Python keyword)."""

    def __init__(self) -> None:
        super().__init__(StragglerEntry)

    def __call__(self, value: Any, *, key: str) -> StragglerEntry:
        """The entry, ``from`` read as ``start`` and named ``from`` in messages."""
        if not isinstance(value, dict):
            shape = "{gpus: [GPU, …], slowdown: F, delay: TIME, from: TIME, until: TIME}"
            raise ConfigError(f"{key}: expected {shape}, got {value!r}")
        if "start" in value:
            raise ConfigError(f"{key}: start: unknown key; valid keys: {_STRAGGLER_KEYS}")
        renamed = {("start" if k == "from" else k): v for k, v in value.items()}
        entry = StragglerEntry(
            **parse_options(
                StragglerEntry,
                renamed,
                key=lambda n: f"{key}.{'from' if n == 'start' else n}",
                unknown="{key}: unknown key; valid keys: " + _STRAGGLER_KEYS,
            )
        )
        twice = next((g for g in entry.gpus if entry.gpus.count(g) > 1), None)
        if twice is not None:  # (its factor applied twice: 4x for a slowdown of 2)
            raise ConfigError(f"{key}.gpus: GPU {twice} is listed twice")
        if entry.slowdown == 1.0 and not entry.delay:
            raise ConfigError(f"{key}: neither slowdown nor delay: the straggler changes nothing")
        return entry


@dataclass(frozen=True, kw_only=True)
class FaultEntry:
    """A link that degrades or fails, or a GPU that fails (its job stops)."""

    link: list[Any] | None = option(None, "[U, V]: the link's two ends (NPUs, or switches by name)")
    gpu: int | None = option(None, "a GPU that fails: its job stops there and then", Optional(Integer(0)))
    nic: int | None = option(
        None, "the NIC of this GPU: its links to the fabric (degraded or failed)", Optional(Integer(0))
    )
    at: float = option(0.0, "when (0: from the start; later ones need the flow model)", Time())
    bandwidth: float = option(0.0, "what is left of its bandwidth: 0% fails it, 100% restores it", Fraction())
    bidirectional: bool = option(True, "both directions", Boolean())


@dataclass(frozen=True, kw_only=True)
class ClusterFile:
    """The top-level keys of a cluster file."""

    name: str | None = option(None, "the cluster's name (default: the file's stem)", Name())
    topology: Any = option(help="a topology YAML path or an inline topology mapping")
    model: Any = option(None, "network model (default: the topology file's, else flow)")
    model_options: Any = option(None, "the model's options")
    system: Any = option(None, "system settings every job shares: a mapping, or a system YAML path")
    jobs: list[JobEntry] = option(help="the jobs", parse=ListOf(Nested(JobEntry)))
    stragglers: list[StragglerEntry] = option(help="slow GPUs", parse=ListOf(_Stragglers()), default_factory=list)
    faults: list[FaultEntry] = option(
        help="degraded or failed links", parse=ListOf(Nested(FaultEntry)), default_factory=list
    )
    reliability: Reliability | None = option(
        None, "failures, checkpoints and restarts over a long run (goodput)", Optional(Nested(Reliability))
    )


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster file, resolved: every path absolute, every value checked (see :func:`load_cluster`)."""

    name: str
    where: str
    topology: str | dict[str, Any]
    model: str
    model_options: dict[str, Any]
    system: dict[str, Any]
    jobs: list[JobEntry]
    job_systems: list[dict[str, Any]]
    job_workloads: list[str | dict[str, Any]]
    stragglers: list[StragglerEntry] = field(default_factory=list)
    faults: list[FaultEntry] = field(default_factory=list)
    reliability: Reliability | None = None


def load_cluster(source: str | os.PathLike[str]) -> ClusterSpec:
    """Read and check a cluster file (the jobs' workloads are resolved, not yet built).

    Raises:
        ConfigError: an unknown or missing key, a bad value, a missing file; the message names the file and key.
    """
    path = Path(source)
    data, _ = read_yaml_mapping(path, "cluster")
    return cluster_spec(data, where=str(path), base=path.resolve().parent, name=path.stem)


def cluster_spec(data: Mapping[str, Any], *, where: str, base: Path, name: str = "cluster") -> ClusterSpec:
    """Check a cluster file's mapping; *where* names it in messages, relative paths resolve against *base*.

    Raises:
        ConfigError: as :func:`load_cluster`.
    """
    escaped = where.replace("{", "{{").replace("}", "}}")
    # (no stragglers or faults may be written as an empty list, as a sweep over them would write it)
    data = {k: v for k, v in data.items() if not (k in ("stragglers", "faults") and v in ([], None))}
    top = ClusterFile(
        **parse_options(
            ClusterFile,
            data,
            key=keys_named(where),
            unknown=escaped + ": {name}: unknown key; valid keys: {valid}",
            missing=escaped + ": {name}: missing (a cluster file names its topology and its jobs)",
            sort_valid=False,
        )
    )
    values = Values(where, base)
    topology, file_model = values.topology(top.topology, ["topology"])
    if topology is None:
        raise values.error(["topology"], "missing: a cluster file names its topology")
    model = values.model(top.model, file_model, ["model"])
    names = [job.name for job in top.jobs]
    for i, job_name in enumerate(names):
        if job_name in names[:i]:
            raise values.error([f"jobs[{i}].name"], f"{job_name!r} names two jobs")
    if top.reliability is not None and not top.reliability.checkpoint_every > 0:
        raise values.error(["reliability.checkpoint_every"], "expected a time longer than 0")
    for part in ("gpu", "node", "link"):  # (said at run time, without the file's name)
        mtbf = getattr(top.reliability, f"{part}_mtbf", None)
        if mtbf is not None and not mtbf > 0:
            raise values.error([f"reliability.{part}_mtbf"], "a mean time between failures must be longer than 0")
    for i, fault in enumerate(top.faults):
        if [fault.link is not None, fault.gpu is not None, fault.nic is not None].count(True) != 1:
            raise values.error([f"faults[{i}]"], "give a link: [U, V], a nic: G or a gpu: G (one of them)")
        if fault.gpu is not None and fault.at <= 0:
            raise values.error([f"faults[{i}].at"], "a GPU that fails at 0 runs nothing: give a later time")
        if fault.gpu is not None and (fault.bandwidth != 0 or not fault.bidirectional):  # (accepted, then ignored)
            key = "bandwidth" if fault.bandwidth != 0 else "bidirectional"
            raise values.error([f"faults[{i}].{key}"], "a GPU fault stops the GPU: it has no bandwidth or direction")
        if fault.gpu is None and fault.at > 0 and not _changes_links(model):
            raise values.error(
                [f"faults[{i}].at"],
                f"network model {model!r} does not model links changing during a run: use model flow (or at: 0)",
            )
    for i, straggler in enumerate(top.stragglers):
        if straggler.until is not None and not straggler.start < straggler.until:
            raise values.error([f"stragglers[{i}].until"], "until must come after start")
        if straggler.delay and (straggler.start or straggler.until is not None):
            raise values.error(
                [f"stragglers[{i}].delay"], "a delay holds for the whole run: give it without from/until"
            )
    return ClusterSpec(
        name=top.name or name,
        where=where,
        topology=topology,
        model=model,
        model_options=values.model_options(top.model_options, model, ["model_options"]),
        system=values.system(top.system, ["system"]),
        jobs=list(top.jobs),
        job_systems=[values.system(job.system, [f"jobs[{i}].system"]) for i, job in enumerate(top.jobs)],
        job_workloads=[values.workload(job.workload, [f"jobs[{i}].workload"]) for i, job in enumerate(top.jobs)],
        stragglers=list(top.stragglers),
        faults=list(top.faults),
        reliability=top.reliability,
    )


def _changes_links(model: str) -> bool:
    """Whether network model *model* takes links changing during a run (``change_links``)."""
    from etsim.network.model import NETWORK_MODELS, NetworkModel

    return NETWORK_MODELS.get(model).change_links is not NetworkModel.change_links
