"""The workload-generator plug-in point: :class:`WorkloadGenerator` and its registry.

A generator turns a few parameters into one Chakra ET trace per rank. The built-ins are one module each in this
package (``collective``, ``sendrecv``, ``dp``, ``moe``, ``sequence``), which :data:`WORKLOAD_GENERATORS` imports on
its first lookup; others come from the ``etsim.workload_generators`` entry points or a ``package.module:Class``
path. Every generator works the same three ways: ``etsim workload gen NAME --flag …``, ``workload: {generate: NAME,
…}`` in an experiment (each parameter a sweep axis), and from Python (:func:`generate`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from etsim.chakra.attributes import make_attribute
from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveName, NodeType, Trace
from etsim.errors import ConfigError
from etsim.network.topology import MAX_NPUS
from etsim.options import Integer, Parser, keys_named, parse_options
from etsim.registry import Registry
from etsim.system.groups import GROUPS_ATTR

__all__ = [
    "WORKLOAD_GENERATORS",
    "CollectiveName",
    "GroupName",
    "Npus",
    "Rewrite",
    "WorkloadGenerator",
    "check_npus",
    "define_groups",
    "every_rank_group",
    "generate",
    "generated_collectives",
    "generator_of",
    "normalize",
    "parse",
]


#: The most nodes (over all ranks) a generated workload may have: its traces must fit in memory.
MAX_NODES = 50_000_000


def check_npus(npus: int) -> None:
    """Raise ValueError for fewer than one NPU (the functions' own check, for callers from Python)."""
    if npus < 1:
        raise ValueError(f"npus must be >= 1, got {npus}")


def every_rank_group(pg_name: str | None, npus: int) -> dict[str, list[int]] | None:
    """*pg_name* as the group of every rank, or None for the default group ("" or "0").

    What :meth:`WorkloadGenerator.comm_groups` returns for generators whose collectives every rank issues.
    """
    return None if not pg_name or pg_name == "0" else {pg_name: list(range(npus))}


def define_groups(traces: list[Trace], groups: dict[str, list[int]] | None) -> list[Trace]:
    """*traces* with *groups* defined in each one's metadata (:data:`~etsim.system.groups.GROUPS_ATTR`).

    Traces that name a group nothing defines stop every run of them: a generator that names one defines it.
    """
    if groups:
        for trace in traces:
            trace.metadata.attr.append(make_attribute(GROUPS_ATTR, json.dumps(groups)))
    return traces


class Npus(Integer):
    """An NPU count: at least *minimum*, at most what a topology may hold (more could be written, never run)."""

    def __init__(self, minimum: int = 1) -> None:
        super().__init__(minimum)

    def __call__(self, value: Any, *, key: str) -> int:
        """*value* if it is an NPU count etsim can simulate."""
        npus = super().__call__(value, key=key)
        if npus > MAX_NPUS:
            if key.startswith("--"):
                raise ConfigError(f"{key} {npus:,}: larger than etsim's limit of {MAX_NPUS:,} NPUs per topology")
            raise ConfigError(f"{key}: {npus:,} NPUs is more than etsim's limit of {MAX_NPUS:,} per topology")
        return npus


class GroupName(Parser):
    """A communicator group id (``pg_name``): a string, or an integer written as one."""

    def __call__(self, value: Any, *, key: str) -> str:
        """The id as a string."""
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise ConfigError(f"{key}: expected a communicator group id, got {value!r}")
        return str(value)


@dataclass(frozen=True)
class Rewrite:
    """A change of a generator's parameters that keeps the job's work and data dependencies (an optimiser move).

    Attributes:
        values: the parameters changed, with their new values.
        role: the part of the step it addresses, for ordering by where the time goes: ``pp`` (the pipeline),
            ``tp`` (tensor-parallel communication), ``dp`` (data-parallel communication), ``compute``, or
            ``memory`` (memory per GPU).
    """

    values: tuple[tuple[str, Any], ...]
    role: str


class WorkloadGenerator:
    """Base class of workload generators: parameters in, one trace per rank out.

    Contract for subclasses:

    - ``summary`` (class attribute): what it generates, in a few words (``etsim workload gen --help``).
    - Parameters are the fields of a frozen, ``kw_only`` dataclass ``Options`` declared with
      :func:`~etsim.options.option` (default, help, parser; a parameter without a default is required).
      Command-line flags (``--grad-size``), experiment keys (``grad_size``) and their messages come from it.
      Values must be plain data (numbers, strings, lists, mappings): experiments write them to ``config.yaml``
      and key caches on them.
    - :meth:`check` makes the checks that involve several parameters (naming them with *key*) and may fill in
      defaults that depend on others; it returns the options to use.
    - :meth:`generate` returns one :class:`~etsim.chakra.Trace` per rank, ranks ``0 .. npus-1``; it is a pure
      function of the options.
    - :meth:`collectives` names the collective types the traces use, in order of first use (the result columns
      of experiments); the default generates the traces and looks.
    - :meth:`nodes` estimates the nodes of all traces together (from above, roughly), so that a workload too
      large to hold is refused before it is built (:data:`MAX_NODES`); a generator whose ranks share columns may
      count a shared node as the fraction of a built one it costs; the default, 0, checks nothing.
    - :meth:`comm_groups` gives the communicator groups the traces' ``pg_name`` values stand for, which
      ``etsim workload gen`` writes beside the traces as ``PREFIX.comm_groups.json`` (the reference consumer's
      format) for consumers that read neither etsim's metadata nor ``process_group:init`` nodes; None: none.
    - ``training_job`` (class attribute) says that its workloads describe themselves as training jobs (the step
      report's metadata, ``producers/training/describe.py``), so experiments add the step report's columns.
    - :meth:`rewrites` declares the changes of its parameters that keep the job's work and data dependencies
      (``etsim optimise`` tries them); :meth:`memory_rewrites` those that lower its memory per GPU, in the order
      they are worth trying. Both default to none.
    """

    #: Registry name (informational; the registry key is what selects it).
    name: ClassVar[str] = ""
    #: What the generator writes, in a few words.
    summary: ClassVar[str] = ""
    #: Its workloads are training jobs with a step report.
    training_job: ClassVar[bool] = False

    @dataclass(frozen=True, kw_only=True)
    class Options:
        """No parameters."""

    def check(self, options: Any, key: Callable[[str], str]) -> Any:
        """*options* after the checks that involve several parameters (default: as they are)."""
        return options

    def generate(self, options: Any) -> list[Trace]:
        """One trace per rank."""
        raise NotImplementedError

    def nodes(self, options: Any) -> int:
        """About how many nodes the traces hold in all (0: unknown)."""
        return 0

    def comm_groups(self, options: Any) -> dict[str, list[int]] | None:
        """The ranks of each ``pg_name`` the traces use, or None (the traces name no groups, or define them)."""
        return None

    def rewrites(self, options: Any) -> list[Rewrite]:
        """Changes of the parameters that keep the job's work (the optimiser's moves); default: none."""
        return []

    def memory_rewrites(self, options: Any) -> list[Rewrite]:
        """Changes of the parameters that lower the job's memory per GPU, in the order to try them; default: none."""
        return []

    def collectives(self, options: Any) -> list[str]:
        """The collective types the traces use, in order of first use."""
        found: dict[str, None] = {}
        for trace in self.generate(options):
            for t, c, cpu in zip(trace.types, trace.comm_type, trace.is_cpu_op, strict=True):
                if t == NodeType.COMM_COLL_NODE and not cpu and c in COLLECTIVE_NAMES:
                    found[COLLECTIVE_NAMES[c]] = None
        return list(found)


#: Workload generators: the modules of this package, the ``etsim.workload_generators`` entry points, ``module:Class``.
WORKLOAD_GENERATORS: Registry[WorkloadGenerator] = Registry(
    "workload generator", "etsim.workload_generators", WorkloadGenerator, builtins="etsim.producers.workloads"
)


def parse(
    kind: str, values: Mapping[str, Any], *, key: Callable[[str], str] | None = None, text: bool = False
) -> tuple[WorkloadGenerator, Any]:
    """The generator *kind* and its options from *values* (as written; with *text*, command-line flags).

    Raises:
        RegistryError: no such generator.
        ConfigError: an unknown, missing or bad parameter, named by *key* (default: the bare name).
    """
    generator = WORKLOAD_GENERATORS.get(kind)()
    cls = type(generator).Options
    name = key or keys_named()
    parsed = parse_options(
        cls,
        values,
        key=name,
        unknown=f"{{key}}: not a parameter of generate: {kind}; valid: {{valid}}",
        missing=f"{{key}}: missing (generate: {kind} needs {{required}})",
        text=text,
        sort_valid=False,
    )
    options = generator.check(cls(**parsed), name)
    nodes = generator.nodes(options)
    if nodes > MAX_NODES:
        raise ConfigError(
            f"generate: {kind} with these parameters makes about {nodes:,} nodes, more than etsim's limit of "
            f"{MAX_NODES:,} per workload"
        )
    return generator, options


def normalize(spec: Mapping[str, Any], key: str = "workload") -> dict[str, Any]:
    """Validate a ``{generate: KIND, …}`` mapping; return it with every default filled in and sizes in bytes.

    Raises:
        ConfigError: unknown kind or parameter, a missing or invalid value; the message names the key.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{key}: expected a mapping like {{generate: collective, …}}, got {spec!r:.80}")
    kind = spec.get("generate")
    names = WORKLOAD_GENERATORS.names()
    if kind is None:
        raise ConfigError(f"{key}.generate: missing (the generator: one of {', '.join(names)})")
    if not isinstance(kind, str) or (kind not in names and ":" not in kind):
        raise ConfigError(f"{key}.generate: unknown generator {kind!r}; valid: {', '.join(names)}")
    values = {k: v for k, v in spec.items() if k != "generate"}
    _, options = parse(kind, values, key=keys_named(prefix=f"{key}."))
    return {"generate": kind, **dataclasses.asdict(options)}


def generate(spec: Mapping[str, Any]) -> list[Trace]:
    """The traces of a ``{generate: KIND, …}`` mapping, as experiment files write it (``size: 1 MiB`` or bytes).

    It is checked and completed by :func:`normalize` first (which leaves a normalized mapping as it is).

    Raises:
        ConfigError: unknown kind or parameter, a missing or invalid value (named).
    """
    spec = normalize(spec)
    generator = WORKLOAD_GENERATORS.get(spec["generate"])()
    options = type(generator).Options(**{k: v for k, v in spec.items() if k != "generate"})
    return generator.generate(options)


def generator_of(spec: Any) -> tuple[WorkloadGenerator, Any] | None:
    """The generator and options of a normalized ``{generate: KIND, …}`` mapping; None for anything else (a path)."""
    if not isinstance(spec, Mapping) or "generate" not in spec:
        return None
    generator = WORKLOAD_GENERATORS.get(spec["generate"])()
    return generator, type(generator).Options(**{k: v for k, v in spec.items() if k != "generate"})


def generated_collectives(spec: Mapping[str, Any]) -> list[str]:
    """The collective types a normalized generator mapping produces, in order of first use."""
    generator = WORKLOAD_GENERATORS.get(spec["generate"])()
    options = type(generator).Options(**{k: v for k, v in spec.items() if k != "generate"})
    return generator.collectives(options)
