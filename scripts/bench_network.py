#!/usr/bin/env python3
"""Benchmark the network models: messages/s, engine events/s, wall and CPU time, peak RSS.

Each case runs in a fresh child process (so peak RSS is per case). Usage:

    python scripts/bench_network.py            # default cases
    python scripts/bench_network.py --large    # adds the 1024-NPU ring all-reduce (2.1 M messages)
    python scripts/bench_network.py --case analytical-1M   # one case, in this process

Cases:

- ``simpy-baseline-1M``: the driver of ``analytical-1M`` with a bare SimPy timeout per message: the
  ceiling a one-event-per-message model can reach on this machine.
- ``analytical-1M``: 1,000,000 analytical transfers on ring64, 64 concurrent chains (each source sends
  its next message when the previous one is delivered; destinations cycle through all offsets).
- ``link-a2a-ring64``: all-to-all on ring64 with the link model, 1 MiB per pair, repeated 4 times
  (16,128 messages, ~16 hops each: every hop is an event).
- ``link-a2a-ring64-packets``: one round of it with 64 KiB packets (16 packets per message).
- ``link-ring-allreduce-256`` / ``-1024``: the ring all-reduce microbenchmark of
  reference/performance.md §2 on the link model (neighbour messages, each step waits for the previous
  one's arrival); checks the closed form ``2(P−1)(T + L)``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import simpy

from etsim.network import build_model, ring

B, L = 50.0, 1000.0  # 50 GB/s, 1 us


def _events(env: simpy.Environment) -> int:
    return next(env._eid)  # SimPy's scheduling counter: events scheduled so far


def case_simpy_baseline_1m() -> dict[str, float]:
    """The same driver shape as analytical-1M with a bare ``env.timeout`` instead of a model."""
    env = simpy.Environment()
    npus, total = 64, 1_000_000
    per_source = total // npus
    sent = [0] * npus

    def send(src: int) -> None:
        k = sent[src]
        if k == per_source:
            return
        sent[src] = k + 1
        env.timeout(1000.0 + 65536 / B).callbacks.append(lambda _e, s=src: send(s))

    for src in range(npus):
        send(src)
    env.run()
    return {"messages": float(sum(sent)), "events": float(_events(env)), "sim_ns": env.now}


def case_analytical_1m() -> dict[str, float]:
    env = simpy.Environment()
    npus, total = 64, 1_000_000
    model = build_model(env, ring(npus, B, L), "analytical")
    per_source = total // npus
    sent = [0] * npus

    def send(src: int) -> None:
        k = sent[src]
        if k == per_source:
            return
        sent[src] = k + 1
        dst = (src + 1 + k % (npus - 1)) % npus
        model.transfer(src, dst, 65536).callbacks.append(lambda _e, s=src: send(s))

    for src in range(npus):
        send(src)
    env.run()
    return {"messages": float(sum(sent)), "events": float(_events(env)), "sim_ns": env.now}


def _a2a(packet_size: int | None) -> dict[str, float]:
    env = simpy.Environment()
    npus, size = 64, 1 << 20
    rounds = 1 if packet_size else 4
    options = {"packet_size": packet_size} if packet_size else {}
    model = build_model(env, ring(npus, B, L), "link", options)
    count = 0
    for _ in range(rounds):
        for src in range(npus):
            for offset in range(1, npus):
                model.transfer(src, (src + offset) % npus, size)
                count += 1
    env.run()
    busy = max(s.busy for s in model.link_stats())
    return {"messages": float(count), "events": float(_events(env)), "sim_ns": env.now, "max_link_busy_ns": busy}


def case_link_a2a() -> dict[str, float]:
    return _a2a(None)


def case_link_a2a_packets() -> dict[str, float]:
    return _a2a(65536)


def _ring_allreduce(npus: int) -> dict[str, float]:
    env = simpy.Environment()
    size = 256 << 20
    chunk = size // npus
    steps = 2 * (npus - 1)
    model = build_model(env, ring(npus, B, L), "link")
    count = 0

    def send(src: int, step: int) -> None:
        nonlocal count
        count += 1
        dst = (src + 1) % npus
        event = model.transfer(src, dst, chunk)
        if step + 1 < steps:
            event.callbacks.append(lambda _e: send(dst, step + 1))

    for src in range(npus):
        send(src, 0)
    env.run()
    expected = steps * (chunk / B + L)
    if abs(env.now - expected) > 1e-9 * expected:
        raise AssertionError(f"ring all-reduce finished at {env.now}, closed form {expected}")
    return {"messages": float(count), "events": float(_events(env)), "sim_ns": env.now}


def case_ring_allreduce_256() -> dict[str, float]:
    return _ring_allreduce(256)


def case_ring_allreduce_1024() -> dict[str, float]:
    return _ring_allreduce(1024)


CASES = {
    "simpy-baseline-1M": case_simpy_baseline_1m,
    "analytical-1M": case_analytical_1m,
    "link-a2a-ring64": case_link_a2a,
    "link-a2a-ring64-packets": case_link_a2a_packets,
    "link-ring-allreduce-256": case_ring_allreduce_256,
    "link-ring-allreduce-1024": case_ring_allreduce_1024,
}


def run_case(name: str) -> dict[str, float | str]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result: dict[str, float | str] = dict(CASES[name]())
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    result.update(
        case=name,
        wall_s=wall,
        cpu_s=cpu,
        messages_per_cpu_s=float(result["messages"]) / cpu,
        events_per_cpu_s=float(result["events"]) / cpu,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), help="run one case in this process and print JSON")
    parser.add_argument("--large", action="store_true", help="include the 1024-NPU ring all-reduce")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0
    names = [n for n in CASES if args.large or n != "link-ring-allreduce-1024"]
    header = f"{'case':<26} {'messages':>10} {'events':>10} {'wall s':>7} {'CPU s':>7} {'msg/CPU-s':>10} "
    print(header + f"{'events/CPU-s':>12} {'RSS MB':>7}")
    for name in names:
        out = subprocess.run(
            [sys.executable, __file__, "--case", name], check=True, capture_output=True, text=True
        ).stdout
        r = json.loads(out)
        print(
            f"{name:<26} {r['messages']:>10,.0f} {r['events']:>10,.0f} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} "
            f"{r['messages_per_cpu_s']:>10,.0f} {r['events_per_cpu_s']:>12,.0f} {r['peak_rss_mb']:>7.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
