"""The worked examples in docs/ run and give the numbers the docs state."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.chakra import TraceBuilder, Workload, load_workload
from etsim.errors import EtsimWarning, RegistryError, TopologyError
from etsim.network import NETWORK_MODELS, load_network
from etsim.registry import PLUGINS_ENV
from etsim.simulation import simulate


def test_processing_switch_example(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TopologyError, match=r"switch8_processing.yaml: network.model: .* is a plug-in"):
        load_network(repo / "docs" / "examples" / "switch8_processing.yaml")  # a file's plug-in needs the user's say
    monkeypatch.setenv(PLUGINS_ENV, "1")  # as --allow-plugins does
    net = load_network(repo / "docs" / "examples" / "switch8_processing.yaml")
    assert net.model.endswith("processing_switch.py:ProcessingSwitchNetwork")
    assert net.options == {"processing": "200 ns"}
    result = simulate(load_workload(repo / "workloads" / "sendrecv_ring_8npus_1MiB"), topology=net)
    assert result.finish_ns == pytest.approx(2 * (500 + (1 << 20) / 50) + 200, rel=1e-12)
    assert f"{result.finish_ns / 1000:.5f}" == "43.14304"  # the number docs/extending-network.md quotes
    # Two senders to one NPU queue on the switch -> NPU link: the second arrives S/B later.
    a, b, c = TraceBuilder(), TraceBuilder(), TraceBuilder()
    a.send(dst=2, size=50_000, tag=0)
    b.send(dst=2, size=50_000, tag=1)
    r = c.recv(src=0, size=50_000, tag=0)
    c.recv(src=1, size=50_000, tag=1, deps=[r])
    with pytest.warns(EtsimWarning, match="NPUs 3..7 stay idle"):
        result = simulate(Workload([x.build(rank=i) for i, x in enumerate((a, b, c))]), topology=net)
    one = 500 + 50_000 / 50
    assert result.ranks[2].finish_ns == pytest.approx(2 * one + 200 + 50_000 / 50, rel=1e-12)


@pytest.mark.usefixtures("plugins_allowed")
def test_file_plugins_report_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="no such file"):
        NETWORK_MODELS.get(str(tmp_path / "missing.py") + ":Model")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RegistryError, match="failed to import: RuntimeError: boom"):
        NETWORK_MODELS.get(str(tmp_path / "broken.py") + ":Model")
    (tmp_path / "net.yaml").write_text(
        "kind: ring\nnpus: 4\nbandwidth: 1 GB/s\nlatency: 1 ns\nnetwork: {model: nope.py:X}\n"
    )
    with pytest.raises(TopologyError, match=r"net.yaml: network.model: .*no such file"):
        load_network(tmp_path / "net.yaml")


@pytest.mark.parametrize(
    ("topology", "tuned", "singles"),
    [
        ("ring4_switch4", 1.23451, {"ring": 2.15005, "direct": 1.80478, "tree": 3.09995, "hd": 1.88414,
                                    "hierarchical": 1.32434, "tacos": 1.41855}),
        ("ring16", 2.51981, {"ring": 3.39417, "direct": 4.87734, "tree": 11.0009, "hd": 9.58539,
                             "hierarchical": 3.39417, "tacos": None}),
    ],
)  # fmt: skip
def test_tuning_moe_example(repo: Path, tmp_path: Path, topology: str, tuned: float, singles: dict) -> None:  # type: ignore[type-arg]
    """docs/tuning.md's table: the tuned table beats every single algorithm on the shipped MoE workload."""
    from etsim.system.config import load_system_config
    from etsim.tuning import TuneRequest, csv_text, tune
    from etsim.tuning.tune import base_settings, compare_workload

    examples = repo / "docs" / "examples"
    base = examples / "comm_stream_per_group.yaml"
    shipped = examples / f"moe_tuned_{topology}.yaml"
    request = TuneRequest(
        topology=f"topologies/{topology}.yaml",
        candidates=list(singles),
        workload="workloads/moe_16npus_2layers",
        system=load_system_config(base),
        settings=base_settings(base),
        output=f"docs/examples/moe_tuned_{topology}.yaml",
    )
    import os

    cwd = os.getcwd()
    os.chdir(repo)
    try:
        result = tune(request, jobs=1)
        assert result.table_text == shipped.read_text()  # the shipped table is what the command writes
        assert csv_text(result.measurements, result.tuned) == shipped.with_suffix(".csv").read_text()
        comparison = compare_workload(request, load_system_config(shipped), jobs=1)
    finally:
        os.chdir(cwd)
    times = {getattr(m.point, "label", ""): m.time_ns for m in comparison}
    doc = (repo / "docs" / "tuning.md").read_text()  # the figures checked here are the ones the doc's table quotes
    assert f"**{tuned:.6g} ms**" in doc and all(f"{v:.6g} ms" in doc for v in singles.values() if v is not None)
    assert f"{times.pop('tuned table') / 1e6:.6g}" == f"{tuned:.6g}"
    for label, expected in singles.items():
        got = times[label]
        assert (got is None) == (expected is None), label
        if got is not None:
            assert f"{got / 1e6:.6g}" == f"{expected:.6g}", label
            assert got > tuned * 1e6
