"""Regenerate the shipped MSCCL-IR conversions (algorithms/msccl_*.et) and docs/msccl-coverage.md.

    python scripts/gen_msccl_algorithms.py                      # algorithms/msccl_*.et
    python scripts/gen_msccl_algorithms.py --coverage docs/msccl-coverage.md

The XML inputs come from the shared MSCCL-IR corpus (``$ETSIM_MSCCL_CORPUS``, default
``../shared/corpus/msccl`` next to the repository); only our converted ``.et`` outputs are
shipped. The coverage table converts every ``*.xml`` under the corpus and simulates it on a
fully connected topology (50 GB/s, 500 ns, congestion-aware link model) at 1 MiB and 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

from etsim.chakra import Workload
from etsim.chakra.graph import CollectiveType
from etsim.errors import EtsimWarning
from etsim.network import fully_connected
from etsim.producers import collective_workload
from etsim.producers.msccl import MscclError, convert_msccl, step_counts, write_msccl_et
from etsim.producers.msccl.source import load_msccl_algorithm
from etsim.simulation import simulate
from etsim.system.config import SystemConfig
from etsim.units import format_time

REPO = Path(__file__).resolve().parents[1]

#: Shipped family name → corpus file (relative to the corpus directory).
SHIPPED = {
    "msccl_ring_allreduce_8npus": "generated/allreduce_ring_n8_c1_i1_LL128.xml",
    "msccl_recdbl_allgather_8npus": "generated/allgather_recdbl_n8_i1.xml",
    "msccl_hier_allreduce_8npus": "generated/hier_allreduce_g4_n2_i1.xml",
    "msccl_allpairs_alltoall_8npus": "generated/alltoall_allpairs_n8_i1.xml",
}

SIZES = (1 << 20, 1 << 30)
BANDWIDTH = 50.0  # bytes/ns
LATENCY = 500.0  # ns

NOTES = """
## How the converter reads MSCCL-IR

| step | Chakra ET nodes (each waits on the one before) | local buffer read / written |
|---|---|---|
| `s` | SEND `cnt` chunks to `tb.send` | reads `src` |
| `r` | RECV from `tb.recv` | writes `dst` |
| `rcs` | RECV, SEND | writes `dst`, forwards it |
| `rrs` | RECV, COMP (reduce), SEND | reads `src`, no local write |
| `rrc` | RECV, COMP | reads `src`, writes `dst` |
| `rrcs` | RECV, COMP, SEND | reads `src`, writes `dst` |
| `cpy` | COMP of `cnt` chunks (memory time) | reads `src`, writes `dst` |
| `re` | COMP of `cnt` chunks | reads `src` and `dst`, writes `dst` |
| `nop` | none: its `depid/deps` wait moves to the next real step | — |

- Steps of a tb run in order (step *i*'s first node waits on step *i−1*'s last node); `depid/deps` waits
  on the completion of that step of another tb of the same GPU (a wait on a nop means what the nop waited
  on plus the steps before it). Cycles are reported with the step they pass through.
- Messages are tagged with the tb's channel; sends and receives of each (sender, receiver, channel) must pair
  up in number and size, else the first mismatch is reported. `instances=K` (`--instances`) replicates tbs
  as MSCCLang does (channel `nchannels·i + chan`, interleaved chunks). The written `.et` files give each transfer
  its own `comm_tag` (a receive matches one send), so `convert chakra-to-msccl` reads their tags back as channels:
  the round trip keeps every node, dependency and simulated time, not the tb/channel structure (a one-channel ring
  comes back on 14), nor the `minBytes`/`maxBytes` window, which the files do not carry (the `proto` and name the
  converter recorded are written back).
- Sizes are symbolic: `total_chunk_cnt = nchunksperloop`, one chunk = collective buffer / `nchunksperloop`
  (all-gather: the gathered output). COMP nodes (reductions and copies) are costed by the simulator's
  reduction bandwidth; with none configured they are free.
- Not modelled: the runtime's loop over protocol-sized slices of a chunk (one pass with the whole chunk,
  as the reference converter), LL/LL128 protocol overheads, `minBytes/maxBytes` selection windows (kept on
  the parsed program), TACCL `<copy>` hints (parsed, no node). Refused with file, line, gpu, tb and step:
  unknown step types (including the old runtime's `ra`), missing or malformed attributes, dangling
  `depid/deps`, a wait on another tb's step whose `hasdep` is 0 (the runtime publishes a step's completion only
  with `hasdep="1"`: the wait would never end on a GPU; every corpus program is consistent), a tb on a channel
  past `nchannels` (the runtime sets up `nchannels` channels; instances shift channels by it), a tb with two
  `send`/`recv` peers, sends in a tb without a send peer, offsets outside
  their buffer, non-contiguous tb or step ids.
"""


def corpus_dir() -> Path:
    """The MSCCL-IR corpus: ``$ETSIM_MSCCL_CORPUS`` or ``../shared/corpus/msccl``."""
    return Path(os.environ.get("ETSIM_MSCCL_CORPUS", REPO.parent / "shared" / "corpus" / "msccl"))


def corpus_files(corpus: Path | None = None) -> list[Path]:
    """Every ``*.xml`` under the corpus, sorted."""
    root = corpus or corpus_dir()
    return sorted(root.rglob("*.xml"))


def generate(out_dir: Path, corpus: Path | None = None) -> dict[str, list[Path]]:
    """Convert the :data:`SHIPPED` corpus files into *out_dir*; return the paths per family."""
    root = corpus or corpus_dir()
    written = {}
    for name, rel in SHIPPED.items():
        written[name] = write_msccl_et(convert_msccl(root / rel, name=rel), out_dir / name)
    return written


def simulate_file(path: Path, size: int) -> tuple[float, int, float, list[str]]:
    """Simulate the XML at *path* as the workload's algorithm: ``(finish_ns, messages, bytes, warnings)``."""
    algo = load_msccl_algorithm(path)
    n = algo.conversion.program.ngpus
    coll = algo.conversion.collective or CollectiveType.ALL_REDUCE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EtsimWarning)  # kept in the result and shown in the table
        result = simulate(
            Workload(collective_workload(coll, size, n)),
            topology=fully_connected(n, BANDWIDTH, LATENCY),
            model="link",
            system=SystemConfig(algorithms={"default": os.fspath(path)}),
        )
    return result.finish_ns, int(result.network["messages"]), float(result.network["bytes"]), result.warnings


def coverage_rows(corpus: Path | None = None, sizes: tuple[int, ...] = SIZES) -> list[dict[str, object]]:
    """One row per corpus file: what it is, what it converts to, and its simulated times."""
    root = corpus or corpus_dir()
    rows: list[dict[str, object]] = []
    for path in corpus_files(root):
        rel = path.relative_to(root).as_posix()
        row: dict[str, object] = {"file": rel}
        try:
            conv = load_msccl_algorithm(path).conversion
        except MscclError as exc:
            row["error"] = exc.reason
            rows.append(row)
            continue
        program = conv.program
        row.update(
            coll=program.coll,
            ranks=program.ngpus,
            steps=program.num_steps,
            types=" ".join(f"{t}:{n}" for t, n in sorted(step_counts(program).items())),
            nodes=conv.num_nodes,
            messages=conv.num_messages,
            verdict=_verdict_cell(conv.verify()),
        )
        for size in sizes:
            try:
                finish, _, _, notes = simulate_file(path, size)
                row[size] = finish
                row[("outside", size)] = any("minBytes/maxBytes" in note for note in notes)
            except Exception as exc:  # recorded in the table, not hidden
                row[size] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


def _verdict_cell(verdict: object) -> str:
    """A verdict for the table: ``correct (in place)``, ``**WRONG**: …`` or ``cannot verify: …``."""
    text = str(verdict)
    if text.startswith("correct: "):
        places = [p for p in ("in place", "out of place") if p in text.split(":")[1]]
        return "correct (" + " and ".join(places) + ")"
    return text.replace("WRONG", "**WRONG**", 1).replace("|", "\\|")


def _size_label(size: int) -> str:
    return f"{size >> 30} GiB" if size >= 1 << 30 else f"{size >> 20} MiB"


def coverage_markdown(rows: list[dict[str, object]], sizes: tuple[int, ...] = SIZES) -> str:
    """The coverage page for *rows* (see :func:`coverage_rows`)."""
    ok = [r for r in rows if "error" not in r and all(isinstance(r[s], float) for s in sizes)]
    lines = [
        "# MSCCL-IR corpus coverage",
        "",
        "Generated by `python scripts/gen_msccl_algorithms.py --coverage docs/msccl-coverage.md`; do not edit by hand.",
        "",
        f"Every `*.xml` under the shared MSCCL-IR corpus is converted with `etsim convert msccl` semantics "
        f"(`etsim.producers.msccl`) and simulated as the algorithm of a single collective on a fully connected "
        f"topology ({BANDWIDTH:g} GB/s, {LATENCY:g} ns per link, congestion-aware `link` model, reductions free). "
        f"**{len(ok)} of {len(rows)} files convert and simulate to completion.** The reference converter "
        "(astra-sim/collectiveapi) handles about a third of them. "
        f"**{sum(1 for r in rows if str(r.get('verdict', '')).startswith('correct'))} of {len(rows)} compute "
        "their collective** (*verdict*: `etsim algo verify` on the file, in every placement its `inplace`/"
        "`outofplace` declare; `--algo` refuses a file that is wrong).",
        "",
        "Columns: *steps* = `<step>` elements (nops included), *nodes* = Chakra ET nodes over all ranks "
        "(SEND, RECV, COMP; nops become dependencies, not nodes), *messages* = SEND nodes. Times are the "
        "collective's finish time for a workload `comm_size` of 1 MiB and 1 GiB (for all-gather the per-rank "
        "input, as in ASTRA-sim); † marks a size outside the file's `minBytes`/`maxBytes` window (a runtime "
        "would not choose the algorithm for it).",
        "",
        "| file | coll | ranks | steps | step types | nodes | messages | verdict | "
        + " | ".join(f"time @ {_size_label(s)}" for s in sizes)
        + " |",
        "|---|---|---:|---:|---|---:|---:|---|" + "---:|" * len(sizes),
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| `{r['file']}` | — | — | — | — | — | — | — | "
                + " | ".join("**not converted**" for _ in sizes)
                + f" |\n\n> `{r['file']}`: {r['error']}\n"
            )
            continue
        times = [
            (format_time(r[s]) + (" †" if r.get(("outside", s)) else "")) if isinstance(r[s], float) else f"**{r[s]}**"
            for s in sizes
        ]
        lines.append(
            f"| `{r['file']}` | {r['coll']} | {r['ranks']} | {r['steps']} | {r['types']} | {r['nodes']} | "
            f"{r['messages']} | {r['verdict']} | " + " | ".join(times) + " |"
        )
    lines += ["", *NOTES.strip("\n").splitlines(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "algorithms", help="where to write msccl_*.et")
    parser.add_argument("--coverage", type=Path, help="also write the corpus coverage page to this file")
    parser.add_argument("--corpus", type=Path, help="MSCCL-IR corpus directory (default: $ETSIM_MSCCL_CORPUS)")
    args = parser.parse_args(argv)
    corpus = args.corpus or corpus_dir()
    if not corpus.is_dir():
        print(f"no MSCCL-IR corpus at {corpus} (set ETSIM_MSCCL_CORPUS)", file=sys.stderr)
        return 1
    for name, paths in generate(args.out, corpus).items():
        print(f"{name}: {len(paths)} files")
    if args.coverage:
        t0 = time.perf_counter()
        rows = coverage_rows(corpus)
        args.coverage.parent.mkdir(parents=True, exist_ok=True)
        args.coverage.write_text(coverage_markdown(rows))
        print(f"{args.coverage}: {len(rows)} files in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
