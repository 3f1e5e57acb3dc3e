"""``etsim run --trace/--critical-path``, ``etsim report`` and ``etsim plot``: outputs and one-line errors."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from etsim.cli import main

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def saved(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, str]:
    """A DP run on ring8 with a gzipped trace, the critical path and a JSON result."""
    out, trace = tmp_path / "r.json", tmp_path / "t.json.gz"
    code, text, err = run(
        capsys,
        "run",
        str(repo / "workloads" / "dp_8npus_4layers"),
        "--topology",
        str(repo / "topologies" / "ring8.yaml"),
        "--trace",
        str(trace),
        "--trace-messages",
        "--critical-path",
        "--json",
        str(out),
    )
    assert code == 0, err
    assert f"in {trace}" in err and "Perfetto" in err
    return out, trace, text


def test_run_writes_trace_json_and_prints_the_new_sections(saved: tuple[Path, Path, str]) -> None:
    out, trace, text = saved
    doc = json.loads(out.read_text())
    assert set(doc) >= {"links", "groups", "critical_path"}
    cp = doc["critical_path"]
    assert cp["segments"][-1]["end_ns"] == doc["finish_ns"] and cp["segments"][0]["start_ns"] == 0
    assert doc["groups"][0]["group"] == "0" and doc["collectives"][0]["busbw_GBps"] > 0
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sum(e["ph"] == "s" for e in events) == doc["network"]["messages"]
    for section in ("busbw", "communicator groups", "busiest links", "critical path, node by node", "it0_fwd_l0"):
        assert section in text


def test_report_renders_the_saved_table(saved: tuple[Path, Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    out, _, text = saved
    code, again, _ = run(capsys, "report", str(out))
    assert code == 0
    # the same table as the run printed (after its first line naming the workload)
    assert again == text.split("\n", 1)[1]
    code, md, _ = run(capsys, "report", str(out), "--format", "markdown")
    assert code == 0 and "### collectives" in md and "| all_reduce | 16,777,216 | ring |" in md
    assert "### critical path" in md and "### groups" in md
    code, csv_text, _ = run(capsys, "report", str(out), "--format", "csv", "--table", "links")
    assert code == 0 and csv_text.startswith("link,src,dst,bytes,busy_ns,utilisation,messages\n")
    assert len(csv_text.strip().splitlines()) == 1 + 8


def test_plots_draw_pictures(saved: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out, trace, _ = saved
    code, text, _ = run(capsys, "plot", "timeline", str(trace), "-o", str(tmp_path / "tl.png"), "--max-ranks", "2")
    assert code == 0 and "first 2 of 8 processes" in text
    assert (tmp_path / "tl.png").read_bytes()[:4] == b"\x89PNG"
    code, text, _ = run(capsys, "plot", "links", str(out), "-o", str(tmp_path / "links.png"))
    assert code == 0 and "(heatmap)" in text and (tmp_path / "links.png").stat().st_size > 1000


def test_pictures_of_one_result_are_identical_files(
    saved: tuple[Path, Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # SVG and PDF carried the date of drawing and random ids; a tuning plot as SVG raised a raw ValueError.
    pytest.importorskip("matplotlib")
    _, trace, _ = saved
    for suffix in ("svg", "pdf", "png"):
        files = [tmp_path / f"tl{i}.{suffix}" for i in range(2)]
        for f in files:
            assert run(capsys, "plot", "timeline", str(trace), "-o", str(f))[0] == 0
        assert files[0].read_bytes() == files[1].read_bytes(), suffix
    plots = [tmp_path / f"tune{i}.svg" for i in range(2)]
    for plot in plots:
        code, _, err = run(capsys, "tune", "--topology", str(REPO / "topologies" / "ring8.yaml"), "--sizes",
                           "1KiB,1MiB", "--candidates", "ring,direct", "--jobs", "1", "-o", str(tmp_path / "t.yaml"),
                           "--plot", str(plot))  # fmt: skip
        assert code == 0, err
    assert plots[0].read_bytes() == plots[1].read_bytes() and b"<svg" in plots[0].read_bytes()


def test_plot_links_lays_a_torus_out_as_its_grid(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    wl = tmp_path / "ar16"
    assert run(capsys, "workload", "gen", "collective", "--type", "all_reduce", "--size", "1 MiB", "--npus", "16",
               "-o", str(wl))[0] == 0  # fmt: skip
    res = tmp_path / "r.json"
    assert run(capsys, "run", str(wl), "--topology", str(repo / "topologies" / "torus4x4.yaml"), "-q",
               "--json", str(res))[0] == 0  # fmt: skip
    code, text, _ = run(capsys, "plot", "links", str(res), "-o", str(tmp_path / "grid.png"))
    assert code == 0 and "(grid)" in text


def test_bad_inputs_are_one_error_line(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_result = tmp_path / "x.json"
    not_result.write_text('{"traceEvents": []}')
    not_json = tmp_path / "y.json"
    not_json.write_text("{")
    binary = tmp_path / "z.json"
    binary.write_bytes(b"\xff\xfe")
    cases = [
        (("report", str(not_result)), "not an etsim result"),
        (("report", str(not_json)), "not a result JSON: invalid JSON"),
        (("report", str(binary)), "not UTF-8"),
        (("report", str(tmp_path / "missing.json")), "cannot read"),
        (("report", str(not_result), "--format", "text", "--table", "ranks"), "--table goes with"),
        (("plot", "timeline", str(not_json), "-o", str(tmp_path / "o.png")), "not a trace: invalid JSON"),
        (("plot", "timeline", str(not_result), "-o", str(tmp_path / "o.png")), "no slices"),
        (("plot", "links", str(not_result), "-o", str(tmp_path / "o.png")), "not an etsim result"),
    ]
    workload = str(repo / "workloads" / "allreduce_8npus_1MiB")
    cases.append((("run", workload, "--trace", str(tmp_path / "t.json"), "--trace-limit", "0"), "--trace-limit must"))
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and lines[0].startswith("etsim: error:") and message in lines[0], argv


def test_trace_limit_warns_on_stderr(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.json"
    code, _, err = run(
        capsys, "run", str(repo / "workloads" / "allreduce_8npus_1MiB"), "--trace", str(trace), "--trace-limit", "10"
    )
    assert code == 0 and "etsim: warning:" in err and "trace cut at" in err
    assert json.loads(trace.read_text())["otherData"]["truncated"] is True


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["links"][0].__setitem__("bytes", "many"), r"links\[0\].bytes: expected a finite number"),
        (lambda d: d.__setitem__("links", {"a": 1}), r"links: expected a list"),
        (lambda d: d.__setitem__("groups", [1, 2]), r"groups\[0\]: expected an object"),
        (lambda d: d.__setitem__("critical_path", {"end": {}, "nodes": []}), r"critical_path.totals: expected"),
        (lambda d: d.__setitem__("finish_ns", float("inf")), r"finish_ns: expected a finite number, got inf"),
        (lambda d: d["ranks"][0].__setitem__("finish_ns", float("nan")), r"ranks\[0\].finish_ns: .* got nan"),
    ],
)
def test_a_hand_edited_result_is_named_not_a_traceback(tmp_path: Path, capsys, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.json"
    assert main([str(REPO / "workloads" / "allreduce_8npus_1MiB"), "--json", str(out), "-q"]) == 0
    data = json.loads(out.read_text())
    edit(data)
    out.write_text(json.dumps(data))
    for argv in (["report", str(out)], ["report", str(out), "--format", "markdown"],
                 ["plot", "links", str(out), "-o", str(tmp_path / "l.png")]):  # fmt: skip
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert re.search(rf"r.json: not an etsim result: {message}", err), err


def test_a_trace_is_named_as_one(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    trace = tmp_path / "t.json.gz"
    assert main([str(REPO / "workloads" / "allreduce_8npus_1MiB"), "--trace", str(trace), "-q"]) == 0
    capsys.readouterr()
    assert main(["plot", "links", str(trace), "-o", str(tmp_path / "l.png")]) == 1
    assert "this is a gzipped trace (etsim run --trace), not an etsim result" in capsys.readouterr().err


def test_table_alone_means_markdown(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r.json"
    assert main([str(REPO / "workloads" / "allreduce_8npus_1MiB"), "--json", str(out), "-q"]) == 0
    capsys.readouterr()
    assert main(["report", str(out), "--table", "summary"]) == 0
    assert capsys.readouterr().out.startswith("### summary")
