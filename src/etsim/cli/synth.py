"""``etsim synth tacos``: synthesise a topology-aware collective algorithm and write it as Chakra ET.

``etsim synth tacos --topology FILE --collective all_gather -o PREFIX`` runs TACOS-style greedy
link–chunk matching (:mod:`etsim.producers.tacos`) on the topology, writes the per-rank algorithm
``PREFIX.0.et …`` (symbolic sizes; simulate it with ``--algo PREFIX``) and prints the synthesised
collective time, the lower bound for the topology and the synthesis wall time.
"""

from __future__ import annotations

import argparse
import time

from etsim.algo.family_io import SIZE_FREE_NOTE
from etsim.errors import ConfigError
from etsim.network import load_topology
from etsim.options import Size, add_arguments, arguments_given, flag_name, parse_options
from etsim.producers.tacos import COLLECTIVES, synthesize, write_synthesis
from etsim.producers.tacos.source import TacosParams
from etsim.units import format_size, format_time

__all__ = ["parse_group", "register"]

#: The synthesis parameters that are flags here (``--size`` is the collective's buffer, not the link-weight size).
_TACOS_FLAGS = ("chunks_per_npu", "seed", "runs")


def parse_group(text: str) -> list[int]:
    """NPU ranks written ``0-3,8,10-11`` (ranges inclusive)."""
    ranks: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                ranks.extend(range(a, b + 1))
            else:
                ranks.append(int(part))
        except ValueError:
            raise ConfigError(f"--group {text!r}: expected ranks such as 0-3,8") from None
    if not ranks:
        raise ConfigError(f"--group {text!r}: no ranks")
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"--group {text!r}: a rank appears twice")
    return ranks


def _tacos(args: argparse.Namespace) -> int:
    topology = load_topology(args.topology)
    size = Size()(args.size, key="--size")
    group = None if args.group is None else parse_group(args.group)  # (an empty --group is an error, not all)
    given = arguments_given(args, TacosParams, only=_TACOS_FLAGS)
    params = parse_options(TacosParams, given, key=flag_name, text=True)
    k = params.get("chunks_per_npu", 1)
    syn = synthesize(topology, args.collective, size=size, group=group, **params)
    lg = syn.links
    # comm_size beside the chunk counts, so consumers that read bytes only run the family as synthesised.
    written = size if size % (lg.n * k) == 0 else None
    t0 = time.perf_counter()
    paths = write_synthesis(syn, args.output, size=written)
    write_s = time.perf_counter() - t0
    bound = syn.bound
    which = max(
        ("chunk steps", bound.chunk_steps),
        ("bandwidth", bound.bandwidth),
        ("distance", bound.distance),
        key=lambda kv: kv[1],
    )[0]
    ratio = syn.time_ns / bound.value if bound.value > 0 else 1.0
    print(
        f"TACOS {syn.collective} on {topology.name}: {lg.n} NPUs, {lg.num_links} logical links"
        + (f" ({lg.unwound} through switches)" if lg.unwound else "")
        + f", {k} chunk{'s' if k > 1 else ''} per NPU of {format_size(syn.chunk_bytes)}, {format_size(size)} in all"
    )
    print(f"collective time   {format_time(syn.time_ns)}  ({syn.time_ns:.6g} ns)")
    physical = syn.physical_bound()
    if physical.ns > 0:
        print(
            f"lower bound       {format_time(physical.ns)}  (any algorithm on this network: {physical.reason}; "
            f"{syn.time_ns / physical.ns:.4f}x of it)"
        )
    print(
        f"schedule bound    {format_time(bound.value)}  ({which}; of schedules of whole chunks, one at a time per "
        f"logical link; {ratio:.4f}x of it)"
    )
    print(
        f"synthesis         {syn.wall_s:.3f} s wall, {syn.schedule.num_transfers} transfers, "
        f"best of {syn.runs} run{'s' if syn.runs > 1 else ''} (seed {syn.seed})"
    )
    for note in lg.notes[:5]:
        print(f"warning: {note}")
    first, last = paths[0], paths[-1]
    print(f"wrote {len(paths)} files in {write_s:.2f} s: {first}" + (f" … {last}" if len(paths) > 1 else ""))
    if written is None:
        print(f"note: --size {size} is not a multiple of the {lg.n * k} chunks, so {SIZE_FREE_NOTE}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``etsim synth`` and its synthesiser ``tacos``."""
    parser = subparsers.add_parser("synth", help="synthesise topology-aware collective algorithms (TACOS)")
    sub = parser.add_subparsers(dest="synth_command", metavar="SYNTHESIZER")
    sub.required = True
    p = sub.add_parser(
        "tacos",
        help="greedy link-chunk matching (TACOS) for any topology; writes a Chakra ET algorithm family",
        description="Synthesise All-Gather by greedy link-chunk matching, Reduce-Scatter as its time reverse "
        "and All-Reduce as both; write PREFIX.<rank>.et and print the time, lower bound and synthesis time.",
    )
    p.add_argument("--topology", required=True, help="topology YAML (switches are unwound into rings)")
    p.add_argument("--collective", required=True, choices=sorted(COLLECTIVES), help="collective to synthesise")
    add_arguments(p, TacosParams, only=_TACOS_FLAGS[:1])
    p.add_argument(
        "--size",
        default="1 GiB",
        help="the collective's whole output buffer, e.g. '1 GiB' (bare numbers are bytes); each of the "
        "N·K chunks is size/(N·K) (default 1 GiB)",
    )
    add_arguments(p, TacosParams, only=_TACOS_FLAGS[1:])
    p.add_argument("--group", metavar="RANKS", help="synthesise for these NPUs only, e.g. 0-7,16 (multi-tenant)")
    p.add_argument("-o", "--output", required=True, help="output prefix (PREFIX or PREFIX.et)")
    p.set_defaults(handler=_tacos)
