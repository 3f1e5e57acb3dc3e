"""etsim benchmarks (scripts, not timed tests). Each case runs in a fresh process.

Usage: ``python scripts/bench.py [CASE|PATTERN ...] [--repeat N]``; with no case, runs the default list
(every case below except the 4096-NPU ones and the cases ported from the former ``bench_network.py``);
a shell pattern such as ``'net-*'`` selects among all listed cases. Prints one line per run (wall s, CPU s,
peak RSS MB and case-specific counts and rates; rates are per CPU second), the median of the repetitions,
and, for every model case whose heap reference also ran, the ratio of their median CPU times.

Cases:
  load-1m              read a 1,000,000-node trace (chain of COMP nodes with SEND/RECV every 10th node)
  load-1m-lean         the same with keep_raw=False (flat columns only)
  ring-ar-P-MODEL      full stack (workload -> system -> network): one 256 MiB ring all-reduce on P NPUs of a
                       bidirectional ring, 50 GB/s, 1 us, MODEL analytical or link (P = 256, 1024, 4096)
  verify-ring-ar-P     the semantic verifier (etsim.algo.verify) on the native ring all-reduce of P ranks
                       (P = 256, 1024): 5(P-1) nodes per rank, P² output chunks; checks the verdict is correct
  heap-ring-P          the reference loop of performance.md: a bare heapq loop over the same ring all-reduce
                       with busy-until links, no simulator (the yardstick for the full-stack cases and for
                       net-ring-P-MODEL); checks the closed form
  net-ring-P-MODEL     network layer only: the messages of that ring all-reduce (NPU i's k-th message goes to
                       i+1 once the (k-1)-th from i-1 has arrived; 2(P-1) steps, chunk 256 MiB / P) driven
                       through ``model.transfer`` with SimPy callbacks (no walker, no process per message),
                       MODEL analytical or link (P = 256, 1024); checks the closed form 2(P-1)(L + chunk/B).
                       Reference: heap-ring-P (one message per link at a time: both models are exact there)
  net-torus-a2a-link   all-to-all on an 8x8x8 torus (50 GB/s, 1 us links) under ``link``: every NPU sends one
                       64,000-byte message to every other NPU (512 x 511 = 261,632 messages, 1,572,864 hops),
                       all posted at t = 0 in a seeded random order; dimension-order routes, store-and-forward.
                       After timing, re-runs heap-net-torus-a2a and asserts identical delivery time for every
                       message and identical busy-until time for every link (the size makes all times whole ns,
                       so float arithmetic is exact in any order and the comparison is bit-for-bit)
  heap-net-torus-a2a   its reference: a bare heapq store-and-forward loop over the same messages and routes
                       (``model.route``), per-link FIFO busy-until times, one heap event per hop
  net-flow-a2a-N[-staggered]  the flow model alone (no walker): every NPU of an N-NPU switch sends 1 MiB to every
                       other, all at t = 0, or at seeded random times within 100 us (N = 8 … 128: 56 to 16,256 flows,
                       up to N - 1 sharing each link); the scaling curve of docs/network-models.md
  simpy-baseline-1m    (from bench_network) the driver of net-chains-1m-analytical with a bare SimPy timeout per
                       message: the ceiling of a one-event-per-message model
  net-chains-1m-analytical  (from bench_network) 1,000,000 analytical transfers on a 64-NPU ring, 64
                       concurrent chains (a source sends its next message when the previous one is delivered;
                       destinations cycle through all offsets)
  net-a2a-ring64-link  (from bench_network) all-to-all on a 64-NPU ring under link, 1 MiB per pair, 4 rounds
                       (16,128 messages, ~16 hops each)
  net-a2a-ring64-link-packets  (from bench_network) one round of it with 64 KiB packets (16 per message)
  experiment-1000      ``etsim experiment run`` of 1,000 small points (8 NPUs, one all-reduce: 4 algorithms x 250
                       sizes, analytical model, generated workload) on the local process pool over all cores;
                       reports points per second over the whole run (validation, configs, pool start-up,
                       simulations, results files); ``experiment-1000-ray`` the same on a local Ray cluster
                       (Ray's start-up and shutdown included in wall_s and points_per_s, also reported apart;
                       run_s / points_per_run_s: the sweep on the running cluster, its workers started cold)

Whole processes (the command a user types, timed from outside: wall s, CPU s of the child, peak RSS;
inputs are generated in the work directory before the clock starts; see PROCESS_CASES):
  run-ring-P-MODEL     ``etsim run`` of one 256 MiB ring all-reduce on P NPUs of a ring (50 GB/s, 1 us),
                       MODEL analytical or link (P = 1024, 4096); reference: heap-ring-P
  run-direct-switch-1024-MODEL  ``etsim run --algo direct`` of a 64 MiB all-reduce on a 1024-NPU switch, MODEL
                       analytical, link or flow
  run-mesh8x8-ring-M   ``etsim run --algo ring`` of the shipped 64 MiB all-reduce on an 8x8 mesh, M analytical, flow,
                       link or packets (link with 4 KiB packets, the packet-level reference of flow)
  run-a2a-256-MODEL    ``etsim run --algo direct`` of a 64 MiB all-to-all on 256 NPUs, a ring of 16 (200 GB/s, 100
                       ns) times a switch of 16 (50 GB/s, 1 us), MODEL analytical, flow or link
  run-a2a-random-N     issue 39's flows that start one by one: on an N-NPU switch (50 GB/s, 500 ns) every NPU sends
                       1 MiB to every other, each send after its own seeded random wait of 0-100 us (whole
                       microseconds, Chakra's duration unit: 101 distinct start instants, every end its own), compute
                       and communication streams unlimited, under flow (N = 64, 256; bar: 1.5 s, 8 s)
  run-a2a-moe-1024-ALGO  16 expert groups of 64 GPUs each all-to-all 16 MiB at once on a 1,024-GPU dgx-h100
                       gpu_cluster under flow (ALGO direct or nccl): issue 39's all-to-all at scale (bar: 30 s)
  astra-ring-1024-BACKEND, astra-direct-switch-1024-BACKEND  ``etsim astra`` of ASTRA-sim inputs (64 MiB
                       all-reduce, Ring / Switch of 1024 NPUs, 50 GB/s, 500 ns, endpoint delay 10, local-mem-bw
                       1600, one split), BACKEND unaware or aware
  run-8npu             ``etsim run workloads/allreduce_8npus_1MiB.et`` (start-up dominated)
  run-dp-64-MODEL      ``etsim run`` of a data-parallel training step (MODEL analytical, link or flow): 64 NPUs,
                       128 layers, 16 MiB gradient
                       all-reduce per layer overlapping the backward pass (``etsim workload gen dp``)
  synth-tacos-32x32    ``etsim synth tacos`` of an all-gather on topologies/mesh32x32.yaml, writing the family
  export-ring-1024     ``etsim algo export ring --npus 1024 --size 64 MiB``: the 1,024-file family (840 MB)
  run-family-msccl-64  ``etsim run`` of the shipped 64 MiB all-reduce on 64 NPUs with the MSCCL-IR ring family
                       (algorithms/msccl_ring_allreduce_64npus.xml converted with --size); run-native-ring-64 the
                       same with the native ring (issue 22: at most 2x)
  run-family-ring-1024 ``etsim run`` of a 64 MiB all-reduce on topologies/ring1024.yaml with the exported ring family
                       (``etsim algo export ring --npus 1024 --size 64 MiB``); run-native-ring-1024 with ``--algo ring``
  run-family-tacos-32x32  ``etsim run`` of a 64 MiB all-gather on topologies/mesh32x32.yaml with the TACOS family
                       (``etsim synth tacos … --size 64 MiB``)
  train-gpt3-1024      one training step of GPT-3 175B on 1,024 GPUs (t 8 with SP, p 8, d 16 with ZeRO-1, 8
                       micro-batches, selective recomputation) on a dgx-a100 gpu_cluster under flow: a one-point
                       ``etsim experiment run`` (generated in memory, simulated, step report), issue 23's scale case
  train-gpt3-1024-full the same step with replica folding off (every rank simulated: the fold's reference)
  run-nccl-h100-1024-8b, run-nccl-h100-1024-1g  an 8-byte and a 1 GiB all-reduce on 128 DGX H100 nodes (the
                       default nccl algorithm: Tree/LL and NVLS tree, 1,024 GPUs)
  cluster-gpt3-4x256   ``etsim cluster run`` of four GPT-3 175B jobs (t 8, p 8, d 4, 16 micro-batches of 1) packed on a
                       1,024-GPU dgx-a100 cluster under flow, GPU 3 (job a) 1.2x slower: issue 37's budget case (the
                       jobs share no link, so each runs apart: b, c and d folded, a in full)
  train-gpt3-4096      the same model on 4,096 GPUs (d 64, 512 sequences): the top of docs/training.md's scaling table
  train-deepseek-1024  issue 36's budget case: a DeepSeek-V3-like step on 1,024 H100s (t 2 with SP, p 8 x 4 chunks,
                       e 64, d 64, 128 micro-batches of one sequence per pipeline) under NCCL's defaults; -zero1 with
                       ZeRO-1 as DeepSeek-V3 trained (data-parallel traffic on NCCL's rings: folds by tp and dp),
                       -rings without NCCL's trees, -native on the native ring and direct all-to-alls
  write-1m             (in process) write the 1,000,000-node trace of load-1m back to disk

Route computation (``model.route``) is done before the timer starts in the torus cases, for model and
reference alike. SimPy events are counted with the environment's event-id counter (no wrapper in the loop);
the analytical model, and the link model for single-hop messages, let messages delivered at the same
instant share one event, so a model case may count fewer events than messages."""

from __future__ import annotations

import argparse
import compileall
import fnmatch
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODES = 1_000_000
RING_BYTES = 256 * 2**20  # all-reduce size per NPU
BW, LAT = 50.0, 1000.0  # 50 GB/s (bytes per ns), 1 us
TORUS_SHAPE = (8, 8, 8)
A2A_BYTES = 64_000  # 1280 ns on a 50 B/ns link: every time is a whole number of ns
A2A_SEED = 1


def make_trace(path: Path, nodes: int = NODES) -> None:
    """Write a *nodes*-node trace: each node depends on the previous; every 10th is a send."""
    from etsim.chakra.io import encode_varint
    from etsim.chakra.schema import et_def_pb2 as pb

    comp = pb.Node(name="comp", type=pb.COMP_NODE, duration_micros=3)
    comp.attr.add(name="is_cpu_op").bool_val = False
    send = pb.Node(name="send", type=pb.COMM_SEND_NODE)
    send.attr.add(name="is_cpu_op").bool_val = False
    send.attr.add(name="comm_dst").int32_val = 1
    send.attr.add(name="comm_size").int64_val = 65536
    send.attr.add(name="comm_tag").int32_val = 0
    with path.open("wb") as f:
        meta = pb.GlobalMetadata(version="1.0.0").SerializeToString()
        f.write(encode_varint(len(meta)) + meta)
        for i in range(nodes):
            node = send if i % 10 == 9 else comp
            node.id = i
            del node.data_deps[:]
            if i:
                node.data_deps.append(i - 1)
            payload = node.SerializeToString()
            f.write(encode_varint(len(payload)) + payload)


def heap_ring(p: int, size: float = 256 * 2**20, bw: float = 50.0, lat: float = 1000.0) -> tuple[float, int]:
    """Ring all-reduce on a bare heap: message (i, k) leaves NPU i when (i-1, k-1) arrived; links are
    busy-until values. Returns (finish time, messages)."""
    import heapq

    chunk = size / p
    t_ser = chunk / bw
    steps = 2 * (p - 1)
    link_free = [0.0] * p
    heap = [(0.0, i, 0) for i in range(p)]  # (ready time, npu, step)
    messages = 0
    finish = 0.0
    while heap:
        ready, i, k = heapq.heappop(heap)
        start = ready if ready > link_free[i] else link_free[i]
        link_free[i] = start + t_ser
        arrival = start + t_ser + lat
        messages += 1
        if k + 1 < steps:
            heapq.heappush(heap, (arrival, (i + 1) % p, k + 1))
        elif arrival > finish:
            finish = arrival
    return finish, messages


def ring_closed_form(p: int) -> float:
    """Finish time of the ring all-reduce: 2(P-1)(L + chunk/B)."""
    return 2 * (p - 1) * (LAT + RING_BYTES / p / BW)


def _sim_events(env) -> int:
    """Events scheduled so far in a SimPy environment (its event-id counter; consumes one id)."""
    return next(env._eid)


def net_ring(p: int, model_name: str) -> dict[str, float]:
    """The ring all-reduce's messages through ``model.transfer``, driven by callbacks."""
    from functools import partial

    from etsim.network import build_model, ring
    from etsim.network.model import CountingEnvironment

    env = CountingEnvironment()  # as etsim.simulation uses: lets same-instant deliveries share events
    model = build_model(env, ring(p, BW, LAT), model_name)
    chunk = RING_BYTES / p
    steps = 2 * (p - 1)
    transfer = model.transfer

    def send(i: int, k: int, _event: object = None) -> None:
        j = i + 1 if i + 1 < p else 0
        event = transfer(i, j, chunk)
        if k + 1 < steps:
            event.callbacks.append(partial(send, j, k + 1))

    e0 = _sim_events(env)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(p):
        send(i, 0)
    env.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    events = _sim_events(env) - e0 - 1
    rss = _rss_mb()
    msgs = p * steps
    carried = sum(s.messages for s in model.link_stats())
    assert carried == msgs, (carried, msgs)
    closed = ring_closed_form(p)
    assert abs(env.now - closed) <= 1e-9 * closed, (env.now, closed)
    return _report(wall, cpu, rss, msgs, events, env.now)


def a2a_pairs(npus: int, seed: int = A2A_SEED) -> list[tuple[int, int]]:
    """Every ordered pair of distinct NPUs, in a seeded random order."""

    pairs = [(s, d) for s in range(npus) for d in range(npus) if s != d]
    random.Random(seed).shuffle(pairs)
    return pairs


def _torus_routes():
    """The torus, a link model on it, the all-to-all pairs and their routes (``model.route``)."""
    from etsim.network import build_model, torus
    from etsim.network.model import CountingEnvironment

    env = CountingEnvironment()
    model = build_model(env, torus(list(TORUS_SHAPE), BW, LAT), "link")
    pairs = a2a_pairs(model.topology.npus)
    routes = [model.route(s, d) for s, d in pairs]
    return env, model, pairs, routes


def heap_store_and_forward(
    routes: list[list[int]], size: float, bandwidths: list[float], latencies: list[float]
) -> tuple[list[float], list[float], int]:
    """Bare-heap store-and-forward: message m (route ``routes[m]``, all posted at t = 0 in list order) is
    queued FIFO on each link of its route, holds it for size/B and reaches the next node L later; one heap
    event per hop (the last one is the delivery). Returns (delivery time per message, busy-until time per
    link, heap events)."""
    import heapq

    heappush, heappop = heapq.heappush, heapq.heappop
    free = [0.0] * len(bandwidths)
    delivered = [0.0] * len(routes)
    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    for m, route in enumerate(routes):  # first hop, at t = 0
        link = route[0]
        ser = size / bandwidths[link]
        start = free[link]
        free[link] = start + ser
        heappush(heap, (start + ser + latencies[link], seq, m, 1))
        seq += 1
    events = 0
    while heap:
        now, _, m, i = heappop(heap)
        events += 1
        route = routes[m]
        if i == len(route):
            delivered[m] = now
            continue
        link = route[i]
        ser = size / bandwidths[link]
        start = free[link]
        if start < now:
            start = now
        free[link] = start + ser
        heappush(heap, (start + ser + latencies[link], seq, m, i + 1))
        seq += 1
    return delivered, free, events


def heap_torus_a2a() -> dict[str, float]:
    _env, model, _pairs, routes = _torus_routes()
    topo = model.topology
    t0, c0 = time.perf_counter(), time.process_time()
    delivered, _free, events = heap_store_and_forward(routes, A2A_BYTES, topo.bandwidths, topo.latencies)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return _report(wall, cpu, _rss_mb(), len(routes), events, max(delivered))


def net_torus_a2a() -> dict[str, float]:
    from functools import partial

    env, model, pairs, routes = _torus_routes()
    delivered = [0.0] * len(pairs)

    def record(m: int, _event: object) -> None:
        delivered[m] = env.now

    transfer = model.transfer
    e0 = _sim_events(env)
    t0, c0 = time.perf_counter(), time.process_time()
    for m, (s, d) in enumerate(pairs):
        transfer(s, d, A2A_BYTES).callbacks.append(partial(record, m))
    env.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    events = _sim_events(env) - e0 - 1
    rss = _rss_mb()
    topo = model.topology
    ref, ref_free, _ = heap_store_and_forward(routes, A2A_BYTES, topo.bandwidths, topo.latencies)
    bad = [m for m in range(len(pairs)) if delivered[m] != ref[m]]
    assert not bad, f"{len(bad)} deliveries differ from the heap reference, e.g. {pairs[bad[0]]}"
    assert all(model.link_free_at(i) == f for i, f in enumerate(ref_free)), "link busy-until times differ"
    assert env.now == max(ref)
    return _report(wall, cpu, rss, len(pairs), events, env.now)


def _bench_network_case(case: str) -> dict[str, float]:
    """The cases ported from the former scripts/bench_network.py."""
    from etsim.network import build_model, ring
    from etsim.network.model import CountingEnvironment

    env = CountingEnvironment()
    e0 = _sim_events(env)
    t0, c0 = time.perf_counter(), time.process_time()
    if case in ("simpy-baseline-1m", "net-chains-1m-analytical"):
        npus, per_source = 64, 1_000_000 // 64
        sent = [0] * npus
        if case == "simpy-baseline-1m":

            def send(src: int) -> None:
                k = sent[src]
                if k == per_source:
                    return
                sent[src] = k + 1
                env.timeout(LAT + 65536 / BW).callbacks.append(lambda _e, s=src: send(s))

        else:
            transfer = build_model(env, ring(npus, BW, LAT), "analytical").transfer

            def send(src: int) -> None:
                k = sent[src]
                if k == per_source:
                    return
                sent[src] = k + 1
                dst = (src + 1 + k % (npus - 1)) % npus
                transfer(src, dst, 65536).callbacks.append(lambda _e, s=src: send(s))

        for src in range(npus):
            send(src)
        env.run()
        msgs = sum(sent)
    else:  # net-a2a-ring64-link[-packets]
        npus, size = 64, 1 << 20
        packets = case.endswith("-packets")
        model = build_model(env, ring(npus, BW, LAT), "link", {"packet_size": 65536} if packets else {})
        msgs = 0
        for _ in range(1 if packets else 4):
            for src in range(npus):
                for offset in range(1, npus):
                    model.transfer(src, (src + offset) % npus, size)
                    msgs += 1
        env.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return _report(wall, cpu, _rss_mb(), msgs, _sim_events(env) - e0 - 1, env.now)


def net_flow_a2a(npus: int, staggered: bool) -> dict[str, float]:
    """The flow model alone: every NPU of a switch sends 1 MiB to every other one, all at t = 0 (every flow in flight
    at once, one allocation) or at seeded random times within 100 us (an allocation per start and end)."""

    from etsim.network import build_model, switch
    from etsim.network.model import CountingEnvironment

    env = CountingEnvironment()
    model = build_model(env, switch(npus, BW, LAT), "flow")
    rng = random.Random(A2A_SEED)
    e0 = _sim_events(env)
    t0, c0 = time.perf_counter(), time.process_time()
    for src, dst in a2a_pairs(npus):
        if staggered:
            env.timeout(rng.uniform(0, 100_000)).callbacks.append(
                lambda _e, s=src, d=dst: model.transfer(s, d, 1 << 20)
            )
        else:
            model.transfer(src, dst, 1 << 20)
    env.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return _report(wall, cpu, _rss_mb(), npus * (npus - 1), _sim_events(env) - e0 - 1, env.now)


def experiment_1000(workdir: Path, engine: str) -> dict[str, float]:
    """Time a 1,000-point sweep end to end with the given engine."""
    from etsim.experiment import load_experiment, run_experiment

    topology = workdir / "ring8.yaml"
    topology.write_text("kind: ring\nnpus: 8\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    sizes = ", ".join(f"{k} KiB" for k in range(1, 251))
    path = workdir / "e1000.yaml"
    path.write_text(
        "name: e1000\nworkload: {generate: collective, type: all_reduce, npus: 8, size: 1 KiB}\n"
        f"topology: {topology}\nmodel: analytical\n"
        f"sweep:\n  algo: [ring, direct, halving_doubling, tree]\n  size: [{sizes}]\n"
    )
    extra: dict[str, float] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    experiment = load_experiment(path)
    load = time.perf_counter() - t0
    if engine == "ray":  # started here (as run_experiment would) to time Ray's start and stop apart
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        extra["ray_start_s"] = time.perf_counter() - t0 - load
    summary = run_experiment(experiment, out=workdir / f"e1000-{engine}", engine=engine, force=True, plots=False)
    if engine == "ray":
        t1 = time.perf_counter()
        ray.shutdown()
        extra["ray_stop_s"] = time.perf_counter() - t1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert (summary.ok, summary.failed) == (1000, 0), summary
    return {
        "wall_s": wall,
        "parent_cpu_s": cpu,
        "load_s": load,
        "run_s": summary.wall_s,
        **extra,
        "points_per_s": 1000 / wall,
        "points_per_run_s": 1000 / summary.wall_s,
        "jobs": float(os.cpu_count() or 1),
    }


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _report(wall: float, cpu: float, rss: float, msgs: int, events: int, sim_ns: float) -> dict[str, float]:
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": rss,
        "messages": msgs,
        "events": events,
        "msgs_per_cpu_s": msgs / cpu,
        "events_per_s": events / cpu,
        "sim_ns": sim_ns,
    }


#: Whole-process cases: name -> (etsim arguments, inputs to prepare). ``{w}`` is the work directory.
PROCESS_CASES: dict[str, tuple[list[str], str]] = {
    **{
        f"run-ring-{p}-{m}": (["{w}/ar" + str(p), "--topology", "{w}/ring" + str(p) + ".yaml", "--model", m, "-q"],
                              f"ring{p}")
        for p in (1024, 4096)
        for m in ("analytical", "link")
    },
    **{
        f"run-direct-switch-1024-{m}": (
            ["{w}/ar64m1024", "--topology", "{w}/switch1024.yaml", "--algo", "direct", "--model", m, "--quiet"],
            "switch1024",
        )
        for m in ("analytical", "link", "flow")
    },
    **{
        f"run-mesh8x8-ring-{m}": (
            ["workloads/allreduce_64npus_64MiB.et", "--algo", "ring", "--topology", "{w}/mesh8x8_" + m + ".yaml",
             "--quiet"],
            "mesh8x8",
        )
        for m in ("analytical", "flow", "link", "packets")
    },
    **{
        f"run-a2a-256-{m}": (
            ["{w}/a2a256", "--algo", "direct", "--topology", "{w}/ring16_switch16.yaml", "--model", m, "--quiet"],
            "a2a256",
        )
        for m in ("analytical", "flow", "link")
    },
    **{
        f"run-a2a-moe-1024-{a}": (
            ["{w}/a2amoe", "--topology", "{w}/h100_1024.yaml", "--comm-groups", "{w}/a2amoe_groups.json", "--algo", a,
             "--quiet"],
            "a2amoe",
        )
        for a in ("direct", "nccl")
    },
    **{
        f"run-a2a-random-{n}": (
            ["{w}/a2arandom" + str(n), "--topology", "{w}/switch" + str(n) + ".yaml", "--system", "{w}/unlimited.yaml",
             "--model", "flow", "--quiet"],
            "a2arandom",
        )
        for n in (64, 256)
    },
    **{
        f"astra-ring-1024-{b}": (
            ["astra", "--workload-configuration", "{w}/ar64m1024", "--system-configuration", "{w}/astra_ring.json",
             "--network-configuration", "{w}/astra_ring1024.yml", "--model", b],
            "astra",
        )
        for b in ("unaware", "aware")
    },
    **{
        f"astra-direct-switch-1024-{b}": (
            ["astra", "--workload-configuration", "{w}/ar64m1024", "--system-configuration", "{w}/astra_direct.json",
             "--network-configuration", "{w}/astra_switch1024.yml", "--model", b],
            "astra",
        )
        for b in ("unaware", "aware")
    },
    "run-8npu": (["workloads/allreduce_8npus_1MiB.et", "--quiet"], ""),
    **{f"run-dp-64-{m}": (["{w}/dp64", "--model", m, "--quiet"], "dp64") for m in ("analytical", "link", "flow")},
    "synth-tacos-32x32": (
        ["synth", "tacos", "--topology", "topologies/mesh32x32.yaml", "--collective", "all_gather",
         "-o", "{w}/tacos/ag"],
        "",
    ),
    "export-ring-1024": (
        ["algo", "export", "ring", "--collective", "all_reduce", "--npus", "1024", "--size", "64 MiB",
         "-o", "{w}/export/ring"],
        "",
    ),
    "run-family-msccl-64": (
        ["workloads/allreduce_64npus_64MiB", "--algo", "{w}/fam/msccl_ring64", "--quiet"], "families"
    ),
    "run-native-ring-64": (["workloads/allreduce_64npus_64MiB", "--algo", "ring", "--quiet"], ""),
    **{
        f"run-{a}-ring-1024": (
            ["{w}/ar64m1024", "--topology", "topologies/ring1024.yaml", "--algo", algo, "--quiet"], "families"
        )
        for a, algo in (("family", "{w}/fam/ring1024"), ("native", "ring"))
    },
    "run-family-tacos-32x32": (
        ["{w}/ag64m1024", "--topology", "topologies/mesh32x32.yaml", "--algo", "{w}/fam/tacos_ag", "--quiet"],
        "families",
    ),
    **{
        f"run-nccl-h100-1024-{name}": (["{w}/" + f"ar{name}1024", "--topology", "{w}/h100_1024.yaml", "--quiet"],
                                       "nccl1024")
        for name in ("8b", "1g")
    },
    "train-gpt3-1024": (
        ["experiment", "run", "{w}/gpt3_1024.yaml", "--out", "{w}/gpt3_1024", "--jobs", "1", "--no-plots", "--force",
         "-q"],
        "gpt3_1024",
    ),
    "train-gpt3-1024-full": (
        ["experiment", "run", "{w}/gpt3_1024_full.yaml", "--out", "{w}/gpt3_1024_full", "--jobs", "1", "--no-plots",
         "--force", "-q"],
        "gpt3_1024",
    ),
    "cluster-gpt3-4x256": (["cluster", "run", "{w}/cluster4x256.yaml", "-q"], "cluster4x256"),
    # issue 36's budget: a DeepSeek-V3-like job on 1,024 H100s (t 2, p 8 × 4 chunks, e 64), NCCL's collectives
    # (the default), the same with ZeRO-1 as DeepSeek-V3 trained (its data-parallel reduce-scatter and all-gather
    # run on NCCL's rings, which fold by dp too), NCCL without its trees, and native ring and direct all-to-alls
    **{
        f"train-deepseek-1024{suffix}": (
            ["experiment", "run", "{w}/" + f"deepseek_1024{suffix}.yaml", "--out", "{w}/" + f"deepseek{suffix}",
             "--jobs", "1", "--no-plots", "--force", "-q"],
            "deepseek1024",
        )
        for suffix in ("", "-zero1", "-rings", "-native")
    },
    "train-gpt3-4096": (
        ["experiment", "run", "{w}/gpt3_4096.yaml", "--out", "{w}/gpt3_4096", "--jobs", "1", "--no-plots", "--force",
         "-q"],
        "gpt3_1024",
    ),
}  # fmt: skip


def prepare(kind: str, workdir: Path) -> None:
    """Write the inputs of whole-process cases of *kind* into *workdir* (once)."""
    from etsim.chakra import CollectiveType, write_workload
    from etsim.producers import collective_workload

    def all_reduce(size: int, p: int, name: str) -> None:
        if not (workdir / f"{name}.0.et").exists():
            write_workload(collective_workload(CollectiveType.ALL_REDUCE, size, p), workdir / name)

    if kind.startswith("ring"):
        p = int(kind[4:])
        all_reduce(RING_BYTES, p, f"ar{p}")
        (workdir / f"ring{p}.yaml").write_text(f"kind: ring\nnpus: {p}\nbandwidth: 50 GB/s\nlatency: 1 us\n")
    elif kind == "switch1024":
        all_reduce(64 * 2**20, 1024, "ar64m1024")
        (workdir / "switch1024.yaml").write_text("kind: switch\nnpus: 1024\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
    elif kind == "astra":
        all_reduce(64 * 2**20, 1024, "ar64m1024")
        for algo in ("ring", "direct"):
            system = {"scheduling-policy": "LIFO", "collective-optimization": "baseline", "preferred-dataset-splits": 1,
                      "active-chunks-per-dimension": 1, "endpoint-delay": 10, "local-mem-bw": 1600,
                      **{f"{c}-implementation": [algo] for c in ("all-reduce", "all-gather", "reduce-scatter",
                                                                    "all-to-all")}}  # fmt: skip
            (workdir / f"astra_{algo}.json").write_text(json.dumps(system))
        for kind_, name in (("Ring", "ring"), ("Switch", "switch")):
            (workdir / f"astra_{name}1024.yml").write_text(
                f"topology: [ {kind_} ]\nnpus_count: [ 1024 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
            )
    elif kind == "mesh8x8":
        networks = {"analytical": "{model: analytical}", "flow": "{model: flow}", "link": "{model: link}",
                    "packets": "{model: link, packet_size: 4 KiB}"}  # fmt: skip
        for m, network in networks.items():
            (workdir / f"mesh8x8_{m}.yaml").write_text(
                f"kind: mesh\nshape: [8, 8]\nbandwidth: 50 GB/s\nlatency: 500 ns\nnetwork: {network}\n"
            )
    elif kind == "a2a256":
        if not (workdir / "a2a256.0.et").exists():
            write_workload(collective_workload(CollectiveType.ALL_TO_ALL, 64 * 2**20, 256), workdir / "a2a256")
        (workdir / "ring16_switch16.yaml").write_text(
            "kind: product\ndims:\n  - {kind: ring, npus: 16, bandwidth: 200 GB/s, latency: 100 ns}\n"
            "  - {kind: switch, npus: 16, bandwidth: 50 GB/s, latency: 1 us}\n"
        )
    elif kind == "a2arandom":
        from etsim.chakra import TraceBuilder

        for n in (64, 256):
            if not (workdir / f"a2arandom{n}.0.et").exists():
                rng = random.Random(A2A_SEED)
                traces = []
                for rank in range(n):
                    builder = TraceBuilder()
                    for peer in range(n):
                        if peer != rank:
                            wait = builder.comp(f"wait_{peer}", duration_micros=rng.randint(0, 100))
                            builder.send(peer, 1 << 20, deps=[wait])
                            builder.recv(peer, 1 << 20)
                    traces.append(builder.build(rank=rank))
                write_workload(traces, workdir / f"a2arandom{n}")
            (workdir / f"switch{n}.yaml").write_text(f"kind: switch\nnpus: {n}\nbandwidth: 50 GB/s\nlatency: 500 ns\n")
        (workdir / "unlimited.yaml").write_text("resources: {compute_streams: 0, comm_streams: 0}\n")
    elif kind == "a2amoe":
        if not (workdir / "a2amoe.0.et").exists():
            from etsim.chakra import TraceBuilder

            traces = []
            for rank in range(1024):
                builder = TraceBuilder()
                builder.collective(CollectiveType.ALL_TO_ALL, 16 << 20, pg_name=str(1 + rank // 64))
                traces.append(builder.build(rank=rank))
            write_workload(traces, workdir / "a2amoe")
        groups = {str(1 + g): list(range(64 * g, 64 * g + 64)) for g in range(16)}
        (workdir / "a2amoe_groups.json").write_text(json.dumps(groups))
        (workdir / "h100_1024.yaml").write_text("kind: gpu_cluster\npreset: dgx-h100\ngpus: 1024\n")
    elif kind == "gpt3_1024":
        for gpus, extra in ((1024, ""), (4096, ""), (1024, ", fold_replicas: false")):
            name = f"gpt3_{gpus}" + ("_full" if extra else "")
            (workdir / f"{name}.yaml").write_text(
                f"name: {name}\n"
                "workload: {generate: transformer, model: gpt3-175b, tp: 8, sp: true, pp: 8, "
                f"dp: {gpus // 64}, zero: 1,\n"
                f"           recompute: selective, global_batch: {gpus // 8}, micro_batch: 1}}\n"
                f"topology: {{kind: gpu_cluster, preset: dgx-a100, gpus: {gpus}}}\n"
                f"model: flow\nsystem: {{resources: {{comm_streams: 0}}{extra}}}\n"
                "sweep: {workload.micro_batch: [1]}\n"
            )
    elif kind == "cluster4x256":
        job = "{generate: transformer, model: gpt3-175b, tp: 8, pp: 8, dp: 4, global_batch: 64, micro_batch: 1}"
        jobs = "".join(f"  - {{name: {name}, workload: {job}}}\n" for name in "abcd")
        (workdir / "cluster4x256.yaml").write_text(
            "topology: {kind: gpu_cluster, preset: dgx-a100, gpus: 1024}\nmodel: flow\njobs:\n"
            + jobs
            + "stragglers:\n  - {gpus: [3], slowdown: 1.2}\n"
        )
    elif kind == "deepseek1024":
        for suffix, algorithms, zero in (
            ("", "", ""),
            ("-zero1", "", ", zero: 1"),
            ("-rings", ', nccl: {algo: "^Tree"}', ""),
            ("-native", ", algorithms: {default: ring, all_to_all: direct}", ""),
        ):
            (workdir / f"deepseek_1024{suffix}.yaml").write_text(
                f"name: deepseek_1024{suffix}\n"
                "workload: {generate: transformer, model: deepseek-v3-like, tp: 2, sp: true, pp: 8, "
                "schedule: interleaved,\n           virtual_stages: 4, dp: 64, ep: 64, global_batch: 8192, "
                f"micro_batch: 1, gpu: h100-sxm{zero}}}\n"
                "topology: {kind: gpu_cluster, preset: dgx-h100, gpus: 1024}\n"
                f"model: flow\nsystem: {{resources: {{comm_streams: 0}}{algorithms}}}\n"
                "sweep: {workload.micro_batch: [1]}\n"
            )
    elif kind == "nccl1024":
        all_reduce(8, 1024, "ar8b1024")
        all_reduce(2**30, 1024, "ar1g1024")
        (workdir / "h100_1024.yaml").write_text("kind: gpu_cluster\npreset: dgx-h100\ngpus: 1024\n")
    elif kind == "families":
        from etsim.cli import main

        all_reduce(64 * 2**20, 1024, "ar64m1024")
        if not (workdir / "ag64m1024.0.et").exists():
            write_workload(collective_workload(CollectiveType.ALL_GATHER, 64 * 2**20, 1024), workdir / "ag64m1024")
        made = {
            "msccl_ring64": ["convert", "msccl", "algorithms/msccl_ring_allreduce_64npus.xml", "--size", "64 MiB"],
            "ring1024": ["algo", "export", "ring", "--collective", "all_reduce", "--npus", "1024", "--size", "64 MiB"],
            "tacos_ag": ["synth", "tacos", "--topology", "topologies/mesh32x32.yaml", "--collective", "all_gather",
                         "--size", "64 MiB"],
        }  # fmt: skip
        for name, command in made.items():
            if not (workdir / "fam" / f"{name}.0.et").exists():
                assert main([*command, "-o", str(workdir / "fam" / name)]) == 0
    elif kind == "dp64" and not (workdir / "dp64.0.et").exists():
        from etsim.producers.workloads import data_parallel_workload

        dp = data_parallel_workload(64, layers=128, grad_bytes=16 * 2**20, fwd_micros=100, bwd_micros=100)
        write_workload(dp, workdir / "dp64")


def run_process(case: str, workdir: Path) -> dict[str, float]:
    """Time one whole ``etsim`` process (the clock starts after its inputs exist)."""
    args, _ = PROCESS_CASES[case]
    cmd = [sys.executable, "-m", "etsim", *(a.replace("{w}", str(workdir)) for a in args)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": after.ru_maxrss / 1024}


def run_case(case: str, workdir: Path) -> dict[str, float]:
    """Run one case in this process and return its measurements."""
    trace_path = workdir / "big.et"
    if case in PROCESS_CASES:
        return run_process(case, workdir)
    if case == "write-1m":
        from etsim.chakra import read_trace
        from etsim.chakra.io import write_trace

        trace = read_trace(trace_path)
        t0, c0 = time.perf_counter(), time.process_time()
        write_trace(trace, workdir / "big_copy.et")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert (workdir / "big_copy.et").read_bytes() == trace_path.read_bytes()
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _rss_mb(), "nodes_per_s": NODES / wall}
    if case.startswith("ring-ar-"):
        from etsim.chakra import CollectiveType, Workload
        from etsim.network import ring
        from etsim.producers import collective_workload
        from etsim.simulation import simulate

        _, _, p_text, model = case.split("-")
        p = int(p_text)
        workload = Workload(collective_workload(CollectiveType.ALL_REDUCE, 256 * 2**20, p))
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(workload, topology=ring(p, 50.0, 1000.0), model=model)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        closed = 2 * (p - 1) * (1000.0 + 256 * 2**20 / p / 50.0)
        assert abs(result.finish_ns - closed) <= 1e-9 * closed, (result.finish_ns, closed)
        msgs = result.network["messages"]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "messages": msgs, "msgs_per_cpu_s": msgs / cpu}
    if case.startswith("verify-ring-ar-"):
        from etsim.algo.verify import verify_graphs
        from etsim.chakra import CollectiveType
        from etsim.system.algorithms import RingAlgorithm

        p = int(case.split("-")[3])
        ring = RingAlgorithm()  # one object: its ranks share one graph, as in a simulation
        graphs = [ring.graph(CollectiveType.ALL_REDUCE, p, r) for r in range(p)]
        nodes = sum(g.num_nodes for g in graphs)
        t0, c0 = time.perf_counter(), time.process_time()
        verdict = verify_graphs(graphs, CollectiveType.ALL_REDUCE)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert verdict.ok is True, str(verdict)
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": _rss_mb(), "nodes": nodes, "nodes_per_cpu_s": nodes / cpu}
    if case.startswith("heap-ring-"):
        p = int(case.split("-")[2])
        t0, c0 = time.perf_counter(), time.process_time()
        finish, msgs = heap_ring(p)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        closed = ring_closed_form(p)
        assert abs(finish - closed) <= 1e-9 * closed, (finish, closed)
        return _report(wall, cpu, _rss_mb(), msgs, msgs, finish)  # one heap event per message
    if case.startswith("net-ring-"):
        _, _, p_text, model = case.split("-")
        return net_ring(int(p_text), model)
    if case.startswith("net-flow-a2a-"):
        parts = case.split("-")
        return net_flow_a2a(int(parts[3]), staggered=parts[-1] == "staggered")
    if case == "net-torus-a2a-link":
        return net_torus_a2a()
    if case == "heap-net-torus-a2a":
        return heap_torus_a2a()
    if case in PORTED:
        return _bench_network_case(case)
    if case.startswith("experiment-1000"):
        return experiment_1000(workdir, "ray" if case.endswith("-ray") else "local")
    if case in ("load-1m", "load-1m-lean"):
        from etsim.chakra import read_trace

        t0, c0 = time.perf_counter(), time.process_time()
        trace = read_trace(trace_path, keep_raw=case == "load-1m")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert trace.num_nodes == NODES
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss, "nodes_per_s": NODES / wall}
    raise SystemExit(f"unknown case {case!r}")


PORTED = ("simpy-baseline-1m", "net-chains-1m-analytical", "net-a2a-ring64-link", "net-a2a-ring64-link-packets")
CASES = ("load-1m", "load-1m-lean", "heap-ring-256", "ring-ar-256-analytical", "ring-ar-256-link",
         "heap-ring-1024", "ring-ar-1024-analytical", "ring-ar-1024-link",
         "net-ring-256-analytical", "net-ring-256-link", "net-ring-1024-analytical", "net-ring-1024-link",
         "heap-net-torus-a2a", "net-torus-a2a-link", "verify-ring-ar-256")  # fmt: skip
EXPERIMENT_CASES = ("experiment-1000", "experiment-1000-ray")
FLOW_CASES = tuple(f"net-flow-a2a-{n}{s}" for n in (8, 16, 32, 64, 128) for s in ("", "-staggered"))
ALL_CASES = (*CASES, *FLOW_CASES, "heap-ring-4096", "ring-ar-4096-analytical", "ring-ar-4096-link",
             "verify-ring-ar-1024", *PORTED, *EXPERIMENT_CASES, *PROCESS_CASES, "write-1m")  # fmt: skip
#: Ratio targets of the network-layer cases (model CPU time / heap reference CPU time) by model name.
TARGETS = {"analytical": 2.0, "link": 3.0}


def reference(case: str) -> str | None:
    """The bare-heap reference of a model case (None for references and other cases)."""
    parts = case.split("-")
    if case.startswith(("ring-ar-", "net-ring-", "run-ring-")):
        return f"heap-ring-{parts[2]}"
    if case == "net-torus-a2a-link":
        return "heap-net-torus-a2a"
    return None


def select(args: list[str]) -> list[str]:
    """Case names from command-line names or shell patterns (matched against ALL_CASES)."""
    cases: list[str] = []
    for arg in args:
        if any(ch in arg for ch in "*?["):
            found = fnmatch.filter(ALL_CASES, arg)
            if not found:
                raise SystemExit(f"no case matches {arg!r}")
            cases.extend(found)
        else:
            cases.append(arg)
    return cases


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--child":
        print(json.dumps(run_case(args[1], Path(args[2]))))
        return 0
    parser = argparse.ArgumentParser(
        description="Benchmark cases, each in a fresh process, with medians over repeats.",
        epilog="cases: " + ", ".join(ALL_CASES) + " (default: " + ", ".join(CASES) + ")",
    )
    parser.add_argument("cases", nargs="*", metavar="CASE", help="case names or shell patterns ('net-*')")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3)")
    options = parser.parse_args(args)
    repeat = options.repeat
    cases = select(options.cases) or list(CASES)
    medians: dict[str, dict[str, float]] = {}
    # etsim's bytecode compiled, as an installed package has it (PYTHONDONTWRITEBYTECODE would have every process
    # compile a hundred modules again: 0.15 s of each whole-process case).
    compileall.compile_dir(ROOT / "src", quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print(f"# {os.cpu_count()} cores, Python {sys.version.split()[0]}")
        for kind in dict.fromkeys(PROCESS_CASES[c][1] for c in cases if c in PROCESS_CASES):
            if kind:
                prepare(kind, workdir)
        if any(c.startswith(("load-", "write-")) for c in cases):
            t0 = time.perf_counter()
            make_trace(workdir / "big.et")
            size_mb = (workdir / "big.et").stat().st_size / 1e6
            print(f"# wrote {NODES} nodes ({size_mb:.1f} MB) in {time.perf_counter() - t0:.1f} s")
        for case in cases:
            runs = []
            for _ in range(repeat):
                out = subprocess.run(
                    [sys.executable, __file__, "--child", case, str(workdir)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append(json.loads(out.stdout))
                print(case, " ".join(f"{k}={v:.3g}" for k, v in runs[-1].items()))
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            medians[case] = med
            print(f"{case} MEDIAN of {repeat}:", " ".join(f"{k}={v:.3g}" for k, v in med.items()))
        _print_ratios(medians)
    return 0


def _print_ratios(medians: dict[str, dict[str, float]]) -> None:
    """For each model case whose reference ran: median CPU time over the reference's, against its target."""
    lines = []
    for case, med in medians.items():
        ref = reference(case)
        if ref is None or ref not in medians:
            continue
        ratio = med["cpu_s"] / medians[ref]["cpu_s"]
        target = TARGETS.get(case.rsplit("-", 1)[1]) if case.startswith("net-") else None
        verdict = "" if target is None else f" (target <= {target:g}x: {'met' if ratio <= target else 'MISSED'})"
        lines.append(f"{case} / {ref}: cpu {ratio:.2f}x{verdict}")
    if lines:
        print("# ratio of median CPU time to the heap reference")
        print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
