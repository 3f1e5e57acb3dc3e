"""Validate the ``nccl`` algorithm against real ``nccl-tests`` measurements.

Every table of ``../shared/reference/nccl-tests/tables.jsonl`` (or ``--tables FILE``) is mapped from its metadata
alone — the GPU, the intra- and inter-node hardware as the source states them, the NCCL version, its environment
(``NCCL_ALGO``, ``NCCL_PROTO``, ``NCCL_COLLNET_ENABLE``, ``NCCL_MIN_CTAS`` …; and what the launch file the source
cites sets where the table's ``env`` lacks it: :data:`SOURCE_ENV`) and the launch mode (``-g N``) — to a
``gpu_cluster`` topology and a system ``nccl:`` block (:func:`describe`). Each row is then simulated as
``etsim run`` does it: one collective of the row's size on every rank, ``--algo nccl``; broadcast and reduce as
nccl-tests times them, :data:`ITERS` calls back to back and their mean (see :data:`ITERS`). The rows are never read
to choose the hardware. A row is within tolerance when the simulated time is within 15% of the measured one (25% below
1 MiB); the measured time is the out-of-place ``time_us`` (in-place, or from the bus bandwidth, where that is all
the table gives). Rows of 0 bytes (nccl-tests' empty operations) are left out.

    python scripts/validate_nccl.py                      # every table: the summary, per table
    python scripts/validate_nccl.py --only polaris       # tables whose id contains 'polaris'
    python scripts/validate_nccl.py --rows --only h100x8 # row by row
    python scripts/validate_nccl.py --write              # also write docs/nccl-validation.json, docs/nccl.md's tables
                                                         # and figures (docs/figures/nccl-*.png, needs matplotlib)

``tests/system/algorithms/test_nccl_validation.py`` re-runs a subset of tables (all with ``-m slow``) and checks
each against the figures recorded here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from etsim.chakra import CollectiveType, Workload  # noqa: E402
from etsim.chakra.builder import TraceBuilder  # noqa: E402
from etsim.network import load_network  # noqa: E402
from etsim.network.hardware import FABRICS, GPU_GENERATIONS  # noqa: E402
from etsim.producers import collective_workload  # noqa: E402
from etsim.simulation import simulate  # noqa: E402
from etsim.system.config import load_system_config  # noqa: E402

TABLES = ROOT.parent / "shared" / "reference" / "nccl-tests" / "tables.jsonl"
RECORD = ROOT / "docs" / "nccl-validation.json"
MiB = 1 << 20
C = CollectiveType
#: nccl-tests' collective names → etsim's collective (sendrecv: a send to the next rank, a receive from the previous).
COLLECTIVES = {
    "all_reduce": C.ALL_REDUCE,
    "all_gather": C.ALL_GATHER,
    "reduce_scatter": C.REDUCE_SCATTER,
    "alltoall": C.ALL_TO_ALL,
    "broadcast": C.BROADCAST,
    "reduce": C.REDUCE,
    "sendrecv": None,
}
#: nccl-tests' bus bandwidth factor per collective (its doc/PERFORMANCE.md).
BUSBW = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
#: nccl-tests' timed calls per size (its ``-n``): launched back to back, one synchronisation after the last, the
#: mean reported. A chain from a root (broadcast, reduce) starts its next call at the root while the last ranks still
#: receive the previous one, so the mean is the chain's period, not one call's latency; every rank of the other
#: collectives works until its call ends, and back to back they give one call's time (checked on the 8×A100
#: all-reduce: the same to the bit), so one call is simulated for them.
ITERS = 20
#: Collectives whose calls overlap back to back.
ROOTED = frozenset({"broadcast", "reduce"})
#: An NVLink domain of trays (GB200 NVL72): NCCL's node is the rack.
NVL72 = 72
#: NICs a node has when the source does not say (the platform's reference design): NICs per GPU, Gb/s each.
DEFAULT_NICS = {"h100": (1, 400), "h200": (1, 400), "h800": (1, 400), "h20": (1, 400), "gh200": (1, 400),
                "b200": (1, 400), "gb200": (1, 400), "a100": (0.5, 200), "a800": (0.5, 200), "v100": (0.5, 100),
                "mi300x": (1, 400)}  # fmt: skip
#: NCCL settings a table's source states in the launch file it cites, where the table's ``env`` does not carry
#: them: (the settings, the file and commit read). Metadata of the source, never read from its rows.
SOURCE_ENV: dict[str, tuple[dict[str, str], str]] = {
    "gb200-128g-all_reduce-oci-oke-2rack": (
        {"NCCL_NVLS_ENABLE": "0"},
        "oracle-quickstart/oci-hpc-oke manifests/nccl-tests/kueue/BM.GPU.GB200-v3.4.yaml at 1cf00fd (2026-01-14), "
        "the manifest its README's results name: mpirun -x NCCL_NVLS_ENABLE=0, image nccl-tests NCCL 2.29.2",
    ),
}
#: An unstated NCCL version: the release current at the table's date (github.com/NVIDIA/nccl tags).
VERSION_BY_YEAR = {2020: "2.7", 2021: "2.9", 2022: "2.12", 2023: "2.18", 2024: "2.21", 2025: "2.26"}


def tolerance(nbytes: float) -> float:
    """The accepted relative error of a row: 15% from 1 MiB, 25% below."""
    return 0.15 if nbytes >= MiB else 0.25


@dataclass
class Case:
    """One table as etsim runs it: its topology and system, and what the mapping assumed (``flags``)."""

    id: str
    collective: str
    ranks: int
    topology: dict[str, Any]
    system: dict[str, Any]
    flags: list[str] = field(default_factory=list)


def _gpu(text: str, flags: list[str]) -> str:
    u = text.upper()
    if re.search(r"MI3\d\d", u):
        flags.append("AMD Instinct (RCCL, NCCL's derivative): modelled as NCCL on an Infinity Fabric mesh")
        return "mi300x"
    for pattern, name in (
        (r"GB200|GB300", "gb200"),
        (r"\bB200|\bB300|\bB100", "b200"),
        (r"H200", "h200"),
        (r"H800", "h800"),
        (r"GH200", "gh200"),
        (r"H100", "h100"),
        (r"\bH20\b", "h20"),
        (r"A800", "a800"),
        (r"A100", "a100"),
        (r"V100", "v100"),
        (r"RTX\s*50\d\d|RTX PRO 6000", "rtx5090"),
        (r"L40|\bL4\b|RTX\s*40\d\d|RTX 6000 ADA", "l40s"),
    ):
        if re.search(pattern, u):
            return name
    flags.append(f"unknown GPU {text!r}: assumed A100")
    return "a100"


def _version(table: dict[str, Any], flags: list[str]) -> str:
    text = table.get("nccl_version") or ""
    head = text.split("(")[0]
    match = re.search(r"\b2\.(\d+)(?:\.(\d+|x))?", text)
    if match and "not stated" not in head:
        return f"2.{match.group(1)}"
    hint = re.search(r"NCCL (2)\.(\d+)", text)
    if hint:
        flags.append(f"NCCL version not stated; the source's hint: 2.{hint.group(2)}")
        return f"2.{hint.group(2)}"
    year = re.search(r"(20\d\d)", table.get("date") or "")
    version = VERSION_BY_YEAR.get(int(year.group(1)), "2.27") if year else "2.27"
    if version < "2.8" and len(version) == 3:
        version = "2.8"
    flags.append(f"NCCL version not stated; the release of the table's date: {version}")
    return version


def _launch(table: dict[str, Any]) -> int:
    notes = table.get("notes") or ""
    match = re.search(r"-g\s*(\d+)", notes)
    if match:
        return int(match.group(1))
    return int(table["gpus_per_node"]) if "single process" in notes.lower() else 1


def _fabric(inter: str) -> str | None:
    s = inter.lower()
    if "efa" in s:
        return "efa"
    if "slingshot" in s or "cassini" in s:
        return "slingshot"
    if "tcpx" in s:
        return "tcpxo"
    if "roce" in s or "rdma cluster network" in s:
        return "roce"
    if "infiniband" in s or re.search(r"\bib\b", s) or "ndr" in s or "hdr" in s:
        return "ib"
    return None


def _nics(inter: str, gpu: str, per_node: int, flags: list[str]) -> tuple[float, float]:
    """NICs per node and Gb/s per NIC, as the source states them (or the platform's default, flagged)."""
    match = re.search(r"(\d+)\s*x\s*(?:[A-Za-z\-0-9]+\s+)?(\d+)\s*(?:Gb/s|G\b)", inter)
    if match:
        return float(match.group(1)), float(match.group(2))
    match = re.search(r"(\d+)\s+RDMA VFs.*?(\d+)\s*Gb/s each", inter)
    if match:
        return float(match.group(1)), float(match.group(2))
    per_gpu, speed = DEFAULT_NICS.get(gpu, (1, 200))
    match = re.search(r"(\d+)\s*(?:Gb/s|G\b|G network)", inter)
    if match:
        flags.append(f"NIC count not stated: {per_gpu:g} per GPU at the stated {match.group(1)} Gb/s")
        return per_gpu * per_node, float(match.group(1))
    flags.append(f"NICs not stated: the platform's {per_gpu:g} per GPU at {speed} Gb/s")
    return per_gpu * per_node, float(speed)


def _intra(table: dict[str, Any], gpu: str, per_node: int, mnnvl: bool, flags: list[str]) -> str:
    text = (table.get("intra") or "").lower()
    generation = GPU_GENERATIONS[gpu]
    card = "PCIE" in table["gpu"].upper() and "SXM" not in table["gpu"].upper()
    if generation.nvlink_links == 0 or card or ("pcie" in text and "nvlink" not in text and "infinity" not in text):
        return "pcie"
    if ("nvswitch" in text or "nvlink switch" in text or mnnvl) and not re.search(r"(no|without)\s+nvswitch", text):
        return "nvswitch"
    if gpu == "mi300x" or re.search(r"all-to-all|fully connected|mesh|(no|without)\s+nvswitch", text):
        return "nvlink"
    if generation.compute_capability >= 80 and per_node >= 8:
        flags.append("intra-node interconnect not stated: NVSwitch (8 SXM GPUs of A100 or later)")
        return "nvswitch"
    return "nvlink"


def describe(table: dict[str, Any]) -> Case:
    """The topology and system of *table*, from its metadata alone (see the module docstring)."""
    flags: list[str] = []
    gpu = _gpu(table["gpu"], flags)
    generation = GPU_GENERATIONS[gpu]
    ranks, per_host, hosts = int(table["gpus"]), int(table["gpus_per_node"]), int(table["nodes"])
    intra_text = (table.get("intra") or "").lower()
    mnnvl = "mnnvl" in intra_text or "nvl72" in intra_text
    if mnnvl:
        domains = max(1, math.ceil(ranks / NVL72))
        per_node = ranks // domains
        flags.append(f"multi-node NVLink: NCCL's nodes are the racks ({domains} of {per_node} GPUs)")
    else:
        domains, per_node = hosts, per_host
    intra = _intra(table, gpu, per_node, mnnvl, flags)
    topology: dict[str, Any] = {
        "kind": "gpu_cluster",
        "gpus": ranks,
        "gpus_per_node": per_node,
        "gpu": gpu,
        "intra": intra,
        "switch_latency": "130 ns",
        "fabric_levels": 3,
        "oversubscription": 1,
    }
    if intra == "pcie":
        topology.update(nvlink_bandwidth=f"{generation.pcie_bandwidth:g} GB/s", nvlink_latency="2 us")
    else:
        topology.update(nvlink_bandwidth=f"{generation.nvlink_bandwidth:g} GB/s", nvlink_latency="700 ns")
    inter = table.get("inter") or ""
    fabric = "ib"
    if hosts > 1:
        found = _fabric(inter)
        if found is None:
            flags.append("fabric not stated: InfiniBand")
        fabric = found or "ib"
        nics, gbps = _nics(inter, gpu, per_host, flags)
        nics_per_node = max(1, round(nics * per_node / per_host))
        topology.update(nics_per_node=nics_per_node, nic_bandwidth=f"{gbps / 8:g} GB/s")
        topology["sharp"] = "sharp" in inter.lower() and fabric == "ib"
    else:
        topology.update(nics_per_gpu=1, nic_bandwidth="50 GB/s")
    topology["fabric"] = fabric
    topology["nic_latency"] = f"{FABRICS[fabric].nic_latency:g} ns"
    env = table.get("env") or {}
    if table["id"] in SOURCE_ENV:
        stated, where = SOURCE_ENV[table["id"]]
        env = {**stated, **env}
        flags.append(
            f"environment from the source's launch file ({where}): " + " ".join(f"{k}={v}" for k, v in stated.items())
        )
    nccl: dict[str, Any] = {"version": _version(table, flags), "gpus_per_process": _launch(table)}
    if env.get("NCCL_ALGO"):
        nccl["algo"] = _algo_names(env["NCCL_ALGO"])
    if env.get("NCCL_PROTO"):
        nccl["proto"] = env["NCCL_PROTO"]
    if env.get("NCCL_COLLNET_ENABLE") == "1":
        nccl["collnet"] = True
    if env.get("NCCL_NVLS_ENABLE") == "0":
        nccl["nvls"] = False
    for variable, key in (("NCCL_MIN_NCHANNELS", "min_channels"), ("NCCL_MAX_NCHANNELS", "max_channels"),
                          ("NCCL_MIN_CTAS", "min_ctas"), ("NCCL_MAX_CTAS", "max_ctas")):  # fmt: skip
        if env.get(variable):
            nccl[key] = int(env[variable])
    system = {"algorithms": {"default": "nccl"}, "nccl": nccl}
    return Case(table["id"], table["collective"], ranks, topology, system, flags)


def _algo_names(value: str) -> str:
    """``NCCL_ALGO`` as NCCL reads it (``COLLNETCHAIN`` → ``CollNetChain``, ``NVLS_TREE`` → ``NVLSTree``)."""
    names = {"collnetchain": "CollNetChain", "collnetdirect": "CollNetDirect", "nvls_tree": "NVLSTree",
             "nvlstree": "NVLSTree"}  # fmt: skip
    negate = value.startswith("^")
    parts = [names.get(p.strip().lower(), p.strip()) for p in value.lstrip("^").split(",") if p.strip()]
    return ("^" if negate else "") + ",".join(parts)


def measured_us(table: dict[str, Any], row: dict[str, Any]) -> float | None:
    """The row's measured time (µs): out-of-place, in-place, or from the bus bandwidth."""
    for key in ("time_us", "ip_time_us"):
        if row.get(key) is not None:
            return float(row[key])
    busbw = row.get("busbw") if row.get("busbw") is not None else row.get("ip_busbw")
    if busbw:
        algbw = busbw / BUSBW[table["collective"]](int(table["gpus"]))
        return row["bytes"] / (algbw * 1e3)
    return None


def _workload(collective: str, nbytes: int, ranks: int, calls: int = 1) -> Workload:
    kind = COLLECTIVES[collective]
    size = nbytes // ranks if kind == C.ALL_GATHER else nbytes
    if calls > 1:  # back to back on every rank: each call after the rank's previous one
        assert kind is not None
        traces = []
        for rank in range(ranks):
            b = TraceBuilder()
            last: list[int] = []
            for _ in range(calls):
                last = [b.collective(kind, size, deps=last)]
            traces.append(b.build(rank=rank))
        return Workload(traces)
    if kind is None:  # sendrecv: every rank sends its buffer to the next and receives the previous one's, on the
        traces = []  # test's one communicator of every rank (pg_name "0")
        for rank in range(ranks):
            b = TraceBuilder()
            b.send((rank + 1) % ranks, nbytes, tag=0, pg_name="0")
            b.recv((rank - 1) % ranks, nbytes, tag=0, pg_name="0")
            traces.append(b.build(rank=rank))
        return Workload(traces)
    return Workload(collective_workload(kind, size, ranks))


def run_table(table: dict[str, Any]) -> dict[str, Any]:
    """Every row of *table* simulated: per row the measured and simulated times, the error and NCCL's choice."""
    case = describe(table)
    network = load_network(case.topology, name=case.id)
    system = load_system_config(case.system)
    rows = []
    started = time.perf_counter()
    for row in table["rows"]:
        nbytes = int(row["bytes"])
        measured = measured_us(table, row)
        if nbytes == 0 or measured is None:
            continue
        calls = ITERS if case.collective in ROOTED else 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            workload = _workload(case.collective, nbytes, case.ranks, calls)
            result = simulate(workload, topology=network, system=system)
        simulated = result.finish_ns / 1e3 / calls
        error = simulated / measured - 1
        choice = result.collectives[0].algorithm if result.collectives else "p2p"
        rows.append(
            {"bytes": nbytes, "measured_us": measured, "simulated_us": round(simulated, 4), "error": round(error, 5),
             "within": abs(error) <= tolerance(nbytes), "choice": choice}
        )  # fmt: skip
    return {
        "id": case.id,
        "collective": case.collective,
        "ranks": case.ranks,
        "category": table.get("category", ""),
        "topology": case.topology,
        "system": case.system,
        "flags": case.flags,
        "rows": rows,
        "seconds": round(time.perf_counter() - started, 2),
    }


def summary(rows: list[dict[str, Any]]) -> tuple[int, int, float]:
    """(rows within tolerance, rows, median |error|)."""
    if not rows:
        return 0, 0, 0.0
    return sum(r["within"] for r in rows), len(rows), statistics.median(abs(r["error"]) for r in rows)


def load_tables(path: Path) -> list[dict[str, Any]]:
    """The tables of a ``tables.jsonl`` file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def main() -> int:
    """Run the tables; print per table (and per row with ``--rows``) the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=Path, default=TABLES, help="a tables.jsonl (default: %(default)s)")
    parser.add_argument("--only", action="append", default=[], help="tables whose id contains this (repeatable)")
    parser.add_argument("--rows", action="store_true", help="print every row")
    parser.add_argument("--json", type=Path, help="write every table's rows to this file")
    parser.add_argument("--write", action="store_true", help=f"write {RECORD.relative_to(ROOT)} and docs/nccl.md's")
    args = parser.parse_args()
    if not args.tables.is_file():
        print(f"validate_nccl: no tables at {args.tables} (give --tables FILE)", file=sys.stderr)
        return 2
    tables = [t for t in load_tables(args.tables) if not args.only or any(s in t["id"] for s in args.only)]
    results = []
    print("| table | rows within | median error | choices | seconds |\n|---|---|---|---|---|")
    for table in tables:
        result = run_table(table)
        results.append(result)
        within, total, median = summary(result["rows"])
        choices = " > ".join(dict.fromkeys(r["choice"].split(":")[-1].rsplit("/", 1)[0] for r in result["rows"]))
        print(f"| {result['id']} | {within}/{total} | {100 * median:.1f}% | {choices} | {result['seconds']} |",
              flush=True)  # fmt: skip
        if args.rows:
            for r in result["rows"]:
                print(f"    {_size(r['bytes']):>10} measured {r['measured_us']:10.2f} us simulated "
                      f"{r['simulated_us']:10.2f} us {100 * r['error']:+6.1f}% {'ok' if r['within'] else '--'} "
                      f"{r['choice']}")  # fmt: skip
    every = [r for t in results for r in t["rows"]]
    within, total, median = summary(every)
    print(f"\nall: {within}/{total} rows within tolerance ({100 * within / max(1, total):.1f}%), "
          f"median error {100 * median:.1f}%")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.write:
        if args.only or args.tables != TABLES:
            print("validate_nccl: --write records every shared table: run it without --only/--tables", file=sys.stderr)
            return 2
        write_record(results)
    return 0


def write_record(results: list[dict[str, Any]]) -> None:
    """Record each table's figures (what the test checks) in :data:`RECORD`; write ``docs/nccl.md``'s tables, plots."""
    record = {}
    for r in results:
        within, total, median = summary(r["rows"])
        record[r["id"]] = {
            "within": within,
            "rows": total,
            "median_error": round(median, 4),
            "errors": [row["error"] for row in r["rows"]],
            "choices": [row["choice"] for row in r["rows"]],
        }
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    figures = _figures(results)
    doc = ROOT / "docs" / "nccl.md"
    text = doc.read_text()
    begin, end = "<!-- validation:begin -->", "<!-- validation:end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + markdown(results, figures) + end + rest.split(end, 1)[1]
        doc.write_text(text)


def markdown(results: list[dict[str, Any]], figures: dict[str, str]) -> str:
    """The validation section of ``docs/nccl.md``: the summary, then per table its figures and plot."""
    every = [row for r in results for row in r["rows"]]
    within, total, median = summary(every)
    lines = [
        f"**All tables: {within} of {total} rows within tolerance ({100 * within / max(1, total):.1f}%), median "
        f"error {100 * median:.1f}%.**",
        "",
        "| table | GPUs | rows within tolerance | median error | NCCL's choices, by size | figure |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        w, t, m = summary(r["rows"])
        choices = " > ".join(dict.fromkeys(row["choice"].removeprefix("nccl:").rsplit("/", 1)[0] for row in r["rows"]))
        figure = f"[plot]({figures[r['id']]})" if r["id"] in figures else "–"
        # (the median rounded as docs/nccl-validation.json records it, so that the two always agree)
        lines.append(f"| `{r['id']}` | {r['ranks']} | {w}/{t} | {100 * round(m, 4):.1f}% | {choices} | {figure} |")
    lines.append("")
    return "\n".join(lines) + "\n"


def _figures(results: list[dict[str, Any]]) -> dict[str, str]:
    """A plot per table (measured and simulated bus bandwidth by size) under ``docs/figures/nccl/``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the plots need etsim[plot]; the tables are written without them
        print("validate_nccl: matplotlib is not installed: no plots (pip install etsim[plot])", file=sys.stderr)
        return {}
    out = ROOT / "docs" / "figures" / "nccl"
    out.mkdir(parents=True, exist_ok=True)
    found = {}
    for r in results:
        if not r["rows"]:
            continue
        factor = BUSBW[r["collective"]](r["ranks"])
        sizes = [row["bytes"] for row in r["rows"]]
        fig, ax = plt.subplots(figsize=(4.2, 2.8), dpi=80)
        for key, style, label in (("measured_us", "o-", "measured"), ("simulated_us", "x--", "etsim nccl")):
            ax.plot(sizes, [row["bytes"] / (row[key] * 1e3) * factor for row in r["rows"]], style, ms=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes")
        ax.set_ylabel("busbw GB/s")
        ax.set_title(r["id"], fontsize=7)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out / f"{r['id']}.png"
        fig.savefig(path, metadata={"Software": None})
        plt.close(fig)
        found[r["id"]] = f"figures/nccl/{r['id']}.png"
    return found


if __name__ == "__main__":
    sys.exit(main())
