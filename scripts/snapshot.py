"""Regression snapshot: simulate a matrix of shipped inputs and write every result, exactly.

Used to prove that a refactor or a fast path changes no number: run it before and after and diff
the two files (they must be byte-identical); ``--fast-path off`` and ``--fast-path always`` must agree
too. Each case records the full JSON result (finish, ranks, collectives, network counters, per-link
statistics) minus how the run went (wall clock, events, bulk parts, reruns), or the error message.

    python scripts/snapshot.py -o /tmp/before.jsonl            # every case
    python scripts/snapshot.py -o /tmp/after.jsonl && cmp /tmp/before.jsonl /tmp/after.jsonl
    python scripts/snapshot.py --list                          # case names only

Cases: every shipped 8-NPU workload × native, shipped-family and MSCCL-IR algorithms × 1-D, 2-D
and irregular topologies × the ``analytical``, ``link``, packetised ``link`` and ``flow`` models, some with
chunks, endpoint delay and reduction costs; the 64-NPU shipped run; TACOS-synthesised families;
and ``etsim astra`` runs over ASTRA-sim's native algorithms, splits, active chunks, policies and
both back ends.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "msccl"

Case = tuple[str, Callable[[], Any]]


def _result_dict(result: Any) -> dict[str, Any]:
    data = result.to_dict()
    sim = data.get("sim", {})
    for key in ("wall_s", "events", "bulk_parts", "reruns"):  # how the run went, not what it computed
        sim.pop(key, None)
    return data


def _set_fast_path(mode: str) -> None:
    """``off``: every collective on the event path; ``always``: the fast path for parts of any size."""
    import dataclasses

    import etsim.simulation
    import etsim.workload.bulk

    if mode == "always":
        etsim.workload.bulk.MIN_WORK = 0
    elif mode == "off":
        make_plan = etsim.simulation.Simulation.make_plan

        def event_path_only(self: Any, build: Any) -> Any:
            return dataclasses.replace(make_plan(self, build), fast_excluded=None)

        etsim.simulation.Simulation.make_plan = event_path_only  # type: ignore[method-assign]


def _run_cases(tmp: Path) -> Iterator[Case]:
    from etsim.chakra import CollectiveType, load_workload, write_workload
    from etsim.producers import collective_workload
    from etsim.simulation import NO_REPORTS, simulate
    from etsim.system.config import SystemConfig

    wl8 = [
        "allreduce_8npus_1MiB",
        "allgather_8npus_1MiB",
        "reducescatter_8npus_1MiB",
        "alltoall_8npus_1MiB",
        "dp_8npus_4layers",
        "sendrecv_ring_8npus_1MiB",
    ]
    topos8 = [
        "ring8",
        "switch8",
        "fully_connected8",
        "hypercube8",
        "uni_ring8",
        "graph8_two_switches",
    ]
    natives = ["ring", "direct", "tree", "hd", "hierarchical", "hierarchical_baseline"]
    families = [
        "algorithms/ring_allreduce_8npus",
        "algorithms/direct_allreduce_8npus",
        "algorithms/tree_allreduce_8npus",
        "algorithms/halving_doubling_allreduce_8npus",
        "algorithms/msccl_ring_allreduce_8npus",
        "algorithms/msccl_hier_allreduce_8npus",
        "algorithms/msccl_recdbl_allgather_8npus",
        "algorithms/msccl_allpairs_alltoall_8npus",
    ]
    xmls = sorted(p for p in CORPUS.rglob("*.xml") if "n8" in p.name or "8" in p.stem)[:12] if CORPUS.is_dir() else []
    loaded: dict[str, Any] = {}

    def workload(name: str) -> Any:
        if name not in loaded:
            loaded[name] = load_workload(ROOT / "workloads" / name)
        return loaded[name]

    def case(wl: str, topo: str | None, algo: str | dict[str, str] | None, model: str, **sys_kw: Any) -> Case:
        algos = algo if isinstance(algo, dict) else ({"default": algo} if algo else {})
        options: dict[str, Any] = {}
        if model == "link-packet":
            model, options = "link", {"packet_size": 65536}
        label = f"run {wl} topo={topo} algo={algo} model={model}{options or ''} {sys_kw or ''}"

        def go() -> Any:
            config = SystemConfig(algorithms=dict(algos), base_dir=str(ROOT), **sys_kw)
            topology = None if topo is None else ROOT / "topologies" / f"{topo}.yaml"
            return simulate(
                workload(wl), topology=topology, model=model, model_options=options, system=config, reports=NO_REPORTS
            )

        return label, go

    for wl in wl8:
        for topo in topos8:
            for model in ("analytical", "link", "flow"):
                for algo in natives:
                    yield case(wl, topo, algo, model)
    for wl in ("allreduce_8npus_1MiB", "dp_8npus_4layers"):
        for topo in ("ring8", "switch8", "graph8_two_switches"):
            for model in ("analytical", "link", "link-packet", "flow"):
                for algo in families:
                    yield case(wl, topo, algo, model)
                for xml in xmls:
                    yield case(wl, topo, str(xml), model)
                for extra in (
                    {"chunks": 3},
                    {"reduction_bandwidth": 100.0, "endpoint_delay": 10.0},
                    {"chunks": 2, "endpoint_delay": 7.5},
                ):
                    for algo in ("ring", "direct", "tree", "algorithms/msccl_ring_allreduce_8npus"):
                        yield case(wl, topo, algo, model, **extra)
    for wl in ("allreduce_8npus_1MiB", "allgather_8npus_1MiB", "alltoall_8npus_1MiB"):
        for model in ("analytical", "link"):
            yield case(wl, None, None, model)
            yield case(wl, "ring8", {"all_gather": "direct", "default": "tree"}, model)
    # Multi-dimensional topologies (hierarchical needs dims).
    for npus, topo in ((16, "torus4x4"), (16, "mesh4x4"), (64, "torus8x8"), (64, "mesh4x4x4"), (64, "ring16_switch64")):
        for ctype in (CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER):
            prefix = tmp / f"coll_{int(ctype)}_{npus}"
            if not prefix.with_suffix(".0.et").exists():
                write_workload(collective_workload(ctype, 1 << 22, npus), prefix)
            name = str(prefix)
            loaded.setdefault(name, load_workload(prefix))
            for model in ("analytical", "link", "flow"):
                for algo in ("ring", "direct", "hierarchical", "hierarchical_baseline", "hd"):
                    yield case(name, topo, algo, model)
                yield case(name, topo, "ring", model, chunks=4, reduction_bandwidth=200.0)
    for model in ("analytical", "link", "flow"):
        yield case("allreduce_64npus_64MiB", None, "ring", model)
        yield case("allreduce_64npus_64MiB", "switch64", "direct", model)
    yield case("allreduce_64npus_64MiB", None, "algorithms/ring", "analytical")


def _tacos_cases(tmp: Path) -> Iterator[Case]:
    from etsim.chakra import CollectiveType, load_workload, write_workload
    from etsim.network import load_topology
    from etsim.producers import collective_workload
    from etsim.simulation import NO_REPORTS, simulate
    from etsim.system.config import SystemConfig

    for topo, npus in (("mesh4x4", 16), ("torus4x4", 16), ("switch8", 8)):
        for coll, ctype in (("all_gather", CollectiveType.ALL_GATHER), ("all_reduce", CollectiveType.ALL_REDUCE)):
            label = f"tacos {topo} {coll}"

            def go(topo: str = topo, npus: int = npus, coll: str = coll, ctype: CollectiveType = ctype) -> Any:
                from etsim.producers.tacos import synthesize, write_synthesis

                syn = synthesize(load_topology(ROOT / "topologies" / f"{topo}.yaml"), coll, size=1 << 24, runs=2)
                prefix = tmp / f"tacos_{topo}_{coll}"
                write_synthesis(syn, prefix)
                wl_prefix = tmp / f"tacos_wl_{topo}_{coll}"
                write_workload(collective_workload(ctype, 1 << 24, npus), wl_prefix)
                result = simulate(
                    load_workload(wl_prefix),
                    topology=ROOT / "topologies" / f"{topo}.yaml",
                    model="link",
                    system=SystemConfig(algorithms={"default": str(prefix)}),
                    reports=NO_REPORTS,
                )
                data = _result_dict(result)
                data["synthesised_ns"] = syn.time_ns
                return data

            yield label, go


def _astra_cases(tmp: Path) -> Iterator[Case]:
    from etsim.chakra import CollectiveType, write_workload
    from etsim.compat import run_astra
    from etsim.producers import collective_workload

    colls = {
        "all-reduce": CollectiveType.ALL_REDUCE,
        "all-gather": CollectiveType.ALL_GATHER,
        "reduce-scatter": CollectiveType.REDUCE_SCATTER,
        "all-to-all": CollectiveType.ALL_TO_ALL,
    }
    count = 0
    nets = [(["Ring"], [8]), (["FullyConnected"], [8]), (["Switch"], [8]), (["Ring"], [16]), (["Ring", "Ring"], [4, 4])]
    for topology, npus in nets:
        n = math.prod(npus)
        for cname, ctype in colls.items():
            for algo in ("ring", "direct", "halvingDoubling", "doubleBinaryTree"):
                if len(npus) > 1 and algo != "ring":
                    continue
                if algo == "halvingDoubling" and cname == "all-to-all":
                    continue
                for size in (1 << 20, 1000):
                    for splits, active, policy, opt in ((1, 1, "LIFO", "localBWAware"), (4, 2, "FIFO", "baseline")):
                        for model in ("unaware", "aware"):
                            if model == "aware" and len(npus) > 1:
                                continue
                            count += 1
                            d = tmp / f"astra{count}"
                            label = (
                                f"astra {topology}{npus} {cname} {algo} size={size} splits={splits} "
                                f"active={active} {policy} {opt} {model}"
                            )

                            def go(
                                d: Path = d,
                                ctype: CollectiveType = ctype,
                                size: int = size,
                                n: int = n,
                                algo: str = algo,
                                splits: int = splits,
                                active: int = active,
                                policy: str = policy,
                                opt: str = opt,
                                topology: list[str] = topology,
                                npus: list[int] = npus,
                                model: str = model,
                            ) -> Any:
                                d.mkdir(parents=True, exist_ok=True)
                                write_workload(collective_workload(ctype, size, n), d / "wl")
                                system = {
                                    "scheduling-policy": policy,
                                    "collective-optimization": opt,
                                    "preferred-dataset-splits": splits,
                                    "active-chunks-per-dimension": active,
                                    "endpoint-delay": 10,
                                    "local-mem-bw": 1600,
                                    **{f"{c}-implementation": [algo] * len(npus) for c in colls},
                                }
                                (d / "sys.json").write_text(json.dumps(system))
                                (d / "net.yml").write_text(
                                    f"topology: {topology}\nnpus_count: {npus}\n"
                                    f"bandwidth: {[50.0] * len(npus)}\nlatency: {[500.0] * len(npus)}\n"
                                )
                                return run_astra(d / "wl", d / "sys.json", d / "net.yml", model=model)

                            yield label, go


def cases(tmp: Path) -> Iterator[Case]:
    """Every snapshot case, in a fixed order."""
    yield from _run_cases(tmp)
    yield from _tacos_cases(tmp)
    yield from _astra_cases(tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--out", help="write JSON lines here (default: standard output)")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("-k", help="only cases whose name contains this text")
    parser.add_argument(
        "--fast-path",
        choices=("auto", "off", "always"),
        default="auto",
        help="auto: as etsim runs; off: every message on the event path; always: bulk evaluation for parts of any "
        "size (a snapshot taken with each must be identical)",
    )
    args = parser.parse_args(argv)
    _set_fast_path(args.fast_path)
    from etsim.errors import EtsimError

    out = open(args.out, "w") if args.out else sys.stdout  # noqa: SIM115
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        n = 0
        for label, go in cases(tmp):
            if args.k and args.k not in label:
                continue
            n += 1
            if args.list:
                print(label)
                continue
            try:
                value = go()
                data = value if isinstance(value, dict) else _result_dict(value)
                record = {"case": label, "result": data}
            except EtsimError as exc:
                record = {"case": label, "error": f"{type(exc).__name__}: {exc}".replace(tmp_name, "<tmp>")}
            text = json.dumps(record, sort_keys=True).replace(tmp_name, "<tmp>")
            out.write(text + "\n")
        if args.out:
            out.close()
            print(f"{n} cases -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
