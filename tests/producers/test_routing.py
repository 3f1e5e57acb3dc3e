"""Unbalanced routers (``producers/training/routing.py``): the draws, and the traces and runs that follow them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from etsim.chakra.graph import CollectiveType, NodeType, Workload
from etsim.chakra.validate import validate_workload
from etsim.errors import ConfigError
from etsim.network import topology_from_dict
from etsim.producers.training.job import TRAINING_ATTR
from etsim.producers.training.routing import Routing, expert_shares, rank_shares
from etsim.producers.workloads.base import parse
from etsim.simulation import simulate
from etsim.system.config import load_system_config

MOE = {"layers": 2, "hidden": 256, "heads": 8, "vocab": 1000, "seq": 128, "arch": "llama", "experts": 8,
       "top_k": 2, "expert_ffn": 512}  # fmt: skip
SYSTEM = load_system_config({"resources": {"comm_streams": 0}})


def generate(**values: Any) -> tuple[list[Any], dict[str, Any]]:
    gen, options = parse("transformer", {"model": MOE, "global_batch": 8, "dp": 4, "ep": 4, **values})
    traces = gen.generate(options)
    info = next(json.loads(a.string_val) for a in traces[0].metadata.attr if a.name == TRAINING_ATTR)
    return traces, info


def test_balanced_shares_are_exact_and_draws_are_seeded() -> None:
    assert expert_shares(Routing(), 8, 3, 1) == (0.125,) * 8
    assert Routing().balanced and Routing(0.0, 1.5).balanced and not Routing(0.0, 0.9).balanced
    drawn = expert_shares(Routing(0.5, None, 7), 64, 3, 1)
    assert math.isclose(sum(drawn), 1.0) and len(set(drawn)) == 64
    assert drawn == expert_shares(Routing(0.5, None, 7), 64, 3, 1)  # (the same micro-batch, layer and seed)
    assert drawn != expert_shares(Routing(0.5, None, 8), 64, 3, 1) != expert_shares(Routing(0.5, None, 7), 64, 4, 1)
    assert rank_shares(Routing(0.5, None, 7), 64, 4, 3, 1) == tuple(sum(drawn[16 * q : 16 * q + 16]) for q in range(4))


def test_the_loads_spread_as_the_dirichlet_says() -> None:
    # An expert's share has mean 1/E and coefficient of variation c·√((E−1)/(E + c²)).
    experts, c = 256, 0.5
    draws = [s for mb in range(40) for s in expert_shares(Routing(c), experts, mb, 0)]
    mean = sum(draws) / len(draws)
    cv = math.sqrt(sum((s - mean) ** 2 for s in draws) / len(draws)) / mean
    assert math.isclose(mean, 1 / experts)
    assert cv == pytest.approx(c * math.sqrt((experts - 1) / (experts + c * c)), rel=0.03)


def test_a_capacity_factor_caps_every_expert_and_drops_the_rest() -> None:
    free = expert_shares(Routing(0.8), 16, 0, 0)
    capped = expert_shares(Routing(0.8, 1.25), 16, 0, 0)
    assert max(capped) == pytest.approx(1.25 / 16) and max(free) > 1.25 / 16
    assert capped == tuple(min(s, 1.25 / 16) for s in free)
    # (balanced loads under a factor below 1: every expert drops the same share)
    assert expert_shares(Routing(0.0, 0.5), 16, 0, 0) == (0.5 / 16,) * 16


def _exchanges(traces: list[Any]) -> dict[tuple[int, int, int], int]:
    """Bytes of every expert-parallel send: (tag, src, dst) → size."""
    out = {}
    for r, tr in enumerate(traces):
        for j, t in enumerate(tr.types):
            if t == NodeType.COMM_SEND_NODE and tr.comm_tag[j] >= 1 << 24:
                out[(tr.comm_tag[j], r, tr.comm_dst[j])] = tr.comm_size[j]
    return out


def test_each_peer_receives_its_experts_share_and_the_bytes_are_the_all_to_alls() -> None:
    traces, info = generate(expert_imbalance=0.5)
    assert not [i for i in validate_workload(Workload(traces)) if i.severity == "error"]

    def all_to_alls(of: list[Any]) -> int:
        return sum(tr.comm_type[j] == CollectiveType.ALL_TO_ALL for tr in of for j, t in enumerate(tr.types)
                   if t == NodeType.COMM_COLL_NODE)  # fmt: skip

    assert all_to_alls(traces) == 0 and all_to_alls(generate()[0]) > 0  # (a balanced router's job has them)
    sent = _exchanges(traces)
    per_peer = 128 * 2 * 256 * 2 / 4  # a micro-batch's copies (s · top_k) of h elements, a quarter to each peer
    # micro-batch 0, layer 0, dispatch: every source sends position q its experts' share of its copies
    shares = rank_shares(Routing(0.5), 8, 4, 0, 0)
    tag = 1 << 24
    for (tg, _src, dst), size in sent.items():
        if tg == tag:
            assert size == round(per_peer * 4 * shares[dst])
    # combine: each position sends every peer the copies its experts processed for it, the same sizes back
    assert {(s, d): n for (tg, s, d), n in sent.items() if tg == tag + 1} == {
        (d, s): n for (tg, s, d), n in sent.items() if tg == tag
    }
    # every exchange moves what the balanced all-to-all moves between different ranks (dropless), to rounding:
    # Σ over sources of Σ over the other positions q of 4·share_q parts = 4·3 parts, as 4 ranks × 3 peers × 1 part
    for phase in range(4):
        total = sum(n for (tg, _, _), n in sent.items() if tg == tag + phase)
        assert total == pytest.approx(4 * 3 * per_peer, abs=12 * 0.5)
    # and the experts' rows follow the loads: a rank's expert FLOPs are its share of the group's
    ops = [next(tr.num_ops[j] for j, n in enumerate(tr.names) if n.endswith("F_mb0_c0_l0_experts")) for tr in traces]
    router = 2 * 128 * 8 * 256
    routed = [o - router for o in ops]
    assert [r / sum(routed) for r in routed] == pytest.approx(list(shares), rel=1e-7)  # (num_ops: whole FLOPs)
    assert info["expert_load_peak"] > 1.0 and info["dropped_copies"] == pytest.approx(0.0, abs=1e-12)


def test_the_same_seed_gives_the_same_traces() -> None:
    from etsim.chakra.io import serialize_trace

    first, _ = generate(expert_imbalance=0.3, routing_seed=5)
    again, _ = generate(expert_imbalance=0.3, routing_seed=5)
    other, _ = generate(expert_imbalance=0.3, routing_seed=6)
    assert [serialize_trace(t) for t in first] == [serialize_trace(t) for t in again]
    assert [serialize_trace(t) for t in first] != [serialize_trace(t) for t in other]


def test_a_nearly_balanced_router_runs_as_the_all_to_all_and_imbalance_slows_the_step() -> None:
    topology = topology_from_dict({"kind": "gpu_cluster", "preset": "dgx-h100", "gpus": 8})
    times = {}
    for c in (0.0, 1e-6, 0.3, 1.0):
        traces, _ = generate(expert_imbalance=c, tp=2, sp=True)
        times[c] = simulate(Workload(traces), topology=topology, system=SYSTEM).finish_ns
    # sends and receives of equal parts against NCCL's all-to-all of the same bytes: within its launch costs
    assert times[1e-6] == pytest.approx(times[0.0], rel=2e-3)
    assert times[0.0] < times[0.3] < times[1.0]


def test_an_unbalanced_job_folds_by_whole_expert_blocks_exactly() -> None:
    traces, _ = generate(expert_imbalance=0.5, dp=8, ep=4, global_batch=16)
    topology = topology_from_dict({"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 8})
    folded = simulate(Workload(traces), topology=topology, system=SYSTEM)
    full = simulate(Workload(traces), topology=topology, system=SYSTEM.with_overrides(fold_replicas=False))
    assert "simulated 4 of 8 ranks" in folded.sim["folded"]
    assert [r.finish_ns for r in folded.ranks] == [r.finish_ns for r in full.ranks]


def test_routing_needs_experts() -> None:
    dense = {k: v for k, v in MOE.items() if k not in ("experts", "top_k", "expert_ffn")}
    with pytest.raises(ConfigError, match="expert_imbalance needs a model with experts"):
        parse("transformer", {"model": dense, "global_batch": 8, "expert_imbalance": 0.5})
    with pytest.raises(ConfigError, match="capacity_factor needs a model with experts"):
        parse("transformer", {"model": dense, "global_batch": 8, "capacity_factor": 1.0})


def test_the_memory_estimate_counts_the_busiest_ranks_routed_copies() -> None:
    from fractions import Fraction

    from etsim.producers.training.memory import layer_activations
    from etsim.producers.training.routing import busiest_load
    from etsim.producers.workloads.transformer import job_spec

    jobs = {c: job_spec(parse("transformer", {"model": MOE, "global_batch": 8, "dp": 4, "ep": 4,
                                              "expert_imbalance": c})[1]) for c in (0.0, 0.5)}  # fmt: skip
    load = busiest_load(Routing(0.5), 8, 4, 2, 0)
    per_position = [sum(rank_shares(Routing(0.5), 8, 4, mb, 0)[q] * 4 for mb in range(2)) / 2 for q in range(4)]
    assert load == max(per_position) > 1 and busiest_load(Routing(), 8, 4, 2, 0) == 1
    terms = {c: layer_activations(job, 0) for c, job in jobs.items()}
    sbh = Fraction(128 * 256)
    # the routed copies' inputs and outputs (4·sbh each, top_k of them) and inner activations scale with the load
    extra = terms[0.5]["expert inputs and outputs"] - terms[0.0]["expert inputs and outputs"]
    assert extra == 2 * 4 * sbh * (Fraction(load) - 1)
    assert terms[0.5]["expert inner"] / terms[0.0]["expert inner"] == Fraction(load)
