"""``etsim convert``: MSCCL-IR XML ↔ Chakra ET algorithm families.

``etsim convert msccl IN.xml -o PREFIX [--instances K]`` converts an MSCCL-IR algorithm (any
dialect: MSCCLang, Azure msccl-tools, RCCL / msccl-scheduler, TACCL, TE-CCL, ForestColl) into
``PREFIX.<gpu>.et``, one file per ``<gpu>``, with symbolic sizes; without ``-o`` it only checks
the file and prints the summary. It also checks that the program computes its collective
(:mod:`etsim.algo.verify`) and prints the verdict; a program that does not is refused with the
first missing piece and nothing is written. ``etsim convert chakra-to-msccl PREFIX -o OUT.xml``
writes an algorithm family made of sends, receives and reductions as MSCCL-IR XML that the first
command (and ``--algo OUT.xml``) reads back to the same graph, with the family's buffers and offsets
(or placeholders, with a warning, when the family has none MSCCL-IR can express).
"""

from __future__ import annotations

import argparse

from etsim.algo.family_io import SIZE_FREE_NOTE
from etsim.cli.algo import parse_collective
from etsim.errors import ConfigError, TraceError, warn
from etsim.files import write_text
from etsim.options import Size
from etsim.producers.msccl import convert_msccl, step_counts, workload_to_msccl, write_msccl_et

__all__ = ["register"]


def _msccl(args: argparse.Namespace) -> int:
    if args.instances < 1:
        raise ConfigError(f"--instances must be at least 1, not {args.instances}")
    conversion = convert_msccl(args.input, instances=args.instances)
    program = conversion.program
    verdict = conversion.verify()
    if verdict.ok is False:
        raise ConfigError(
            f"{args.input}: the program does not compute {program.coll} over {program.ngpus} GPUs: {verdict.message}"
            + ("; nothing written" if args.output else "")
        )
    counts = ", ".join(f"{n} {t}" for t, n in sorted(step_counts(program).items()))
    print(
        f"{args.input}: {program.coll} on {program.ngpus} GPUs, {program.num_steps} steps ({counts}) "
        f"→ {conversion.num_nodes} nodes, {conversion.num_messages} messages, "
        f"{program.nchunksperloop} chunks per buffer"
    )
    print(f"{args.input}: {verdict}")
    if args.output:
        size = Size(1)(args.size, key="--size") if args.size is not None else None
        try:
            paths = write_msccl_et(conversion, args.output, size=size)
        except ValueError as exc:
            raise ConfigError(f"--size: {exc}") from None
        first, last = paths[0], paths[-1]
        print(f"wrote {len(paths)} files: {first}" + (f" … {last}" if len(paths) > 1 else ""))
        if size is None:
            print(f"note: {SIZE_FREE_NOTE}")
    return 0


def _to_msccl(args: argparse.Namespace) -> int:
    collective = parse_collective(args.collective) if args.collective else None
    notes: list[str] = []
    xml = workload_to_msccl(args.input, collective=collective, name=args.name, proto=args.proto, notes=notes)
    for note in notes:
        if note.startswith("written for out of place only"):
            warn(f"{args.output}: {note}")
            continue
        warn(
            f"{args.output}: buffer offsets are placeholders ({note}); the XML has the family's timing but is "
            'not a data-correct program (<algo etsim_offsets="placeholder">)'
        )
    out = write_text(args.output, xml, TraceError)
    print(f"wrote {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``etsim convert`` and its actions ``msccl`` and ``chakra-to-msccl``."""
    parser = subparsers.add_parser("convert", help="convert MSCCL-IR XML to Chakra ET algorithms and back")
    sub = parser.add_subparsers(dest="convert_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("msccl", help="MSCCL-IR XML → PREFIX.<gpu>.et (one algorithm rank per <gpu>)")
    p.add_argument("input", metavar="IN.xml", help="MSCCL-IR file")
    p.add_argument("-o", "--output", help="output prefix (PREFIX or PREFIX.et); omit to only check the file")
    p.add_argument(
        "--instances", type=int, default=1, help="replicate the program K times, as MSCCLang's instances=K (default 1)"
    )
    p.add_argument("--size", help="the collective's buffer: also write each message's comm_size (e.g. '64 MiB')")
    p.set_defaults(handler=_msccl)
    p = sub.add_parser("chakra-to-msccl", help="a Chakra ET algorithm family → MSCCL-IR XML")
    p.add_argument("input", metavar="PREFIX", help="algorithm family (PREFIX.<rank>.et)")
    p.add_argument("-o", "--output", required=True, help="XML file to write")
    p.add_argument("--collective", help='collective implemented (default: the files\' metadata, else coll="custom")')
    p.add_argument("--name", help="<algo name> (default: the prefix's base name)")
    p.add_argument("--proto", choices=("Simple", "LL", "LL128"),
                   help="<algo proto> (default: the one the family records, else Simple)")  # fmt: skip
    p.set_defaults(handler=_to_msccl)
