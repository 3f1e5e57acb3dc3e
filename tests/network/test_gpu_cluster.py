"""``kind: gpu_cluster``: an NVSwitch per node and one rail per local GPU, from presets or explicit fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from etsim.errors import TopologyError
from etsim.network import load_network
from etsim.network.builders import build_topology
from etsim.network.kinds.gpu_cluster import PRESETS
from etsim.system.config import load_system_config


def test_the_dgx_a100_preset_is_an_nvswitch_node_dimension_and_a_rail_dimension() -> None:
    topo = build_topology({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 64}, "selene")
    assert [(d.kind, d.npus) for d in topo.dims] == [("switch", 8), ("switch", 8)]
    nvlink, rail = topo.dims
    assert nvlink.bandwidth == 300.0 and rail.bandwidth == 25.0  # bytes per ns: 300 GB/s NVLink, 200 Gb/s HDR
    # NIC at each end and five switch hops of a 3-level fat tree, over the two links of a switch route.
    assert 2 * rail.latency == 2 * 1000 + 5 * 130
    assert topo.npus == 64


def test_fields_override_the_preset_and_oversubscription_divides_the_fabric_bandwidth() -> None:
    topo = build_topology(
        {"kind": "gpu_cluster", "preset": "dgx-h100", "gpus": 32, "gpus_per_node": 4, "oversubscription": 2,
         "nics_per_gpu": 2, "nic_bandwidth": "25 GB/s", "fabric_levels": 2},
        None,
    )  # fmt: skip
    nvlink, rail = topo.dims
    assert (nvlink.npus, rail.npus) == (4, 8)
    assert nvlink.bandwidth == 450.0 and rail.bandwidth == 25.0 * 2 / 2
    assert 2 * rail.latency == 2 * 1000 + 3 * 130


@pytest.mark.parametrize(
    ("keys", "link", "how"),
    [
        ({"nics_per_gpu": 2}, 64.0, "an x16 link of its generation"),  # 2 × 400G on an H100's Gen5 x16 (NCCL: 48)
        ({"pcie_bandwidth": "10 GB/s"}, 10.0, "pcie_bandwidth"),
    ],
)
def test_a_rail_runs_at_most_at_the_gpus_pcie_link(keys, link, how) -> None:
    """A GPU's fabric traffic crosses its PCIe link to the NIC: the rail (before oversubscription) and the NICs the
    collective runtime sees are capped there, with a warning."""
    from etsim.errors import EtsimWarning

    data = {"kind": "gpu_cluster", "preset": "dgx-h100", "gpus": 16, "oversubscription": 2, **keys}
    with pytest.warns(EtsimWarning, match=rf"more than its PCIe link carries \({link:g} GB/s, {how}\)"):
        topo = build_topology(data, None)
    assert topo.dims[1].bandwidth == link / 2
    hardware = topo.hardware
    assert hardware.nic_bandwidth * hardware.nics_per_node / hardware.gpus_per_node == link


def test_a_single_node_has_only_its_nvswitch() -> None:
    topo = build_topology({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 8}, None)
    assert [(d.kind, d.npus) for d in topo.dims] == [("switch", 8)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"preset": "dgx-a100", "gpus": 12}, "not a whole number of nodes"),
        ({"preset": "tpu-v4", "gpus": 8}, "unknown GPU cluster 'tpu-v4'"),
        ({"gpus": 8}, "missing"),
        ({"preset": "dgx-a100", "gpus": 16, "oversubscription": 0.5}, "oversubscription"),
        ({"preset": "dgx-a100", "gpus": 16, "oversubscription": float("inf")}, "oversubscription: expected a finite"),
        ({"preset": "dgx-a100", "gpus": 16, "oversubscription": float("nan")}, "oversubscription: expected a finite"),
        ({"preset": "dgx-a100", "gpus": 16, "rails": 2}, "unknown key"),
        ({"preset": "dgx-a100", "gpus": 16, "nic_bandwidth": "fast"}, "nic_bandwidth"),
    ],
)
def test_bad_fields_are_named(data: dict[str, object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        build_topology({"kind": "gpu_cluster", **data}, None)


def test_a_file_loads_with_its_network_model(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kind: gpu_cluster\npreset: dgx-h100\ngpus: 16\nnetwork: {model: analytical}\n")
    net = load_network(str(path))
    assert net.model == "analytical" and net.topology.npus == 16


def _one_message(topology: dict[str, object], src: int, dst: int, size: int) -> float:
    from etsim.chakra.builder import TraceBuilder
    from etsim.chakra.graph import Workload
    from etsim.simulation import simulate

    traces = []
    for rank in range(int(topology["gpus"])):  # type: ignore[call-overload]
        b = TraceBuilder(rank)
        if rank == src:
            b.send(dst, size, tag=1)
        elif rank == dst:
            b.recv(src, size, tag=1)
        traces.append(b.build())
    plain = load_system_config({"nccl": {"p2p": False}})  # the network's closed form, not NCCL's ncclSend
    return simulate(Workload(traces), topology=build_topology(topology, None), model="flow", system=plain).finish_ns


def test_without_rails_a_nic_reaches_every_other_gpu_directly_and_nvlink_stays_inside_the_node() -> None:
    rails = {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16}
    fabric = {**rails, "rail_optimised": False}
    topo = build_topology(fabric, None)
    assert topo.kind == "graph" and not topo.dims
    size = 25_000_000  # 1 ms at a 25 GB/s NIC
    between_nodes = 2 * 1000 + 5 * 130  # NIC at each end, five switch hops
    # GPU 3 to GPU 11 (same local index): the same on both fabrics.
    assert _one_message(fabric, 3, 11, size) == _one_message(rails, 3, 11, size) == 1_000_000 + between_nodes
    # GPU 3 to GPU 8 (local 0 of the next node): rails cross NVLink first (PXN), the fabric does not.
    assert _one_message(fabric, 3, 8, size) == 1_000_000 + between_nodes
    assert _one_message(rails, 3, 8, size) == 1_000_000 + between_nodes + 700
    # Inside a node both use the NVSwitch: 300 GB/s, 700 ns.
    assert _one_message(fabric, 3, 5, size) == _one_message(rails, 3, 5, size) == size / 300 + 700
    # Nodes of direct NVLink links (Polaris' 4 A100s) keep them without rails: the fabric's graph gave them an
    # NVSwitch at the GPU's whole NVLink rate (2.1x faster inside the node than with rails).
    polaris = {"kind": "gpu_cluster", "preset": "polaris", "gpus": 8}
    unrailed = {**polaris, "rail_optimised": False}
    assert _one_message(unrailed, 1, 2, size) == _one_message(polaris, 1, 2, size) == size / (300 / 3) + 700


def test_rail_optimised_must_be_a_boolean() -> None:
    with pytest.raises(TopologyError, match="rail_optimised: expected true or false, got 'no'"):
        build_topology({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16, "rail_optimised": "no"}, None)


def test_a_cluster_describes_its_hardware_for_runtimes() -> None:
    topo = build_topology({"kind": "gpu_cluster", "preset": "dgx-h100", "gpus": 16}, None)
    hw = topo.hardware
    assert hw.gpu.name == "h100" and hw.gpu.compute_capability == 90 and hw.nvls and not hw.sharp
    assert (hw.gpus_per_node, hw.nodes, hw.intra, hw.fabric.name) == (8, 2, "nvswitch", "ib")
    assert (hw.nics_per_node, hw.nic_bandwidth, hw.nvlink_bandwidth) == (8, 50.0, 450.0)
    assert (hw.node_of(9), hw.local_rank(9)) == (1, 1)
    # A100s have no NVLink SHARP; four GPUs linked directly share each GPU's NVLink over three peers.
    polaris = build_topology({"kind": "gpu_cluster", "preset": "polaris", "gpus": 8}, None)
    assert not polaris.hardware.nvls and polaris.hardware.intra == "nvlink"
    node, rail = polaris.dims
    assert (node.kind, node.npus, node.bandwidth) == ("fully_connected", 4, 100.0)
    assert rail.bandwidth == 25.0 * 2 / 4  # two 200 Gb/s NICs for four GPUs
    # EFA: four NICs for eight GPUs.
    p4d = build_topology({"kind": "gpu_cluster", "preset": "aws-p4d", "gpus": 16}, None)
    assert p4d.hardware.fabric.name == "efa" and p4d.dims[1].bandwidth == 12.5 * 4 / 8
    # Without a GPU, a cluster is a network alone.
    bare = {k: v for k, v in PRESETS["dgx-a100"].items() if k != "gpu"}
    assert build_topology({"kind": "gpu_cluster", "gpus": 8, **bare}, None).hardware is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"preset": "dgx-a100", "gpus": 8, "gpu": "tpu"}, "gpu: unknown GPU 'tpu'"),
        ({"preset": "dgx-a100", "gpus": 8, "intra": "ethernet"}, "intra: expected one of nvswitch, nvlink, pcie"),
        ({"preset": "dgx-a100", "gpus": 8, "fabric": "myrinet"}, "fabric: unknown fabric 'myrinet'"),
        ({"preset": "polaris", "gpus": 8, "nvls": True}, "NVLink SHARP reduces in an NVSwitch"),
        ({"preset": "dgx-a100", "gpus": 8, "nics_per_gpu": 1, "nics_per_node": 8}, "give one of them"),
        ({"preset": "dgx-a100", "gpus": 8, "sharp": "yes"}, "sharp: expected true or false"),
        ({"preset": "dgx-a100", "gpus": 8, "nvls": True}, "the a100's NVSwitch generation does not reduce"),
        ({"preset": "dgx-h100", "gpus": 8, "gpu": "l40s", "intra": "nvswitch"}, "which the l40s has none of"),
    ],
)
def test_bad_hardware_keys_are_named(data: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(TopologyError, match=message):
        build_topology({"kind": "gpu_cluster", **data}, None)


def test_a_gpu_without_nvlink_sits_on_pcie_at_its_own_pcie_rate() -> None:
    # An L40S in an H100 preset once kept the preset's NVSwitch (a division by zero in nccl) or its 450 GB/s links.
    topo = build_topology({"kind": "gpu_cluster", "preset": "dgx-h100", "gpu": "l40s", "gpus": 8}, None)
    assert topo.hardware.intra == "pcie" and topo.dims[0].bandwidth == topo.hardware.pcie_bandwidth == 24.0
    workstation = build_topology({"kind": "gpu_cluster", "preset": "pcie-4gpu", "gpu": "l40s", "gpus": 4}, None)
    assert workstation.dims[0].bandwidth == 24.0  # the preset's RTX 5090 runs PCIe Gen5 (48 GB/s); an L40S Gen4
    as_given = build_topology({"kind": "gpu_cluster", "preset": "pcie-4gpu", "gpus": 4}, None)
    assert as_given.dims[0].bandwidth == 48.0


def test_a_stated_link_rate_over_pcie_above_the_gpus_pcie_is_capped_with_a_warning() -> None:
    from etsim.errors import EtsimWarning

    data = {"kind": "gpu_cluster", "preset": "pcie-4gpu", "gpu": "l40s", "gpus": 4, "nvlink_bandwidth": "64 GB/s"}
    with pytest.warns(EtsimWarning, match="nvlink_bandwidth 64 GB/s: over PCIe .* its pcie_bandwidth, 24 GB/s"):
        topo = build_topology(data, None)
    assert topo.dims[0].bandwidth == 24.0
