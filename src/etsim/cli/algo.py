"""``etsim algo``: list the native collective algorithms, export them as Chakra ET families, verify algorithms.

``etsim algo list`` prints every registered algorithm and the collectives it implements.
``etsim algo export NAME --collective C --npus N -o PREFIX [--dims 4x8]`` writes the
algorithm's per-rank graphs, with symbolic sizes, to ``PREFIX.0.et … PREFIX.{N-1}.et``; the
family runs with ``--algo PREFIX`` exactly as the native algorithm does.

``etsim algo verify SPEC [--collective C] [--npus N] [--dims 4x8]`` checks that an algorithm
computes its collective (:mod:`etsim.algo.verify`) and prints ``SPEC: correct: …``,
``SPEC: WRONG: <first missing piece>`` or ``SPEC: cannot verify: <why>``. *SPEC* is whatever
``--algo`` takes: a family prefix (collective and group size from its files), an MSCCL-IR XML
(from its ``<algo>``) or an algorithm name (then ``--collective`` and ``--npus`` are needed).
Exit status: 0 correct, 1 wrong (or an error), 3 cannot verify (e.g. a family without data
annotations), so scripts can tell an unchecked algorithm from a checked one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from etsim.algo.family_encode import RankEncoder
from etsim.algo.family_io import SIZE_FREE_NOTE, encode_algo_graph, write_family_by_rank
from etsim.algo.verify import Verdict
from etsim.chakra.graph import CollectiveType
from etsim.chakra.graph import parse_collective as chakra_parse_collective
from etsim.errors import ConfigError, EtsimError, warn
from etsim.options import Size
from etsim.system.algorithms import (
    ALGORITHMS,
    AlgorithmContext,
    ChakraAlgorithm,
    CollectiveAlgorithm,
    resolve_algorithm,
)

__all__ = ["export_algorithm", "make_algorithm", "parse_collective", "parse_dims", "register", "verify_spec"]

#: Exit status of ``etsim algo verify`` per verdict (True: correct, False: wrong, None: cannot verify).
VERIFY_STATUS: dict[bool | None, int] = {True: 0, False: 1, None: 3}


def parse_collective(text: str) -> CollectiveType:
    """A collective from its name: ``all_reduce``, ``allreduce`` and ``all-reduce`` are all accepted.

    Raises:
        ConfigError: not a collective (the message lists the valid names).
    """
    try:
        return chakra_parse_collective(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_dims(text: str) -> tuple[int, ...]:
    """Dimension sizes written ``4x8`` (or ``4,8``), dimension 0 first."""
    parts = text.lower().replace(",", "x").split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--dims {text!r}: expected sizes such as 4x8") from None
    if any(d < 1 for d in dims):
        raise ConfigError(f"--dims {text!r}: sizes must be positive")
    return dims


def make_algorithm(name: str, dims: tuple[int, ...] | None = None) -> CollectiveAlgorithm:
    """Instantiate the algorithm registered as *name*, passing *dims* if it takes them.

    Raises:
        ConfigError: unknown name (the message lists the registered ones) or *dims* given to
            an algorithm that takes none.
    """
    cls = ALGORITHMS.get(name)
    if getattr(cls, "needs_dims", False):
        return cls(dims=dims)  # type: ignore[call-arg]
    if dims is not None and len(dims) > 1:
        raise ConfigError(f"algorithm {name!r} runs on a flat group and takes no --dims")
    return cls()


def export_algorithm(
    algo: CollectiveAlgorithm, collective: CollectiveType, npus: int, prefix: str | Path, *, size: int | None = None
) -> list[Path]:
    """Write *algo*'s graphs of *collective* over *npus* ranks to ``PREFIX.<rank>.et``; return the paths.

    A trailing ``.et`` on *prefix* is dropped (``ring.et`` writes ``ring.0.et …``). With *size* (the
    collective's buffer in bytes) every message also carries its ``comm_size``.

    Raises:
        ConfigError: the algorithm does not support the collective or group size (with its reason), or
            *size* does not split into its chunks.
    """
    algo.check(collective, npus)
    metadata = {"collective": collective.name.lower()}
    first = algo.graph(collective, npus, 0)
    try:  # a size that does not split is refused before any file is written
        encode_algo_graph(first, 0, npus, metadata=metadata, size=size)
    except ValueError as exc:
        raise ConfigError(f"--size: {exc}") from None

    shared = RankEncoder(first, npus, metadata=metadata, size=size)  # made once, before writers fork

    def make(rank: int) -> bytes:  # one rank in memory at a time, encoded without building protobuf nodes
        graph = algo.graph(collective, npus, rank)
        if graph is first:  # one graph for every rank: only what moves with the rank is encoded per rank
            return shared.encode_runs(rank) or shared.encode(rank)
        return encode_algo_graph(graph, rank, npus, metadata=metadata, size=size)

    return write_family_by_rank(make, npus, prefix)


def verify_spec(
    spec: str, collective: CollectiveType | None = None, npus: int | None = None, dims: tuple[int, ...] | None = None
) -> tuple[CollectiveType, int, Verdict]:
    """Resolve *spec* as ``--algo`` does and verify it: ``(collective, group size, verdict)``.

    Files say what they implement and for how many ranks; *collective* and *npus* override or
    complete that (a name needs both).

    Raises:
        ConfigError: the spec cannot be loaded, or the collective or group size is unknown or unsupported.
    """
    _, algo = resolve_algorithm(spec, AlgorithmContext(dims=dims), origin="algorithm")
    own_size: int | None = None
    if isinstance(algo, ChakraAlgorithm):
        own_size = algo.num_ranks
    elif algo.source == "msccl-ir":
        own_size = algo.conversion.program.ngpus  # type: ignore[attr-defined]
    if collective is None:
        if len(algo.collectives) != 1:
            names = ", ".join(sorted(c.name.lower() for c in algo.collectives))
            raise ConfigError(f"{spec}: say which collective to check with --collective (it implements {names})")
        collective = next(iter(algo.collectives))
    n = npus if npus is not None else own_size
    if n is None:
        raise ConfigError(f"{spec}: say for how many ranks with --npus")
    algo.check(collective, n)
    return collective, n, algo.verify(collective, n)


#: The largest group ``algo export`` and ``algo verify`` build an algorithm for: a ring's graphs hold ~4n nodes
#: per rank, so work and memory grow with n² (4,096 ranks: 67 million nodes).
MAX_GROUP = 4096


def _check_npus(npus: int | None) -> None:
    if npus is not None and not 1 <= npus <= MAX_GROUP:
        raise ConfigError(
            f"--npus must be between 1 and {MAX_GROUP:,} (the graphs of n ranks grow as n²), not {npus:,}"
        )


def _verify(args: argparse.Namespace) -> int:
    try:
        collective = parse_collective(args.collective) if args.collective else None
        dims = parse_dims(args.dims) if args.dims else None
        _check_npus(args.npus)
        _, _, verdict = verify_spec(args.spec, collective, args.npus, dims)
    except EtsimError as exc:  # (exit 1 says "wrong": an input that cannot be read is "cannot verify")
        print(f"etsim: error: {exc}", file=sys.stderr)
        return VERIFY_STATUS[None]
    print(f"{args.spec}: {verdict}")
    if verdict.ambiguity:
        warn(f"{args.spec}: {verdict.ambiguity}")
    return VERIFY_STATUS[verdict.ok]


def _list(args: argparse.Namespace) -> int:
    rows = []
    for name in ALGORITHMS.names():
        cls = ALGORITHMS.get(name)
        colls = ", ".join(c.name.lower() for c in sorted(cls.collectives, key=lambda c: c.name))
        notes = []
        if cls.name and cls.name != name:
            notes.append(f"alias of {cls.name}")
        if getattr(cls, "needs_dims", False):
            notes.append("takes --dims")
        rows.append((name, colls + (f"  ({'; '.join(notes)})" if notes else "")))
    width = max((len(n) for n, _ in rows), default=0)
    for name, text in rows:
        print(f"{name:<{width}}  {text}")
    return 0


def _export(args: argparse.Namespace) -> int:
    _check_npus(args.npus)
    collective = parse_collective(args.collective)
    dims = parse_dims(args.dims) if args.dims else None
    algo = make_algorithm(args.name, dims)
    size = Size(1)(args.size, key="--size") if args.size is not None else None
    paths = export_algorithm(algo, collective, args.npus, args.output, size=size)
    first, last = paths[0], paths[-1]
    print(f"wrote {len(paths)} files: {first}" + (f" … {last}" if len(paths) > 1 else ""))
    if size is None:
        print(f"note: {SIZE_FREE_NOTE}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``etsim algo`` and its actions ``list``, ``export`` and ``verify``."""
    parser = subparsers.add_parser("algo", help="list native collective algorithms, export them as .et, verify")
    sub = parser.add_subparsers(dest="algo_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("list", help="print each algorithm and the collectives it implements")
    p.set_defaults(handler=_list)
    p = sub.add_parser("export", help="write an algorithm's per-rank graphs as PREFIX.<rank>.et")
    p.add_argument("name", metavar="NAME", help="algorithm name (see 'etsim algo list') or package.module:Class")
    p.add_argument("--collective", required=True, help="all_reduce, reduce_scatter, all_gather, all_to_all, …")
    p.add_argument("--npus", required=True, type=int, help="group size")
    p.add_argument("--dims", help="dimension sizes for hierarchical algorithms, dimension 0 first (e.g. 4x8)")
    p.add_argument("--size", help="the collective's buffer: also write each message's comm_size (e.g. '64 MiB')")
    p.add_argument("-o", "--output", required=True, help="output prefix (PREFIX or PREFIX.et)")
    p.set_defaults(handler=_export)
    p = sub.add_parser(
        "verify",
        help="check that an algorithm computes its collective (exit 0 correct, 1 wrong, 3 cannot verify or read)",
    )
    p.add_argument("spec", metavar="SPEC", help="a family prefix, an MSCCL-IR XML, or an algorithm name")
    p.add_argument("--collective", help="the collective to check (default: what the files record)")
    p.add_argument("--npus", type=int, help="group size (default: the files' rank count)")
    p.add_argument("--dims", help="dimension sizes for hierarchical algorithms, dimension 0 first (e.g. 4x8)")
    p.set_defaults(handler=_verify)
