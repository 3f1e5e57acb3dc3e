"""Numbers the README and ``docs/`` quote from a run are produced here and compared with the text.

A change that moves one fails until the text is regenerated. Each test reads the number from the document (a
regular expression on the sentence that quotes it), produces it (running the command, or deriving it from figures
another test pins to a run, named where it is), and compares. Timings are not here: the documents quote them as
measured, with the machine and date, never as a promise.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _text(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def _quoted(pattern: str, text: str, where: str) -> re.Match[str]:
    found = re.search(pattern, text, re.S)
    assert found is not None, f"{where} no longer quotes {pattern!r}: update this test with the text"
    return found


def test_readme_counts_the_points_of_the_shipped_sweep() -> None:
    from etsim.experiment.spec import load_experiment

    quoted = _quoted(r"seed_fig4\.yaml\s+# the (\d+) points", _text("README.md"), "README.md")
    assert int(quoted.group(1)) == len(load_experiment(REPO / "experiments" / "seed_fig4.yaml").points)


def _tuning_table() -> dict[str, list[tuple[float, float | None] | None]]:
    """docs/tuning.md's MoE table (test_docs_examples re-runs its times): row → per topology (ms, quoted gain %)."""
    rows: dict[str, list[tuple[float, float | None] | None]] = {}
    for line in _text("docs/tuning.md").splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.match(r"^(tuned table|ring|direct|tree|hd|hierarchical|tacos)\b", cells[0]):
            found = [re.match(r"\**([\d.]+) ms\**(?: \((?:tuned )?([\d.]+)% ?(?:faster)?)?", c) for c in cells[1:]]
            rows[cells[0].split(" (")[0]] = [
                (float(m.group(1)), float(m.group(2)) if m.group(2) else None) if m else None for m in found
            ]
    return rows


def test_the_tuned_table_gains_are_computed_from_the_times_quoted() -> None:
    """docs/tuning.md's gains and README's, from the times docs/tuning.md quotes (test_docs_examples re-runs them)."""
    table = _tuning_table()
    tuned = table.pop("tuned table")
    gains: dict[tuple[str, int], float] = {}
    for name, cells in table.items():
        for column, cell in enumerate(cells):
            if cell is None:
                continue
            reference = tuned[column]
            assert reference is not None
            gains[name, column] = 100 * (1 - reference[0] / cell[0])
            assert cell[1] == round(gains[name, column], 1), (name, column)  # the table's own percentage
    best = [min(cells[c][0] for cells in table.values() if cells[c] is not None) for c in (0, 1)]
    assert best == [table["hierarchical"][0][0], table["ring"][1][0]]  # type: ignore[index]  # (hierarchical ties ring)
    quoted = _quoted(
        r"tuned table is ([\d.]+)% faster than the\s+best single algorithm on `ring4_switch4` "
        r"\(hierarchical; ([\d.]+)% faster than `direct`\) and ([\d.]+)% on `ring16` \(ring\)",
        _text("README.md"),
        "README.md",
    )
    expected = (gains["hierarchical", 0], gains["direct", 0], gains["ring", 1])
    assert tuple(float(g) for g in quoted.groups()) == tuple(round(g, 1) for g in expected)


def test_optimise_quotes_no_more_candidates_than_its_budget_allows() -> None:
    from etsim.tuning.optimise import OptimiseRequest

    text = _text("docs/optimise.md")
    command = _quoted(r"etsim optimise jobs/gpt3_175b_64\.yaml[^\n]*# (\d+) candidates", text, "docs/optimise.md")
    budget = re.search(r"--budget (\d+)", command.group(0))
    allowed = int(budget.group(1)) if budget else OptimiseRequest().budget
    assert int(command.group(1)) <= allowed
    for count in re.findall(r"after (\d+) candidates", text):
        assert int(count) == int(command.group(1))


@pytest.mark.slow
def test_training_md_gpt3_block_is_what_the_commands_print(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/training.md's first example: every line of the step report it shows, regenerated (about 30 s)."""
    from etsim.cli import main

    text = _text("docs/training.md")
    block = _quoted(r"```\n(training step \(gpt3-175b.*?)```", text, "docs/training.md").group(1).splitlines()
    assert main([
        "workload", "gen", "transformer", "--model", "gpt3-175b", "--tp", "8", "--sp", "--pp", "8",
        "--schedule", "interleaved", "--virtual-stages", "3", "--recompute", "selective", "--global-batch", "64",
        "-o", str(tmp_path / "gpt3"),
    ]) == 0  # fmt: skip
    (tmp_path / "selene64.yaml").write_text("kind: gpu_cluster\npreset: dgx-a100\ngpus: 64\n")
    (tmp_path / "training.yaml").write_text("resources: {comm_streams: 0}\n")
    capsys.readouterr()
    args = ["run", str(tmp_path / "gpt3"), "--topology", str(tmp_path / "selene64.yaml")]
    assert main([*args, "--system", str(tmp_path / "training.yaml")]) == 0
    printed = capsys.readouterr().out.splitlines()
    start = printed.index(block[0])
    assert printed[start : start + len(block)] == block


@pytest.mark.slow
def test_optimise_case_study_table_is_what_the_search_finds(tmp_path: Path) -> None:
    """docs/optimise.md's case study (with the ring, as the doc says it was measured; about 10 min on 2 cores)."""
    import json

    import yaml

    from etsim.cli import main

    text = _text("docs/optimise.md")
    baseline = _quoted(r"\| baseline \(generator defaults\) \| ([\d.]+) s \| ([\d.]+)%", text, "docs/optimise.md")
    best = _quoted(r"\| best \| \*\*([\d.]+) s \(([\d.]+)% faster\)\*\* \| ([\d.]+)%", text, "docs/optimise.md")
    job = yaml.safe_load((REPO / "jobs" / "gpt3_175b_64.yaml").read_text())
    job["system"]["algorithms"] = {"default": "ring"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["optimise", str(tmp_path / "job.yaml"), "-o", str(tmp_path / "out"), "--jobs", "2", "-q"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert f"{report['baseline_ns'] / 1e9:.3f}" == baseline.group(1)
    assert f"{report['best_ns'] / 1e9:.3f}" == best.group(1)
    assert f"{100 * report['gain']:.1f}" == best.group(2)
    assert report["candidates"] == int(_quoted(r"# (\d+) candidates", text, "docs/optimise.md").group(1))


def _experiment_rows(name: str | Path, out: Path, jobs: int = 2) -> list[dict[str, str]]:
    """The results.csv rows of the experiment *name* (a shipped one, or a file) run into *out*."""
    import csv

    from etsim.experiment import load_experiment, run_experiment

    run_experiment(load_experiment(REPO / "experiments" / name), out=out, jobs=jobs, plots=False)
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _training_step(tmp_path: Path, name: str, workload: dict[str, object], gpus: int) -> dict[str, str]:
    """The result row of one training step on a `dgx-a100` cluster of *gpus* GPUs (flow, no streams), as the
    documents' training tables were measured."""
    import yaml

    job = {
        "workload": {"generate": "transformer", **workload},
        "topology": {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": gpus},
        "model": "flow",
        "system": {"resources": {"comm_streams": 0}},
    }
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(job))
    (row,) = _experiment_rows(tmp_path / f"{name}.yaml", tmp_path / name, jobs=1)
    return row


@pytest.mark.slow
def test_training_md_moe_paragraph_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/training.md's Mixtral sweep paragraph (16 s of simulation)."""
    rows = _experiment_rows("moe_expert_parallelism.yaml", tmp_path / "moe")
    time = {(r["topology"], int(r["workload.ep"])): float(r["iteration_ns"]) / 1e9 for r in rows}
    dp = {(r["topology"], int(r["workload.ep"])): float(r["exposed_dp_ns"]) / 1e9 for r in rows}
    text = _text("docs/training.md")
    quoted = _quoted(
        r"dominate \(([\d.]+) s and ([\d.]+) s of data-parallel.*?\(([\d.]+) s on DGX A100, ([\d.]+) s on DGX H100, "
        r"([\d.]+) s on the 4:1.*?shrink \((\d+) ms exposed on DGX A100, against (\d+) ms at 4\).*?costs ([\d.]+)× "
        r"the iteration time at 4 and ([\d.]+)× at 8",
        text,
        "docs/training.md",
    )
    a100, h100, over = "dgx_a100", "dgx_h100", "dgx_h100_oversubscribed"
    assert quoted.groups() == (
        f"{dp[a100, 1]:.2f}", f"{dp[a100, 2]:.2f}",
        f"{time[a100, 8]:.3f}", f"{time[h100, 8]:.3f}", f"{time[over, 8]:.3f}",
        f"{dp[a100, 8] * 1e3:.0f}", f"{dp[a100, 4] * 1e3:.0f}",
        f"{time[over, 4] / time[h100, 4]:.1f}", f"{time[over, 8] / time[h100, 8]:.1f}",
    )  # fmt: skip
    for topology in (a100, h100, over):  # 8 is the fastest on every fabric
        assert min(time[topology, ep] for ep in (1, 2, 4, 8)) == time[topology, 8]
    for row in rows:  # only 8 fits
        assert ("would not fit" in row["warnings"]) == (row["workload.ep"] != "8"), row["workload.ep"]


def test_training_md_router_imbalance_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/training.md's unbalanced-router figures (12 points, 5 s of simulation)."""
    rows = _experiment_rows("moe_router_imbalance.yaml", tmp_path / "imbalance")
    h100 = {float(r["workload.expert_imbalance"]): r for r in rows if r["topology"] == "dgx_h100"}
    time = {c: float(r["iteration_ns"]) / 1e9 for c, r in h100.items()}
    ep = {c: float(r["exposed_ep_ns"]) / 1e6 for c, r in h100.items()}
    quoted = _quoted(
        r"c = 0\.2, 0\.5 and 1\.0 lengthen\s+the step by ([\d.]+)%, ([\d.]+)% and ([\d.]+)% \(([\d.]+) s balanced;.*?"
        r"communication (\d+) ms → (\d+) ms\)",
        _text("docs/training.md"),
        "docs/training.md",
    )
    assert quoted.groups() == (
        *(f"{100 * (time[c] / time[0.0] - 1):.1f}" for c in (0.2, 0.5, 1.0)),
        f"{time[0.0]:.3f}", f"{ep[0.0]:.0f}", f"{ep[1.0]:.0f}",
    )  # fmt: skip
    for topology in ("dgx_a100", "dgx_h100", "dgx_h100_oversubscribed"):  # slower with every step of imbalance
        steps = [float(r["iteration_ns"]) for r in sorted(rows, key=lambda r: float(r["workload.expert_imbalance"]))
                 if r["topology"] == topology]  # fmt: skip
        assert steps == sorted(steps) and len(set(steps)) == 4


@pytest.mark.slow
def test_training_md_gpt3_sweep_paragraph_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/training.md's GPT-3 parallelism sweep paragraph (about 90 s on 2 cores)."""
    rows = {
        (r["workload"], int(r["workload.micro_batch"])): r for r in _experiment_rows("gpt3_parallelism.yaml", tmp_path)
    }
    quoted = _quoted(
        r"t2 p32: bubble (\d+)% of busy time,\s+MFU ([\d.]+)%\), and t8 p4 d2 with ZeRO-1 edges out t8 p8 d1 "
        r"\(([\d.]+) s, MFU ([\d.]+)%, against ([\d.]+) s, ([\d.]+)%\)",
        _text("docs/training.md"),
        "docs/training.md",
    )
    t2, t8p4, t8p8 = rows["t2_p32_d1", 1], rows["t8_p4_d2", 1], rows["t8_p8_d1", 1]
    assert quoted.groups() == (
        f"{100 * float(t2['bubble_fraction']):.0f}", f"{100 * float(t2['mfu']):.1f}",
        f"{float(t8p4['iteration_ns']) / 1e9:.3f}", f"{100 * float(t8p4['mfu']):.1f}",
        f"{float(t8p8['iteration_ns']) / 1e9:.3f}", f"{100 * float(t8p8['mfu']):.1f}",
    )  # fmt: skip
    for (layout, micro_batch), row in rows.items():  # which points fit, as the paragraph lists them
        # every b = 4 point, t4 p16 d1 and t4 p8 d2 at b = 2, t2 p32 d1 always
        unfit = micro_batch == 4 or (micro_batch == 2 and layout in ("t4_p16_d1", "t4_p8_d2")) or layout == "t2_p32_d1"
        assert ("would not fit" in row["warnings"]) == unfit, (layout, micro_batch)


def _by(rows: list[dict[str, str]], *keys: str) -> dict[tuple[str, ...], float]:
    """finish_ns of each row by the values of *keys*."""
    return {tuple(r[k] for k in keys): float(r["finish_ns"]) for r in rows}


def test_experiments_md_algorithms_vs_size_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/experiments.md's paragraph on `algorithms_vs_size.yaml` (48 points, about 2 s)."""
    rows = _experiment_rows("algorithms_vs_size.yaml", tmp_path / "a")
    text = _text("docs/experiments.md")
    assert len(rows) == int(_quoted(r"from 1 KiB to 1 GiB: (\d+) points", text, "docs/experiments.md").group(1))
    t = _by(rows, "algo", "size")
    quoted = _quoted(
        r"\(([\d.]+) µs at 1 KiB against ([\d.]+) µs for TACOS;.*?\(([\d.]+) µs against ([\d.]+) µs at 512 KiB, "
        r"([\d.]+) ms against ([\d.]+) ms at 1 GiB\).*?\(([\d.]+) against ([\d.]+) µs at 1 KiB",
        text,
        "docs/experiments.md",
    )
    kib, half, gib = "1 KiB", "512 KiB", "1 GiB"
    assert quoted.groups() == (
        f"{t['direct', kib] / 1e3:.1f}", f"{t['tacos', kib] / 1e3:.1f}",
        f"{t['tacos', half] / 1e3:.1f}", f"{t['direct', half] / 1e3:.1f}",
        f"{t['tacos', gib] / 1e6:.1f}", f"{t['direct', gib] / 1e6:.1f}",
        f"{t['msccl_ring', kib] / 1e3:.1f}", f"{t['ring', kib] / 1e3:.1f}",
    )  # fmt: skip


def test_experiments_md_degraded_mesh_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/experiments.md's paragraph on `degraded_mesh.yaml` (30 points, about 2 s)."""
    rows = _experiment_rows("degraded_mesh.yaml", tmp_path / "d")
    text = _text("docs/experiments.md")
    assert len(rows) == int(_quoted(r"`link`\s+model: (\d+) points", text, "docs/experiments.md").group(1))
    t = _by(rows, "topology", "algo", "size")
    sizes = list(dict.fromkeys(r["size"] for r in rows))  # in sweep order: 16 KiB first, 1 GiB last
    speedup = {(topo, s): t[topo, "ring", s] / t[topo, "tacos", s] for topo in ("healthy", "4_failed") for s in sizes}
    quoted = _quoted(
        r"TACOS is ([\d.]+)× \(16 KiB\) to ([\d.]+)× \(1 GiB\) faster than the ring on the healthy mesh, and keeps "
        r"([\d.]+)–([\d.]+)× with 4\s+failed links \(([\d.]+) ms against ([\d.]+) ms at 1 GiB\)\. The failures cost "
        r"TACOS (\d+) % \(2 links\) and (\d+) % \(4 links\)\s+at 1 GiB;.*?while 4\s+cost it (\d+) %",
        text,
        "docs/experiments.md",
    )
    gib = "1 GiB"
    four = [speedup["4_failed", s] for s in sizes]
    assert quoted.groups() == (
        f"{speedup['healthy', '16 KiB']:.1f}", f"{speedup['healthy', gib]:.1f}",
        f"{min(four):.1f}", f"{max(four):.1f}",
        f"{t['4_failed', 'tacos', gib] / 1e6:.1f}", f"{t['4_failed', 'ring', gib] / 1e6:.1f}",
        f"{100 * (t['2_failed', 'tacos', gib] / t['healthy', 'tacos', gib] - 1):.0f}",
        f"{100 * (t['4_failed', 'tacos', gib] / t['healthy', 'tacos', gib] - 1):.0f}",
        f"{100 * (t['4_failed', 'ring', gib] / t['healthy', 'ring', gib] - 1):.0f}",
    )  # fmt: skip
    assert t["2_failed", "ring", gib] == t["healthy", "ring", gib]  # "the ring is unchanged by them"


def test_readme_tacos_commands_give_the_time_quoted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README's "Algorithms from MSCCLang and from synthesis" commands, run as written (about 3 s)."""
    from etsim.cli import main

    readme = _text("README.md")
    quoted = _quoted(r"`link` model gives the same time \(([\d.]+) ms for the commands above", readme, "README.md")
    mesh = str(REPO / "topologies" / "mesh4x4.yaml")
    tacos, workload = str(tmp_path / "tacos"), str(tmp_path / "tacos_wl")
    synth = ["synth", "tacos", "--topology", mesh, "--collective", "all_reduce", "--chunks-per-npu", "2"]
    assert main([*synth, "--size", "64 MiB", "-o", tacos]) == 0
    gen = ["workload", "gen", "collective", "--type", "all_reduce", "--size", "64 MiB", "--npus", "16"]
    assert main([*gen, "-o", workload]) == 0
    capsys.readouterr()
    assert main([workload, "--algo", f"{tacos}.et", "--topology", mesh, "--model", "link", "-q"]) == 0
    assert f"finish time: {quoted.group(1)} ms" in capsys.readouterr().out


def test_network_models_md_mesh_table_is_what_each_model_gives() -> None:
    """docs/network-models.md: a 64 MiB ring all-reduce on the 8x8 mesh under each model (about 6 s)."""
    from etsim.chakra import load_workload
    from etsim.network import NetworkConfig, load_topology
    from etsim.simulation import simulate

    text = _text("docs/network-models.md")
    quoted = _quoted(
        r"\| packet-level `link` \(4 KiB\) \| ([\d.]+) ms \|.*?\| `flow` \| ([\d.]+) ms \| ([−+][\d.]+)% \|.*?"
        r"\| `analytical` \| ([\d.]+) ms \| ([−+][\d.]+)% \|.*?"
        r"\| store-and-forward `link` \| ([\d.]+) ms \| ([−+][\d.]+)% \|",
        text,
        "docs/network-models.md",
    )
    topology = load_topology(REPO / "topologies" / "mesh8x8.yaml")
    workload = load_workload(REPO / "workloads" / "allreduce_64npus_64MiB")
    ms = {}
    for label, model, options in (
        ("packet", "link", {"packet_size": "4 KiB"}),
        ("flow", "flow", {}),
        ("analytical", "analytical", {}),
        ("link", "link", {}),
    ):
        ms[label] = simulate(workload, topology=NetworkConfig(topology, model, options)).finish_ns / 1e6

    def vs(label: str) -> str:
        return f"{100 * (ms[label] / ms['packet'] - 1):+.1f}".replace("-", "−")

    assert quoted.groups() == (
        f"{ms['packet']:.4f}", f"{ms['flow']:.4f}", vs("flow"), f"{ms['analytical']:.4f}", vs("analytical"),
        f"{ms['link']:.4f}", f"{100 * (ms['link'] / ms['packet'] - 1):+.0f}",
    )  # fmt: skip


def test_nccl_md_validation_tables_are_the_recorded_ones() -> None:
    """docs/nccl.md's validation figures are docs/nccl-validation.json's (which test_nccl_validation re-runs)."""
    import json
    import statistics

    record = json.loads(_text("docs/nccl-validation.json"))
    text = _text("docs/nccl.md")
    section = text.split("<!-- validation:begin -->", 1)[1].split("<!-- validation:end -->", 1)[0]
    seen = set()
    for table, within, total, median in re.findall(
        r"^\| `([^`]+)` \| \d+ \| (\d+)/(\d+) \| ([\d.]+)% \|", section, re.M
    ):
        entry = record[table]
        assert (int(within), int(total), median) == (
            entry["within"],
            entry["rows"],
            f"{100 * entry['median_error']:.1f}",
        )
        seen.add(table)
    assert seen == set(record)
    errors = [abs(e) for entry in record.values() for e in entry["errors"]]
    within = sum(entry["within"] for entry in record.values())
    summary = _quoted(
        r"All tables: (\d+) of (\d+) rows within tolerance \(([\d.]+)%\), median error ([\d.]+)%", text, "nccl.md"
    )
    assert summary.groups() == (
        str(within),
        str(len(errors)),
        f"{100 * within / len(errors):.1f}",
        f"{100 * statistics.median(errors):.1f}",
    )


def test_synthesis_md_hetero_mesh_example_is_what_the_commands_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/synthesis.md's worked example on a heterogeneous 4x4 mesh, its commands run as written (about 5 s)."""
    from etsim.cli import main

    text = _text("docs/synthesis.md")
    lines = ["kind: graph", "npus: 16", "latency: 500 ns", "links:"]
    for n in range(16):
        if n % 4 < 3:
            lines.append(f"  - {{src: {n}, dst: {n + 1}, bandwidth: 200 GB/s}}")
        if n < 12:
            lines.append(f"  - {{src: {n}, dst: {n + 4}, bandwidth: 50 GB/s}}")
    assert len(lines) - 4 == 24  # "all 24 pairs"
    mesh = tmp_path / "hetero_mesh4x4.yaml"
    mesh.write_text("\n".join(lines) + "\n")

    def synth(chunks: int) -> str:
        out = tmp_path / f"tacos_ar{chunks}"
        args = [
            "synth",
            "tacos",
            "--topology",
            str(mesh),
            "--collective",
            "all_reduce",
            "--chunks-per-npu",
            str(chunks),
        ]
        assert main([*args, "--size", "64 MiB", "--runs", "8", "-o", str(out)]) == 0
        return str(out)

    capsys.readouterr()
    tacos = synth(2)
    printed = capsys.readouterr().out
    for label in ("collective time", "lower bound", "schedule bound"):
        quoted = _quoted(rf"{label} +([\d.]+ us)", text, "docs/synthesis.md").group(1)
        assert re.search(rf"{label} +{re.escape(quoted)}", printed), (label, quoted)
    gen = ["workload", "gen", "collective", "--type", "all_reduce", "--size", "64 MiB", "--npus", "16"]
    assert main([*gen, "-o", str(tmp_path / "ar64")]) == 0
    runs = re.findall(
        r"\$ etsim run ar64 --topology hetero_mesh4x4\.yaml --model link --algo (\S+) +# ([\d.]+ \w+)", text
    )
    assert len(runs) == 4
    for algo, quoted in runs:
        capsys.readouterr()
        algo = tacos if algo == "tacos_ar" else algo
        args = [str(tmp_path / "ar64"), "--topology", str(mesh), "--model", "link", "--algo", algo, "-q"]
        assert main(args) == 0
        assert f"finish time: {quoted}" in capsys.readouterr().out, (algo, quoted)
    more = _quoted(r"K = 4 gives ([\d.]+) µs and K = 8\s+([\d.]+) µs", text, "docs/synthesis.md")
    for chunks, quoted in zip((4, 8), more.groups(), strict=True):
        capsys.readouterr()
        synth(chunks)
        assert f"collective time   {quoted} us" in capsys.readouterr().out


def _tune_moe(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, dict[str, float]]:
    """`etsim tune` of the MoE step on ring4_switch4 with a stream per group: what it prints, 16 MiB all-reduce µs."""
    import csv

    from etsim.cli import main

    out = tmp_path / f"t{len(extra)}.yaml"
    capsys.readouterr()
    assert main([
        "tune", "--topology", str(REPO / "topologies" / "ring4_switch4.yaml"),
        "--workload", str(REPO / "workloads" / "moe_16npus_2layers"),
        "--system", str(REPO / "docs" / "examples" / "comm_stream_per_group.yaml"),
        "--candidates", "ring,direct,tree,hd,tacos", "-o", str(out), *extra,
    ]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    with open(out.with_suffix(".csv"), newline="") as f:
        alone = {
            r["candidate"]: float(r["time_ns"]) / 1e3
            for r in csv.DictReader(f)
            if r["collective"] == "all_reduce" and r["bytes"] == str(16 << 20)
        }
    return printed, alone


def test_tuning_md_blind_spot_is_what_the_tuner_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/tuning.md's "What per-call tuning cannot see" paragraph, under `link` and under `flow` (about 8 s)."""
    text = _text("docs/tuning.md")
    quoted = _quoted(
        r"loses the 16 MiB all-reduce by (\d+)%: (\d+) µs against (\d+) µs\), so the table is direct everywhere\s+"
        r"\(([\d.]+) ms\) — yet TACOS for every all-reduce takes ([\d.]+) ms.*?\"tuned is ([\d.]+)% slower\"\. "
        r"Under the\s+default `flow` model TACOS wins the 16 MiB point alone \((\d+) µs against direct's (\d+) µs\), "
        r"and the table\s+"
        r"\(([\d.]+) ms\) beats every single algorithm, TACOS \(([\d.]+) ms\) included",
        text,
        "docs/tuning.md",
    )
    printed, alone = _tune_moe(tmp_path, capsys, "--model", "link")
    tuned = float(re.search(r"tuned table +([\d.]+) ms", printed).group(1))  # type: ignore[union-attr]
    tacos, slower = re.search(r"tacos +([\d.]+) ms +tuned is ([\d.]+)% slower", printed).groups()  # type: ignore[union-attr]
    assert quoted.groups()[:6] == (
        f"{100 * (alone['tacos'] / alone['direct'] - 1):.0f}", f"{alone['tacos']:.0f}", f"{alone['direct']:.0f}",
        f"{tuned:.3f}", f"{float(tacos):.3f}", slower,
    )  # fmt: skip
    printed, alone = _tune_moe(tmp_path, capsys)
    tuned_flow = re.search(r"tuned table +([\d.]+) ms", printed).group(1)  # type: ignore[union-attr]
    tacos_flow = re.search(r"tacos +([\d.]+) ms +tuned is [\d.]+% faster", printed).group(1)  # type: ignore[union-attr]
    assert quoted.groups()[6:] == (f"{alone['tacos']:.0f}", f"{alone['direct']:.0f}", tuned_flow, tacos_flow)


#: docs/training.md's rows against published runs → the model preset; the rows simulated in seconds run by default.
PUBLISHED_ROWS = {
    "1.7B (T1)": ("megatron-1.7b", False), "18.4B (T1)": ("megatron-18b", False),
    "145.6B (T1)": ("megatron-145b", True), "529.6B (T1)": ("megatron-530b", True), "1008B (T1)": ("megatron-1t", True),
    "22B (Korthikanti)": ("megatron-22b", False), "175B (Korthikanti)": ("gpt3-175b", True),
    "530B (Korthikanti)": ("megatron-530b", True), "1T (Korthikanti)": ("megatron-1t", True),
}  # fmt: skip


@pytest.mark.parametrize(
    "row", [pytest.param(r, marks=[pytest.mark.slow] if slow else []) for r, (_, slow) in PUBLISHED_ROWS.items()]
)
def test_training_md_published_rows_are_what_etsim_gives(tmp_path: Path, row: str) -> None:
    """docs/training.md's table against published runs, each row's layout read from the table and simulated
    (seconds for the small rows; minutes, up to 17, for the large ones: those run with ``-m slow``)."""
    line = _quoted(rf"\n(\| {re.escape(row)} \|[^\n]*)", _text("docs/training.md"), "docs/training.md").group(1)
    cells = [c.strip() for c in line.strip("|").split("|")]
    gpus, t, p, v, batch, micro = (int(c.replace(",", "")) if c != "–" else 1 for c in cells[1:7])
    recompute, etsim_cell = cells[7], cells[9]
    workload: dict[str, object] = {
        "model": PUBLISHED_ROWS[row][0], "tp": t, "pp": p, "dp": gpus // (t * p),
        "global_batch": batch, "micro_batch": micro, "recompute": recompute.split()[0],
    }  # fmt: skip
    if v > 1:
        workload.update(schedule="interleaved", virtual_stages=v)
    if "SP" in recompute:
        workload["sp"] = True
    result = _training_step(tmp_path, "row", workload, gpus)
    seconds = float(result["iteration_ns"]) / 1e9

    def shown(value: float, quoted: str) -> str:
        return f"{value:.{len(quoted.split('.')[1]) if '.' in quoted else 0}f}"

    tflops = re.fullmatch(r"([\d.]+) TFLOP/s \(([\d.]+) s\)", etsim_cell)
    if tflops is not None:  # Narayanan et al.'s Table 1: hardware TFLOP/s per GPU (and the step)
        assert (
            shown(float(result["hardware_tflops_per_gpu"]), tflops[1]),
            shown(seconds, tflops[2]),
        ) == tflops.groups()
    else:  # Korthikanti et al.: the step and MFU
        step = re.fullmatch(r"([\d.]+) s, MFU ([\d.]+)%", etsim_cell)
        assert step is not None, etsim_cell
        assert (shown(seconds, step[1]), shown(100 * float(result["mfu"]), step[2])) == step.groups()


@pytest.mark.slow
def test_experiments_md_seed_fig4_table_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/experiments.md's slowdown table of the seed paper's Fig. 4 (120 points, about a minute on 2 cores)."""
    rows = _experiment_rows("seed_fig4.yaml", tmp_path / "s")
    t = _by(rows, "topology", "model", "size")
    labels = {
        "2-D torus 8×8": "torus2d", "3-D torus 4×4×4": "torus3d", "2-D mesh 8×8": "mesh2d", "3-D mesh 4×4×4": "mesh3d",
        "fully connected (25 GB/s)": "fully_connected", "switch": "switch", "ring 8 × switch 8": "ring_x_switch",
    }  # fmt: skip
    text = _text("docs/experiments.md")
    sizes = ("1 KiB", "256 KiB", "4 MiB", "64 MiB")
    for label, topology in labels.items():
        quoted = _quoted(rf"\n\| {re.escape(label)} \|((?: [\d.]+ \|){{8}})", text, "docs/experiments.md")
        cells = quoted.group(1).replace("|", " ").split()
        for model, column in (("analytical", 0), ("flow", 0), ("packet-level", 4)):
            got = [f"{t[topology, model, s] / t['ring', model, s]:.2f}" for s in sizes]
            assert got == cells[column : column + 4], (label, model)
    ring = _quoted(r"The 1-D ring itself takes ([\d.]+) µs at 1 KiB and ([\d.]+) ms at 64 MiB", text, "experiments.md")
    for model in ("analytical", "flow", "packet-level"):  # "under all three"
        assert (f"{t['ring', model, '1 KiB'] / 1e3:.1f}", f"{t['ring', model, '64 MiB'] / 1e6:.1f}") == ring.groups()


def test_nccl_md_counts_its_tables_and_names_the_choice_its_example_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/nccl.md's and README's table count (the validation record's), and the example's NCCL choice (1 s)."""
    import json

    from etsim.cli import main

    tables = len(json.loads(_text("docs/nccl-validation.json")))
    assert int(_quoted(r"checked against\s+(\d+) measured tables", _text("docs/nccl.md"), "nccl.md").group(1)) == tables
    assert int(_quoted(r"against (\d+) real `nccl-tests` tables", _text("README.md"), "README.md").group(1)) == tables
    choice = _quoted(r"#   \.\.\. all_reduce 1 GiB  (nccl:\S+) \.\.\.", _text("docs/nccl.md"), "nccl.md").group(1)
    (tmp_path / "h100x16.yaml").write_text("kind: gpu_cluster\npreset: dgx-h100\ngpus: 16\n")
    gen = ["workload", "gen", "collective", "--type", "all_reduce", "--size", "1GiB", "--npus", "16"]
    assert main([*gen, "-o", str(tmp_path / "ar")]) == 0
    capsys.readouterr()
    assert main([str(tmp_path / "ar"), "--topology", str(tmp_path / "h100x16.yaml")]) == 0
    assert re.search(rf"all_reduce +1 GiB +{re.escape(choice)} ", capsys.readouterr().out)


def test_tuning_md_per_call_times_are_the_shipped_tables(tmp_path: Path) -> None:
    """docs/tuning.md's per-call times (the 16 MiB dense all-reduce alone) are the shipped CSVs' (test_docs_examples
    checks the CSVs are what `etsim tune` writes)."""
    import csv

    def alone(topology: str) -> dict[str, float]:
        with open(REPO / "docs" / "examples" / f"moe_tuned_{topology}.csv", newline="") as f:
            return {
                r["candidate"]: float(r["time_ns"]) / 1e3
                for r in csv.DictReader(f)
                if r["collective"] == "all_reduce" and r["bytes"] == str(16 << 20) and r["time_ns"]
            }

    text = _text("docs/tuning.md")
    quoted = _quoted(
        r"16 MiB dense all-reduce goes to `hierarchical` \((\d+) µs against direct's (\d+) µs alone\);.*?"
        r"ring; (\d+) µs against ring's (\d+) µs at 16 MiB\)",
        text,
        "docs/tuning.md",
    )
    a, b = alone("ring4_switch4"), alone("ring16")
    assert quoted.groups() == tuple(f"{v:.0f}" for v in (a["hierarchical"], a["direct"], b["tacos"], b["ring"]))


@pytest.mark.slow
def test_training_md_weak_scaling_table_is_what_etsim_gives(tmp_path: Path) -> None:
    """docs/training.md's weak-scaling table of GPT-3 175B, 64 to 4,096 GPUs (about 1 min with replica folding)."""
    text = _text("docs/training.md")
    table = re.findall(
        r"\n\| ([\d,]+) \| (\d+) \| 8 \| [\d.]+ [kM] \| ([\d.]+) s \| ([\d.]+)% \| ([\d,]+) \| (\d+) ms \|", text
    )
    assert [int(g.replace(",", "")) for g, *_ in table] == [64, 128, 256, 512, 1024, 2048, 4096]
    for gpus_text, d, iteration, mfu, tokens, exposed in table:
        gpus = int(gpus_text.replace(",", ""))
        assert int(d) == gpus // 64
        workload = {"model": "gpt3-175b", "tp": 8, "sp": True, "pp": 8, "dp": gpus // 64, "zero": 1,
                    "recompute": "selective", "global_batch": gpus // 8, "micro_batch": 1}  # fmt: skip
        r = _training_step(tmp_path, f"g{gpus}", workload, gpus)
        assert (
            f"{float(r['iteration_ns']) / 1e9:.3f}", f"{100 * float(r['mfu']):.1f}",
            f"{float(r['tokens_per_s']):,.0f}", f"{float(r['exposed_dp_ns']) / 1e6:.0f}",
        ) == (iteration, mfu, tokens, exposed), gpus  # fmt: skip


@pytest.mark.slow
def test_cluster_md_straggler_table_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/cluster.md's straggler table: experiments/straggler_sweep.yaml, six points of 1,024 ranks (4.5 min)."""
    rows = _experiment_rows("straggler_sweep.yaml", tmp_path / "straggler")
    text = _text("docs/cluster.md")
    for row in rows:
        factor = row["system.compute_slowdown"]
        step, exposed = float(row["finish_ns"]) / 1e6, float(row["exposed_comm_ns"]) / 1e6
        _quoted(rf"\| {re.escape(factor)}× \| {step:.3f} ms \| {exposed:.3f} ms \|", text, "docs/cluster.md")


def test_cluster_md_random_placements_range_is_what_the_sweep_finds(tmp_path: Path) -> None:
    """docs/cluster.md: every random placement's slowdown range (experiments/cluster_placements.yaml, ~3 s)."""
    rows = _experiment_rows("cluster_placements.yaml", tmp_path / "placements")
    slowdowns = [
        float(r[f"{job}.slowdown"]) for r in rows if r["cluster.placement"].startswith("random") for job in "ab"
    ]
    quoted = _quoted(r"lands between ([\d.]+)× and ([\d.]+)×", _text("docs/cluster.md"), "docs/cluster.md")
    assert quoted.groups() == (f"{min(slowdowns):.3f}", f"{max(slowdowns):.3f}")
    packed = next(r for r in rows if r["cluster.placement"] == "packed")
    assert float(packed["a.slowdown"]) == float(packed["b.slowdown"]) == 1.0
