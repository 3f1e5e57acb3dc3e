"""Several jobs on one cluster: closed forms of shared links, stragglers and faults, and each job's view."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from etsim.chakra import CollectiveType, TraceBuilder, Workload, write_workload
from etsim.cluster import load_cluster, run_cluster
from etsim.errors import ConfigError, EtsimWarning
from etsim.producers import collective_workload

S = 8 * 2**20  # bytes of one message
B = 50.0  # bytes per ns (50 GB/s)
LAT = 500.0  # ns per link

#: Two islands of four NPUs, each on its switch, and one spine link between the switches.
TWO_SWITCHES = {
    "kind": "graph",
    "npus": 8,
    "switches": 2,
    "bandwidth": "50 GB/s",
    "latency": "500 ns",
    "links": [{"src": r, "dst": "s0" if r < 4 else "s1"} for r in range(8)] + [{"src": "s0", "dst": "s1"}],
}
RING8 = {"kind": "ring", "npus": 8, "bandwidth": "50 GB/s", "latency": "500 ns"}


def _cluster(tmp_path: Path, **keys: Any) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(keys, sort_keys=False))
    return path


def _sendrecv(gpus: list[int], name: str) -> dict[str, Any]:
    """Two ranks exchanging one message each way."""
    return {"name": name, "workload": {"generate": "sendrecv", "npus": 2, "size": S}, "placement": gpus}


def _all_reduce(name: str, npus: int, size: str, placement: Any = "packed") -> dict[str, Any]:
    workload = {"generate": "collective", "type": "all_reduce", "npus": npus, "size": size}
    return {"name": name, "workload": workload, "placement": placement}


def test_two_identical_flows_of_two_jobs_on_one_link_each_get_half_of_it(tmp_path) -> None:
    """Jobs a (GPUs 0, 4) and b (1, 5) both cross the spine: each message takes 3 hops and S at B/2."""
    jobs = [_sendrecv([0, 4], "a"), _sendrecv([1, 5], "b")]
    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs)
    result = run_cluster(load_cluster(path), alone=True)
    for job in result.jobs:
        assert job.alone_ns == pytest.approx(3 * LAT + S / B, abs=1e-6)
        assert job.duration_ns == pytest.approx(3 * LAT + 2 * S / B, abs=1e-6)
        assert job.slowdown == pytest.approx((3 * LAT + 2 * S / B) / (3 * LAT + S / B))
    spine = [entry for entry in result.shared_links if {entry["src"], entry["dst"]} == {"s0", "s1"}]
    assert len(spine) == 2 and len(result.shared_links) == 2  # both directions of the spine, nothing else
    for entry in spine:
        assert entry["jobs"]["a"]["bytes"] == entry["jobs"]["b"]["bytes"] == S


def test_jobs_that_share_no_link_take_exactly_their_alone_time(tmp_path) -> None:
    """Each job on its own island: no link in common, so each finishes as if alone."""
    jobs = [_all_reduce("a", 4, "16 MiB", [0, 1, 2, 3]), _all_reduce("b", 4, "4 MiB", [4, 5, 6, 7])]
    result = run_cluster(load_cluster(_cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs)), alone=True)
    assert result.shared_links == []
    assert [job.duration_ns for job in result.jobs] == [job.alone_ns for job in result.jobs]
    assert [job.slowdown for job in result.jobs] == [1.0, 1.0]
    assert result.jobs[0].duration_ns > result.jobs[1].duration_ns  # (they are different jobs)


def test_jobs_that_share_the_spine_are_slowed_and_the_shared_links_say_by_whom(tmp_path) -> None:
    jobs = [_all_reduce("a", 4, "64 MiB", [0, 1, 4, 5]), _all_reduce("b", 4, "64 MiB", [2, 3, 6, 7])]
    result = run_cluster(load_cluster(_cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs)), alone=True)
    assert all(job.slowdown > 1.5 for job in result.jobs)
    assert {(e["src"], e["dst"]) for e in result.shared_links} == {("s0", "s1"), ("s1", "s0")}
    for entry in result.shared_links:
        assert set(entry["jobs"]) == {"a", "b"}
    # Each job's links carry its own traffic only; the spine entries add up to what the run measured there.
    spine = next(e for e in result.result.links if (e["src"], e["dst"]) == ("s0", "s1"))
    mine = [next(e for e in job.result.links if e["link"] == spine["link"]) for job in result.jobs]
    assert sum(e["bytes"] for e in mine) == spine["bytes"]
    assert sum(e["messages"] for e in mine) == spine["messages"]


@pytest.mark.parametrize("kind", ["all_reduce", "training"])
def test_a_job_alone_in_a_cluster_file_gives_what_etsim_run_gives(tmp_path, kind) -> None:
    """Byte for byte, but for the wall time: the job's result JSON is `etsim run --json`'s (step report included)."""
    from etsim.producers.workloads import generate

    if kind == "all_reduce":
        workload, topology = Workload(collective_workload(CollectiveType.ALL_REDUCE, 4 << 20, 8)), RING8
    else:
        job = {"generate": "transformer", "model": "megatron-1.7b", "global_batch": 4, "micro_batch": 2, "tp": 2}
        workload = Workload(generate({**job, "pp": 2}))
        topology = {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 4, "gpus_per_node": 4}
    write_workload(workload, tmp_path / "w" / "w")
    topo = tmp_path / "topo.yaml"
    topo.write_text(yaml.safe_dump(topology))
    path = _cluster(tmp_path, topology=str(topo), model="flow", jobs=[{"name": "solo", "workload": "w/w"}])
    run = [sys.executable, "-m", "etsim"]
    ran = subprocess.run([*run, "run", str(tmp_path / "w" / "w"), "--topology", str(topo), "--model", "flow",
                          "--json", "-"], capture_output=True, text=True, check=True)  # fmt: skip
    clustered = subprocess.run(
        [*run, "cluster", "run", str(path), "--json", "-"], capture_output=True, text=True, check=True
    )
    alone, job_result = json.loads(ran.stdout), json.loads(clustered.stdout)["jobs"][0]["result"]
    del alone["sim"]["wall_s"], job_result["sim"]["wall_s"]
    assert json.dumps(job_result, sort_keys=True) == json.dumps(alone, sort_keys=True)
    assert (job_result.get("training") is not None) == (kind == "training")


def test_a_job_that_starts_later_finishes_later_by_its_start(tmp_path) -> None:
    jobs = [_sendrecv([0, 4], "a"), {**_sendrecv([1, 5], "b"), "start": "1 ms"}]
    result = run_cluster(load_cluster(_cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs)))
    a, b = result.jobs
    for job in (a, b):  # a was done before b began: each ran at the spine's full rate
        assert job.duration_ns == pytest.approx(3 * LAT + S / B, abs=1e-6)
    assert b.start_ns == 1e6 and b.finish_ns == pytest.approx(1e6 + 3 * LAT + S / B, abs=1e-6)
    assert len(result.shared_links) == 2  # both used the spine (one after the other): the table says so


def test_a_straggler_delays_its_job_by_exactly_its_extra_compute_under_analytical(tmp_path) -> None:
    """Every rank computes 10 µs, then all-reduces: GPU 2 at 1.5x delays the job's finish by exactly 5 µs."""
    traces = []
    for rank in range(4):
        b = TraceBuilder(rank)
        b.collective(CollectiveType.ALL_REDUCE, 1 << 20, deps=[b.comp("c", duration_micros=10)])
        traces.append(b.build(rank=rank))
    write_workload(Workload(traces), tmp_path / "job" / "job")
    jobs = [
        {"name": "j", "workload": "job/job", "placement": [4, 5, 6, 7]},
        _all_reduce("other", 4, "1 MiB", [0, 1, 2, 3]),
    ]
    keys = {"topology": RING8, "model": "analytical", "jobs": jobs}
    healthy = run_cluster(load_cluster(_cluster(tmp_path, **keys)))
    slow = run_cluster(load_cluster(_cluster(tmp_path, **keys, stragglers=[{"gpus": [6], "slowdown": 1.5}])))
    assert slow.jobs[0].finish_ns == pytest.approx(healthy.jobs[0].finish_ns + 5_000, abs=1e-6)
    assert slow.jobs[0].result.ranks[2].compute_ns == 15_000  # job rank 2 runs on GPU 6
    assert slow.jobs[1].finish_ns == healthy.jobs[1].finish_ns  # the other job has no straggler
    delayed = run_cluster(load_cluster(_cluster(tmp_path, **keys, stragglers=[{"gpus": [6], "delay": "3 us"}])))
    assert delayed.jobs[0].finish_ns == pytest.approx(healthy.jobs[0].finish_ns + 3_000, abs=1e-6)  # extra per op
    windowed = [{"gpus": [6], "slowdown": 1.5, "from": "20 us"}]  # after the compute: changes nothing
    assert run_cluster(load_cluster(_cluster(tmp_path, **keys, stragglers=windowed))).jobs[0].finish_ns == (
        healthy.jobs[0].finish_ns
    )


def test_every_ring_link_at_half_bandwidth_doubles_the_bandwidth_term_of_a_ring_all_reduce(tmp_path) -> None:
    """2(n-1) steps of S/n bytes: at B/2 the all-reduce takes 2(n-1)·S/(nB) longer; one slow link lands between."""
    size, n = 64 * 2**20, 8
    job = [_all_reduce("ar", n, "64 MiB")]

    def duration(faults: list[dict[str, Any]]) -> float:
        path = _cluster(tmp_path, topology=RING8, model="flow", jobs=job, faults=faults)
        return run_cluster(load_cluster(path)).jobs[0].duration_ns

    healthy = duration([])
    all_half = duration([{"link": [i, (i + 1) % n], "bandwidth": "50%"} for i in range(n)])
    one_half = duration([{"link": [0, 1], "bandwidth": 0.5}])
    assert all_half - healthy == pytest.approx(2 * (n - 1) * size / n / B, abs=1e-6)
    assert healthy < one_half <= all_half


def test_a_failed_torus_link_is_routed_around_and_costs_the_detour(tmp_path) -> None:
    """0 -> 1 on a 4x4 torus with link 0-1 failed: three hops (around a square) instead of one."""
    torus = {"kind": "torus", "shape": [4, 4], "bandwidth": "50 GB/s", "latency": "500 ns"}
    jobs = [_sendrecv([0, 1], "a")]
    healthy = run_cluster(load_cluster(_cluster(tmp_path, topology=torus, model="flow", jobs=jobs)))
    failed = run_cluster(
        load_cluster(
            _cluster(tmp_path, topology=torus, model="flow", jobs=jobs, faults=[{"link": [0, 1], "bandwidth": "0%"}])
        )
    )
    assert healthy.jobs[0].duration_ns == pytest.approx(LAT + S / B, abs=1e-6)
    assert failed.jobs[0].duration_ns == pytest.approx(3 * LAT + S / B, abs=1e-6)


def test_the_result_is_deterministic(tmp_path) -> None:
    jobs = [_all_reduce("a", 4, "1 MiB", {"random": 3}), _all_reduce("b", 4, "1 MiB", "spread")]
    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs)
    first, second = (json.loads(run_cluster(load_cluster(path)).to_json()) for _ in range(2))
    del first["sim"]["wall_s"], second["sim"]["wall_s"]
    for doc in (first, second):
        for job in doc["jobs"]:
            del job["result"]["sim"]["wall_s"]
    assert json.dumps(first) == json.dumps(second)


TORUS = {"kind": "torus", "shape": [4, 4], "bandwidth": "50 GB/s", "latency": "500 ns"}


@pytest.mark.parametrize(
    ("share", "expected"),
    [
        # 100 µs at B, then the rest at B/2; delivered L after the last byte.
        ("50%", 100_000 + (S - 100_000 * B) / (B / 2) + LAT),
        # Re-routed at 100 µs around the failed link: the rest at B over three hops.
        ("0%", 100_000 + (S - 100_000 * B) / B + 3 * LAT),
    ],
)
def test_a_link_that_degrades_or_fails_in_flight_reshares_or_reroutes_the_message(tmp_path, share, expected) -> None:
    fault = {"link": [0, 1], "at": "100 us", "bandwidth": share}
    path = _cluster(tmp_path, topology=TORUS, model="flow", jobs=[_sendrecv([0, 1], "a")], faults=[fault])
    result = run_cluster(load_cluster(path), fault_costs=True)  # (one job: its links are the run's, detours too)
    assert result.jobs[0].duration_ns == pytest.approx(expected, abs=1e-6)
    assert result.faults[0]["cost_ns"]["a"] == pytest.approx(expected - (LAT + S / B), abs=1e-6)
    if share == "50%":  # the link's busy time counts its bytes at the rate of each period: its whole transfer
        (link,) = [e for e in result.jobs[0].result.links if (e["src"], e["dst"]) == (0, 1)]
        assert link["busy_ns"] == pytest.approx(expected - LAT, abs=1e-6) and link["utilisation"] < 1


def test_a_fault_can_speed_up_another_job_and_the_table_says_why(tmp_path) -> None:
    """a (0 <-> 4) and b (1 <-> 5) share the spine at B/2 each; b's access link at 25% from 1 ns holds b to B/4, so a
    gets 3B/4 of the spine: a finishes sooner with the fault, a negative cost the table explains."""
    fault = {"link": [1, "s0"], "at": "1 ns", "bandwidth": "25%"}
    jobs = [_sendrecv([0, 4], "a"), _sendrecv([1, 5], "b")]
    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs, faults=[fault])
    result = run_cluster(load_cluster(path), fault_costs=True)
    with_fault = 1 + (S - B / 2) / (3 * B / 4) + 3 * LAT
    assert result.job("a").duration_ns == pytest.approx(with_fault, abs=1e-6)
    cost = result.faults[0]["cost_ns"]["a"]
    assert cost == pytest.approx(with_fault - (3 * LAT + 2 * S / B), abs=1e-6) and cost < 0
    assert "a negative cost: that job finished sooner with the fault" in result.table()


def test_a_link_that_recovers_carries_the_messages_sent_after(tmp_path) -> None:
    """Link 0-1 down from 1 ns to 2 ns: the first of two messages 0 -> 1, in flight then, goes around it; the second,
    sent when the first is received, takes the link again."""
    sender, receiver = TraceBuilder(0), TraceBuilder(1)
    sender.send(1, S, 1, deps=[sender.send(1, S, 0)])
    receiver.recv(0, S, 1, deps=[receiver.recv(0, S, 0)])
    write_workload(Workload([sender.build(rank=0), receiver.build(rank=1)]), tmp_path / "two" / "two")
    faults = [{"link": [0, 1], "at": "1 ns", "bandwidth": "0%"}, {"link": [0, 1], "at": "2 ns", "bandwidth": "100%"}]
    jobs = [{"name": "a", "workload": "two/two", "placement": [0, 1]}]
    result = run_cluster(load_cluster(_cluster(tmp_path, topology=TORUS, model="flow", jobs=jobs, faults=faults)))
    first = 1 + (S - B) / B + 3 * LAT  # re-routed at 1 ns
    assert result.jobs[0].duration_ns == pytest.approx(first + LAT + S / B, abs=1e-6)


def test_a_message_whose_route_fails_with_no_other_is_reported(tmp_path, capsys) -> None:
    from etsim.cli import main

    ring4 = {"kind": "ring", "npus": 4, "bandwidth": "50 GB/s", "latency": "500 ns"}
    faults = [{"link": [0, 1], "at": "100 us", "bandwidth": "0%"}, {"link": [2, 3], "at": "100 us", "bandwidth": "0%"}]
    path = _cluster(tmp_path, topology=ring4, model="flow", jobs=[_sendrecv([0, 1], "a")], faults=faults)
    assert main(["cluster", "run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "at t = 100000.0 ns a message from NPU 0 to NPU 1 was in flight with 3388608 bytes left" in err
    assert "no path from NPU 0 to NPU 1 while link(s) 0->1, 1->0, 2->3, 3->2 are down" in err
    path = _cluster(tmp_path, topology=ring4, model="analytical", jobs=[_sendrecv([0, 1], "a")], faults=faults)
    assert main(["cluster", "run", str(path)]) == 1
    assert "network model 'analytical' does not model links changing during a run" in capsys.readouterr().err


def test_each_training_job_gets_its_own_step_report(tmp_path) -> None:
    """Two 4-GPU training jobs in one 8-GPU node (no shared link): each one's report is what it gets alone there."""
    node = {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 8}
    workload = {"generate": "transformer", "model": "megatron-1.7b", "global_batch": 4, "micro_batch": 2, "tp": 2}
    workload["pp"] = 2
    both = [{"name": "a", "workload": workload}, {"name": "b", "workload": workload}]
    keys = {"topology": node, "model": "flow", "system": {"resources": {"comm_streams": 0}}}
    together = run_cluster(load_cluster(_cluster(tmp_path, **keys, jobs=both)))
    alone = run_cluster(load_cluster(_cluster(tmp_path, **keys, jobs=both[:1])))
    a, b = (job.result.training for job in together.jobs)
    assert a is not None and b is not None
    assert together.shared_links == []
    assert a["iteration_ns"] == together.jobs[0].duration_ns
    assert a["exposed_comm_ns"]["tp"] > 0 and a["exposed_comm_ns"]["pp"] > 0  # its own groups, found by their roles
    assert a == b == alone.jobs[0].result.training
    assert "job a:" in together.table() and "iteration" in together.table()


def test_the_timeline_shows_each_job_as_its_own_processes(tmp_path) -> None:
    jobs = [_all_reduce("a", 4, "1 MiB", [0, 1, 4, 5]), _all_reduce("b", 4, "1 MiB", [2, 3, 6, 7])]
    out = tmp_path / "t.json"
    run_cluster(load_cluster(_cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs)), trace=out)
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert names[4] == "job a · rank 2 (GPU 4)" and names[2] == "job b · rank 0 (GPU 2)"
    assert sorted(names, key=order.__getitem__) == [0, 1, 4, 5, 2, 3, 6, 7]  # a job's processes together
    assert any(e.get("ph") == "X" and e["pid"] == 6 for e in events)  # job b's work is on the timeline


def test_a_gpu_that_fails_stops_its_job_and_says_what_was_lost(tmp_path) -> None:
    dp = {"generate": "dp", "npus": 4, "layers": 4, "grad_size": "64 MiB", "fwd_us": 200, "bwd_us": 200}
    jobs = [
        {"name": "a", "workload": dp, "placement": [0, 1, 4, 5]},
        {"name": "b", "workload": dp, "placement": [2, 3, 6, 7]},
    ]
    keys = {"topology": TWO_SWITCHES, "model": "flow", "jobs": jobs}
    healthy = run_cluster(load_cluster(_cluster(tmp_path, **keys)))
    result = run_cluster(load_cluster(_cluster(tmp_path, **keys, faults=[{"gpu": 5, "at": "3 ms"}])), fault_costs=True)
    a, b = result.jobs
    assert a.finish_ns == 3e6 and a.lost == {
        "gpu": 5,
        "at_ns": 3e6,
        "step_ns": 3e6,
        "gpu_ns": 12e6,
        "collectives_done": 0,
    }
    assert a.slowdown is None
    assert result.result.sim["failed"] == {str(g): 3e6 for g in (0, 1, 4, 5)}
    # b no longer shares the spine once a's traffic has drained: it finishes sooner than beside a healthy a.
    assert b.lost is None and b.duration_ns < healthy.jobs[1].duration_ns
    assert result.faults == [
        {"at_ns": 3e6, "gpu": 5, "job": "a", "cost_ns": {"a": None, "b": b.duration_ns - healthy.jobs[1].duration_ns}}
    ]
    assert "job a stopped at 3 ms: GPU 5 failed; its step is lost" in result.table()
    assert result.table().splitlines()[0].endswith("; stopped by a failed GPU: a")


def test_a_nic_fault_degrades_the_gpus_links_to_the_fabric(tmp_path) -> None:
    """GPU 3 and GPU 11 (same rail, two nodes) exchange S: with GPU 3's NIC at half rate, S takes S/B_nic longer."""
    from etsim.cluster.settings import fabric_links as _fabric_links
    from etsim.network import load_network

    dgx = {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16}
    topo = load_network(dgx).topology
    (nic,) = _fabric_links(topo, 3, "nic")
    rate = topo.bandwidths[topo.link_ids[nic]]
    assert nic[0] == 3 and rate == 25.0  # one 200 Gb/s HDR NIC per A100
    jobs = [{**_sendrecv([3, 11], "x"), "system": {"algorithms": {"default": "ring"}}}]
    healthy = run_cluster(load_cluster(_cluster(tmp_path, topology=dgx, model="flow", jobs=jobs)))
    slow = run_cluster(
        load_cluster(_cluster(tmp_path, topology=dgx, model="flow", jobs=jobs, faults=[{"nic": 3, "bandwidth": "50%"}]))
    )
    assert slow.jobs[0].duration_ns - healthy.jobs[0].duration_ns == pytest.approx(S / rate, abs=1e-6)
    assert slow.faults == [{"at_ns": 0.0, "nic": 3, "bandwidth": 0.5}]
    with pytest.raises(ConfigError, match=r"faults\[0\]\.nic: GPU 3 has no link to a switch that reaches other nodes"):
        node = {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 8}
        run_cluster(load_cluster(_cluster(tmp_path, topology=node, model="flow", jobs=jobs[:1], faults=[{"nic": 3}])))
    # On a leaf-spine the NIC is the link to the leaf, which reaches the other leaves through the spines (it was
    # refused: a leaf links no other leaf's GPU directly).
    leaf_spine = str(Path(__file__).resolve().parents[2] / "topologies" / "leaf_spine16.yaml")
    assert _fabric_links(load_network(leaf_spine).topology, 9, "nic") == [(9, "s2")]  # (its leaf)


def test_jobs_may_run_their_collectives_with_different_algorithms(tmp_path) -> None:
    """Job a's all-reduces run as a ring, job b's as direct (its own `algorithms`), each as it would alone."""
    a = {**_all_reduce("a", 4, "4 MiB", [0, 1, 2, 3]), "system": {"algorithms": {"all_reduce": "ring"}}}
    b = {**_all_reduce("b", 4, "4 MiB", [4, 5, 6, 7]), "system": {"algorithms": [{"default": "direct"}]}}
    keys = {"topology": TWO_SWITCHES, "model": "flow", "system": {"algorithms": {"default": "halving_doubling"}}}
    result = run_cluster(load_cluster(_cluster(tmp_path, **keys, jobs=[a, b])), alone=True)
    assert {c.algorithm for c in result.jobs[0].result.collectives} == {"ring"}
    assert {c.algorithm for c in result.jobs[1].result.collectives} == {"direct"}
    assert [job.slowdown for job in result.jobs] == [1.0, 1.0]  # (alone, each keeps its own algorithm)
    third = _all_reduce("c", 4, "4 MiB", [8, 9, 10, 11])  # (no algorithms of its own: the cluster's)
    sixteen = {**TWO_SWITCHES, "npus": 16, "links": [{"src": r, "dst": "s0" if r < 8 else "s1"} for r in range(16)]}
    sixteen["links"].append({"src": "s0", "dst": "s1"})
    more = run_cluster(load_cluster(_cluster(tmp_path, **{**keys, "topology": sixteen}, jobs=[a, b, third])))
    assert {c.algorithm for c in more.jobs[2].result.collectives} == {"halving_doubling"}


def test_a_job_whose_send_names_a_rank_it_lacks_is_refused_by_name(tmp_path, capsys) -> None:
    from etsim.cli import main

    sender, receiver = TraceBuilder(0), TraceBuilder(1)
    sender.send(5, S)
    receiver.recv(0, S)
    write_workload(Workload([sender.build(rank=0), receiver.build(rank=1)]), tmp_path / "bad" / "bad")
    path = _cluster(tmp_path, topology=TWO_SWITCHES, jobs=[{"name": "x", "workload": "bad/bad", "placement": [0, 4]}])
    assert main(["cluster", "run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "job 'x':" in err and "sends to rank 5, but the job has 2 ranks" in err and err.count("\n") == 1


def test_etsim_report_on_a_cluster_result_says_where_the_jobs_results_are(tmp_path, capsys) -> None:
    from etsim.cli import main

    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=[_sendrecv([0, 4], "a")])
    out = tmp_path / "c.json"
    assert main(["cluster", "run", str(path), "--json", str(out)]) == 0
    capsys.readouterr()
    assert main(["report", str(out)]) == 1
    assert "a cluster's result (etsim cluster run), not one run's: each job's is under jobs[i].result" in (
        capsys.readouterr().err
    )


def test_a_straggler_on_a_gpu_no_job_runs_on_is_warned(tmp_path) -> None:
    # It was accepted, and changed nothing, without a word.
    from etsim.errors import EtsimWarning

    keys = {"topology": RING8, "model": "analytical", "jobs": [_all_reduce("a", 4, "1 MiB", [0, 1, 2, 3])]}
    with pytest.warns(EtsimWarning, match=r"stragglers\[0\]: no job runs on GPUs \[6\]: it has no effect"):
        run_cluster(load_cluster(_cluster(tmp_path, **keys, stragglers=[{"gpus": [6], "slowdown": 3}])))


def test_a_failed_gpu_the_cluster_lacks_is_an_error_and_one_no_job_uses_is_warned(tmp_path) -> None:
    # GPU 99 on an 8-GPU ring was accepted and did nothing, exit 0.
    from etsim.errors import EtsimWarning

    keys = {"topology": RING8, "model": "analytical", "jobs": [_all_reduce("a", 4, "1 MiB", [0, 1, 2, 3])]}
    with pytest.raises(ConfigError, match=r"faults\[0\]\.gpu: GPU 99 is not one of 0\.\.7"):
        run_cluster(load_cluster(_cluster(tmp_path, **keys, faults=[{"gpu": 99, "at": "1 us"}])))
    with pytest.warns(EtsimWarning, match=r"faults\[0\]: no job runs on GPU 7: its failure has no effect"):
        run_cluster(load_cluster(_cluster(tmp_path, **keys, faults=[{"gpu": 7, "at": "1 us"}])))


def _computing(name: str, gpus: list[int], micros: int = 100) -> dict[str, Any]:
    """A data-parallel step on two ranks: 2 × *micros* of compute and a tiny all-reduce."""
    workload = {"generate": "dp", "npus": 2, "layers": 1, "grad_size": 1000, "fwd_us": micros, "wg_us": micros}
    return {"name": name, "workload": workload, "placement": gpus}


def test_a_jobs_own_per_rank_settings_name_its_ranks_and_its_clock(tmp_path) -> None:
    """Job b (on GPUs 1 and 5) slows its rank 0: it slowed GPU 0, job a's. Its rank_start and rank_fail were
    dropped; its other settings applied to every job, or to none."""
    b = {**_computing("b", [1, 5]), "start": "1 ms", "system": {"compute_slowdown": {0: 2.0}}}
    a, b = load_cluster_and_run(tmp_path, [_computing("a", [0, 4]), b]).jobs
    assert 200_000 < a.duration_ns < 250_000 < 400_000 < b.duration_ns < 450_000  # (b's rank 0 at half speed)
    late = {**_computing("b", [1, 5]), "start": "1 ms", "system": {"rank_start": {1: "300 us"}}}
    (b,) = load_cluster_and_run(tmp_path, [late]).jobs
    assert 500_000 < b.duration_ns < 550_000  # (its rank 1 300 us into the job, then 200 us of compute)
    failing = {**_computing("b", [1, 5]), "start": "1 ms", "system": {"rank_fail": {1: "10 us"}}}
    (b,) = load_cluster_and_run(tmp_path, [failing]).jobs
    assert b.finish_ns == 1_010_000.0 and b.lost is not None and b.lost["gpu"] == 5  # (its rank 1, 10 us in)
    leaking = {**_computing("b", [1, 5]), "system": {"endpoint_delay": "50 us"}}
    with pytest.raises(ConfigError, match=r"jobs\[1\]\.system\.endpoint_delay: a setting of the whole run"):
        load_cluster_and_run(tmp_path, [_computing("a", [0, 4]), leaking])
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.system\.compute_slowdown: rank 2 is not one of the job's"):
        load_cluster_and_run(tmp_path, [{**_computing("a", [0, 4]), "system": {"compute_slowdown": {2: 2.0}}}])


def load_cluster_and_run(tmp_path: Path, jobs: list[dict[str, Any]], **keys: Any) -> Any:
    return run_cluster(load_cluster(_cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=jobs, **keys)))


def test_alone_a_late_job_meets_the_faults_of_its_own_time(tmp_path) -> None:
    """A job starting at 2 ms, alone on the cluster, with a spine at half rate from 0.2 ms to 1.9 ms (over before it
    starts): its slowdown is 1. Its alone run started at 0 and met the fault: 0.556x."""
    faults = [{"link": ["s0", "s1"], "at": "200 us", "bandwidth": "50%"},
              {"link": ["s0", "s1"], "at": "1900 us", "bandwidth": "100%"}]  # fmt: skip
    job = {**_sendrecv([0, 4], "c"), "start": "2 ms"}
    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=[job], faults=faults)
    (result,) = run_cluster(load_cluster(path), alone=True).jobs
    assert result.duration_ns == pytest.approx(3 * LAT + S / B, abs=1e-6)
    assert result.slowdown == 1.0


def test_a_gpu_that_fails_before_its_job_starts_costs_no_negative_time(tmp_path) -> None:
    """GPU 5 fails at 1 ms, its job starts at 2 ms: it printed a duration of -1 ms and -1 ms lost a GPU."""
    job = {**_sendrecv([1, 5], "b"), "start": "2 ms"}
    (b,) = load_cluster_and_run(tmp_path, [job], faults=[{"gpu": 5, "at": "1 ms"}]).jobs
    assert b.duration_ns == 0.0 and b.lost is not None
    assert b.lost["step_ns"] == b.lost["gpu_ns"] == 0.0
    head = load_cluster_and_run(tmp_path, [job, _sendrecv([0, 4], "a")], faults=[{"gpu": 5, "at": "1 ms"}]).table()
    assert head.splitlines()[0].startswith("cluster cluster: every job ended at 2 ms")  # (b's start, not a's end)


def test_a_fault_sets_its_share_of_the_healthy_link_and_a_later_one_overrides_it(tmp_path) -> None:
    """The spine at 50% from 0 and back to 100% at 100 us: the bytes left after 100 us at half rate go at the full
    rate (the restore did nothing: the whole message at half rate). Two 50% faults at 0 gave 25% (at 1 ns, 50%)."""
    t = 100_000.0
    faults = [{"link": ["s0", "s1"], "at": "0 ns", "bandwidth": "50%"},
              {"link": ["s0", "s1"], "at": f"{t:.0f} ns", "bandwidth": "100%"}]  # fmt: skip
    (job,) = load_cluster_and_run(tmp_path, [_sendrecv([0, 4], "a")], faults=faults).jobs
    assert job.duration_ns == pytest.approx(3 * LAT + t + (S - t * B / 2) / B, rel=1e-12)
    twice = [{"link": ["s0", "s1"], "at": "0 ns", "bandwidth": "50%"}] * 2
    (job,) = load_cluster_and_run(tmp_path, [_sendrecv([0, 4], "a")], faults=twice).jobs
    assert job.duration_ns == pytest.approx(3 * LAT + S / (B / 2), rel=1e-12)


def test_a_failed_gpu_stops_sending_and_its_link_share_returns(tmp_path) -> None:
    """Jobs a (0, 4) and b (1, 5) share the spine; GPU 0 fails at t: a's messages stop there (they kept half of the
    spine until they had drained, 1.5 ms of a 10 MB message: b's failure cost was 0), and b has it all from t."""
    t = 50_000.0
    a, b = load_cluster_and_run(
        tmp_path, [_sendrecv([0, 4], "a"), _sendrecv([1, 5], "b")], faults=[{"gpu": 0, "at": f"{t:.0f} ns"}]
    ).jobs
    assert a.lost is not None and a.finish_ns == t
    assert b.duration_ns == pytest.approx(3 * LAT + t + (S - t * B / 2) / B, rel=1e-12)


def test_a_shared_link_whose_rate_changed_gives_no_job_a_busy_time_it_cannot_know(tmp_path) -> None:
    """Job b crossed the spine at full rate, job a after it halved: the measured time split by bytes gave b 150% of
    its own time. The model does not record when each job's bytes crossed: the share is not given."""
    late = {**_sendrecv([0, 4], "a"), "start": "1 ms"}
    fault = {"link": ["s0", "s1"], "at": "500 us", "bandwidth": "50%"}
    result = load_cluster_and_run(tmp_path, [late, _sendrecv([1, 5], "b")], faults=[fault])
    (spine,) = [e for e in result.shared_links if (e["src"], e["dst"]) == ("s0", "s1")]
    assert {name: (use["busy_ns"], use["utilisation"]) for name, use in spine["jobs"].items()} == {
        "a": (None, None),
        "b": (None, None),
    }
    assert "% of its time" not in result.table()


def test_a_restores_negative_cost_is_said_to_be_the_restore(tmp_path) -> None:
    # One job, a spine at 50% then restored: without the restore the job is slower. The note said the fault had
    # held back another job it shares links with (there is none).
    faults = [{"link": ["s0", "s1"], "at": "1 ns", "bandwidth": "50%"},
              {"link": ["s0", "s1"], "at": "50 us", "bandwidth": "100%"}]  # fmt: skip
    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=[_sendrecv([0, 4], "a")], faults=faults)
    table = run_cluster(load_cluster(path), fault_costs=True).table()
    assert "it restores the link, which the jobs would miss without it" in table and "held back" not in table
    partly = [{**faults[0], "bandwidth": "25%"}, {**faults[1], "bandwidth": "75%"}]  # (from 25% to 75%: a restore too)
    path = _cluster(tmp_path, topology=TWO_SWITCHES, model="flow", jobs=[_sendrecv([0, 4], "a")], faults=partly)
    table = run_cluster(load_cluster(path), fault_costs=True).table()
    assert "it restores the link, which the jobs would miss without it" in table and "held back" not in table


def test_two_jobs_beside_a_link_failed_during_the_run_are_told_their_tables_charge_routes(tmp_path) -> None:
    """The warning is for runs of several jobs, whose tables charge each message along its route (one job's tables
    are the run's own statistics, detours included); a link failed at 0 and brought back later is one too."""
    faults = [{"link": [0, 1], "at": "0 ns", "bandwidth": "0%"}, {"link": [0, 1], "at": "1 s", "bandwidth": "100%"}]
    jobs = [_sendrecv([0, 1], "a"), _sendrecv([4, 5], "b")]
    path = _cluster(tmp_path, topology=TORUS, model="flow", jobs=jobs, faults=faults)
    with pytest.warns(EtsimWarning, match=r"link 0 - 1 fails during the run: each job's links and the shared"):
        result = run_cluster(load_cluster(path), together=True)
    assert any("fails during the run" in w for w in result.warnings)


def test_a_job_filling_the_cluster_runs_its_own_algorithms(tmp_path) -> None:
    # A job of every GPU with its own all_reduce: direct, in a cluster whose system says ring, was refused as
    # differing from the cluster's (a job's algorithms go first: the documented exception).
    job = {**_all_reduce("a", 8, "1 MiB", "packed"), "system": {"algorithms": {"all_reduce": "direct"}}}
    keys = {"system": {"algorithms": {"all_reduce": "ring"}}}
    (result,) = load_cluster_and_run(tmp_path, [job], **keys).jobs
    assert {c.algorithm for c in result.result.collectives} == {"direct"}


def test_what_a_live_gpu_sends_a_failed_one_drains_as_sent(tmp_path) -> None:
    # Under flow the message to a GPU that failed stopped with it: its sender never finished (the other models let
    # it drain). Only what the failed GPU sends stops.
    sender, receiver = TraceBuilder(0), TraceBuilder(1)
    sender.send(1, S, 0)
    receiver.recv(0, S, 0)
    write_workload(Workload([sender.build(rank=0), receiver.build(rank=1)]), tmp_path / "p" / "p")
    from etsim.network import load_network
    from etsim.simulation import simulate
    from etsim.system.config import load_system_config

    system = load_system_config({"rank_fail": {1: "10 us"}})
    ring2 = load_network({**RING8, "npus": 2})
    finish = {m: simulate(str(tmp_path / "p" / "p"), topology=ring2, model=m, system=system).ranks[0]
              for m in ("flow", "analytical")}  # fmt: skip
    assert finish["flow"].finish_ns == finish["analytical"].finish_ns == pytest.approx(LAT + S / B, abs=1e-6)


def test_a_job_faster_beside_a_competitor_is_explained(tmp_path) -> None:
    """Max-min sharing is not monotone. Job a: GPU 0 sends 2 MB and GPU 1 sends 1 MB to GPU 2 (one link into it,
    1 GB/s), and GPU 2 computes 2 ms after the first message. Alone, both messages share that link: the first ends at
    3 ms (half of the link for 2 ms, then all of it), the job at 5 ms. Job b's three messages from GPU 3 to GPU 4 share
    the spine link that GPU 1's message crosses too, holding it to a quarter: GPU 0's gets three quarters of GPU 2's
    link and ends at 8/3 ms, and job a at 14/3 ms (GPU 1's message ends at 4 ms). Latencies 0.
    """
    topology = {
        "kind": "graph", "npus": 5, "switches": 2, "bandwidth": "1 GB/s", "latency": "0 ns",
        "links": [{"src": 0, "dst": "s0"}, {"src": 2, "dst": "s0"}, {"src": 4, "dst": "s0"},
                  {"src": 1, "dst": "s1"}, {"src": 3, "dst": "s1"}, {"src": "s1", "dst": "s0"}],
    }  # fmt: skip
    senders = [TraceBuilder(), TraceBuilder()]
    senders[0].send(2, 2_000_000)
    senders[1].send(2, 1_000_000, tag=1)
    receiver = TraceBuilder()
    first = receiver.recv(0, 2_000_000)
    receiver.recv(1, 1_000_000, tag=1)
    receiver.comp("after", duration_micros=2000, deps=[first])
    write_workload(
        Workload([senders[0].build(rank=0), senders[1].build(rank=1), receiver.build(rank=2)]), tmp_path / "a" / "a"
    )
    source, sink = TraceBuilder(), TraceBuilder()
    for tag in range(3):
        source.send(1, 10_000_000, tag)
        sink.recv(0, 10_000_000, tag)
    write_workload(Workload([source.build(rank=0), sink.build(rank=1)]), tmp_path / "b" / "b")
    jobs = [
        {"name": "a", "workload": "a/a", "placement": [0, 1, 2]},
        {"name": "b", "workload": "b/b", "placement": [3, 4]},
    ]
    system = {"resources": {"comm_streams": 0}}  # (job b's three messages at once)
    keys = {"topology": topology, "model": "flow", "system": system, "jobs": jobs}
    result = run_cluster(load_cluster(_cluster(tmp_path, **keys)), alone=True)
    a = result.job("a")
    assert a.alone_ns == pytest.approx(5e6) and a.duration_ns == pytest.approx(14e6 / 3)
    assert "a: faster beside the others than alone. Max-min sharing is not monotone: a" in result.table()
    assert "faster beside" not in result.table().replace("a: faster beside", "")  # (job b is not)
