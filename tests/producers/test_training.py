"""The transformer generator against the reference formulas (shared/reference/training.md).

Parameter counts and FLOPs per iteration equal the Megatron-LM closed forms; the traces' COMP nodes add up to
exactly those FLOPs; bytes per step per parallelism group equal the reference volumes; schedules have the
documented shapes; every collective is issued in the same order on every member of its group.
"""

from __future__ import annotations

import json
from collections import defaultdict
from fractions import Fraction
from typing import Any

import pytest

from etsim.chakra.graph import COLLECTIVE_NAMES, NodeType, Workload, collective_buffer_bytes
from etsim.chakra.validate import validate_workload
from etsim.errors import ConfigError
from etsim.producers.training.job import TRAINING_ATTR
from etsim.producers.training.model import MODELS, load_model
from etsim.producers.training.parallel import Layout, in_flight, schedule
from etsim.producers.workloads.base import parse

GPT = [name for name, m in MODELS.items() if m.arch == "gpt"]
SMALL = {"layers": 4, "hidden": 256, "heads": 8, "vocab": 1000, "seq": 128}


def flops(traces: list[Any]) -> int:
    """The FLOPs of all COMP nodes (memory-bound nodes say one operation, for rooflines: not counted)."""
    return sum(
        ops for tr in traces for j, t in enumerate(tr.types) if t == NodeType.COMP_NODE and (ops := tr.num_ops[j]) > 1
    )


def generate(**values: Any) -> tuple[list[Any], dict[str, Any]]:
    gen, options = parse("transformer", {"model": SMALL, "global_batch": 8, **values})
    traces = gen.generate(options)
    info = next(json.loads(a.string_val) for a in traces[0].metadata.attr if a.name == TRAINING_ATTR)
    return traces, info


@pytest.mark.parametrize("name", GPT)
def test_gpt_presets_match_the_reference_parameter_and_flop_formulas(name: str) -> None:
    m = MODELS[name]
    l, h, v, s = m.layers, m.hidden, m.vocab, m.seq  # noqa: E741
    params = 12 * l * h * h * (1 + Fraction(13, 12 * h) + Fraction(v + s, 12 * l * h))
    assert m.parameters() == params
    batch = 1536
    flops = 72 * batch * l * s * h * h * (1 + Fraction(s, 6 * h) + Fraction(v, 12 * h * l))
    assert m.model_flops(batch) == flops


@pytest.mark.parametrize(
    ("name", "billions"),
    [("gpt3-175b", 175.0), ("llama3-8b", 8.03), ("llama3-70b", 70.55), ("llama3-405b", 405.85),
     ("mixtral-8x7b", 46.70), ("megatron-1.7b", 1.7), ("megatron-18b", 18.4), ("megatron-530b", 529.6),
     ("megatron-1t", 1008.0), ("megatron-145b", 145.6)],
)  # fmt: skip
def test_presets_have_their_published_sizes(name: str, billions: float) -> None:
    # Published sizes are rounded (the 1.7B model has 1.65 billion parameters by the same formula).
    assert MODELS[name].parameters() / 1e9 == pytest.approx(billions, rel=0.03)


def test_gpt_oss_has_its_published_total_and_active_parameters_with_its_own_head_width() -> None:
    # OpenAI's model card: 116.83B parameters, 5.13B active per token (the input embedding not counted).
    m = MODELS["gpt-oss-120b"]
    assert m.head_dim == 64 != m.hidden // m.heads
    assert m.parameters() / 1e9 == pytest.approx(116.83, rel=0.01)
    active = sum(m.layer_matmul_weights(i) for i in range(m.layers)) + m.vocab * m.hidden
    assert active / 1e9 == pytest.approx(5.13, rel=0.01)
    assert m.attention_weights() == 2880 * (64 * 64 + 2 * 8 * 64) + 64 * 64 * 2880


def test_head_dim_and_kv_channels_set_the_attention_width() -> None:
    base = {"layers": 2, "hidden": 256, "heads": 8, "vocab": 0, "seq": 128}
    wide = load_model({**base, "head_dim": 64})
    assert wide.q_hidden == 512 and wide.kv_hidden == 512
    assert load_model({**base, "kv_channels": 64}) == wide
    # the attention core's FLOPs follow the heads' width: 4·s·heads·head_dim per token and layer
    narrow = load_model(base)
    core = 4 * 128 * (512 - 256)
    weights = 2 * (wide.attention_weights() - narrow.attention_weights())
    assert wide.forward_flops_per_token() - narrow.forward_flops_per_token() == 2 * (core + weights)
    with pytest.raises(ConfigError, match="head_dim 32 and kv_channels 64 differ"):
        load_model({**base, "head_dim": 32, "kv_channels": 64})
    with pytest.raises(ConfigError, match="hidden 250 is not a multiple of heads 8 \\(or give head_dim\\)"):
        load_model({**base, "hidden": 250})
    assert load_model({**base, "hidden": 250, "head_dim": 32}).q_hidden == 256


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("layout", [{"tp": 2, "pp": 2, "dp": 2}, {"tp": 2, "sp": True, "cp": 2, "pp": 2}])
def test_the_compute_nodes_execute_exactly_the_model_and_recomputation_flops(recompute: str, layout: dict) -> None:
    traces, info = generate(recompute=recompute, **layout)
    executed = flops(traces)
    model = load_model(SMALL)
    assert info["model_flops"] == model.model_flops(8)
    assert executed == pytest.approx(info["hardware_flops"], rel=1e-9)
    l, h, s, v, b = 4, 256, 128, 1000, 8  # noqa: E741
    if recompute == "full":  # Narayanan et al., Eq. 3
        assert info["hardware_flops"] == 96 * b * s * l * h * h * (1 + Fraction(s, 6 * h) + Fraction(v, 16 * l * h))
    elif recompute == "none":
        assert info["hardware_flops"] == info["model_flops"]


def test_moe_flops_count_the_active_experts_and_the_router() -> None:
    moe = {**SMALL, "experts": 4, "top_k": 2, "expert_ffn": 512, "shared_experts": 1, "arch": "llama", "kv_heads": 2}
    gen, options = parse("transformer", {"model": moe, "global_batch": 8, "tp": 2, "sp": True, "dp": 4, "ep": 2})
    traces = gen.generate(options)
    executed = flops(traces)
    assert executed == pytest.approx(load_model(moe).model_flops(8), rel=1e-9)


def volumes(traces: list[Any], info: dict[str, Any]) -> dict[tuple[str, str], float]:
    """Buffer bytes per (role, collective) summed over ranks; pipeline sends as ("pp", "send")."""
    members: dict[str, set[int]] = defaultdict(set)
    for r, tr in enumerate(traces):
        for j, t in enumerate(tr.types):
            if t == NodeType.COMM_COLL_NODE:
                members[tr.pg_name[j]].add(r)
    out: dict[tuple[str, str], float] = defaultdict(float)
    for tr in traces:
        for j, t in enumerate(tr.types):
            if t == NodeType.COMM_COLL_NODE:
                group = tr.pg_name[j]
                kind = COLLECTIVE_NAMES[tr.comm_type[j]]
                out[(info["groups"][group], kind)] += collective_buffer_bytes(
                    tr.comm_type[j], tr.comm_size[j], len(members[group])
                )
            elif t == NodeType.COMM_SEND_NODE:
                out[("pp", "send")] += tr.comm_size[j]
    return dict(out)


B, S, H, L = 8, 128, 256, 4  # the small model's batch, sequence, hidden and layers
ACT = 2  # bytes per activation element


def test_tensor_parallel_volume_is_four_all_reduces_per_layer_and_micro_batch() -> None:
    traces, info = generate(tp=4, dp=2, micro_batch=1)
    got = volumes(traces, info)
    # Per micro-batch of b sequences: 4 all-reduces of b·s·h elements per layer (2 forward, 2 backward), on each
    # of the t ranks of a group; B sequences over all micro-batches and data-parallel replicas.
    assert got[("tp", "all_reduce")] == 4 * L * B * S * H * ACT * 4
    traces, info = generate(tp=4, dp=2, recompute="full")
    assert volumes(traces, info)[("tp", "all_reduce")] == 6 * L * B * S * H * ACT * 4  # the re-run forward too


def test_sequence_parallelism_replaces_each_all_reduce_by_a_reduce_scatter_and_an_all_gather() -> None:
    plain = volumes(*generate(tp=4, dp=2))
    sp = volumes(*generate(tp=4, dp=2, sp=True))
    assert ("tp", "all_reduce") not in sp
    assert sp[("tp", "reduce_scatter")] == sp[("tp", "all_gather")] == plain[("tp", "all_reduce")]


@pytest.mark.parametrize("sp", [False, True])
def test_pipeline_volume_is_one_send_per_boundary_and_micro_batch_each_way(sp: bool) -> None:
    t, p, v = 2, 2, 2
    traces, info = generate(tp=t, pp=p, sp=sp, schedule="interleaved", virtual_stages=v, global_batch=8)
    per_send = B // info["micro_batches"] * S * H * ACT / (t if sp else 1)
    boundaries = p * v - 1  # between consecutive model chunks
    assert volumes(traces, info)[("pp", "send")] == 2 * boundaries * info["micro_batches"] * per_send * t


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_data_parallel_volume_per_zero_stage(zero: int) -> None:
    t, p, d = 2, 2, 4
    traces, info = generate(tp=t, pp=p, dp=d, zero=zero, global_batch=16, micro_batch=2)
    got = volumes(traces, info)
    params = load_model(SMALL).parameters()
    copy = SMALL["vocab"] * SMALL["hidden"]  # the last stage's copy of the tied word embedding, reduced there too
    grads = (params + copy) * 2 * d  # bf16 gradients of every parameter, on each of d replicas
    buckets = sum(len(tr.names) for tr in traces)  # a generous bound on the rounding (whole bytes per call)
    if zero == 0:
        assert got[("dp", "all_reduce")] == pytest.approx(grads, abs=buckets)
    elif zero in (1, 2):
        assert got[("dp", "reduce_scatter")] == pytest.approx(grads, abs=buckets)
        assert got[("dp", "all_gather")] == pytest.approx(grads, abs=buckets)
    else:  # every weight gathered before its forward and its backward (the embedding and its copy too)
        m = info["micro_batches"]
        assert got[("dp", "all_gather")] == pytest.approx(2 * m * (params + copy) * 2 * d, abs=buckets)
        assert got[("dp", "reduce_scatter")] == pytest.approx(grads, abs=buckets)  # every gradient, once


def _named(trace: Any, prefix: str) -> list[int]:
    return [j for j, name in enumerate(trace.names) if name.startswith(prefix)]


@pytest.mark.parametrize(("cp", "dp", "zero"), [(2, 2, 1), (2, 1, 1), (2, 2, 3)])
def test_zero_shards_over_the_gradient_groups_dp_cp_ranks_as_the_memory_model(cp: int, dp: int, zero: int) -> None:
    # The dp group holds dp·cp ranks; ZeRO once sharded over dp alone: gathers twice the model, steps twice the shard.
    from etsim.producers.training.job import OPTIMIZER_BYTES, PARAM_BYTES, rank_parameters
    from etsim.producers.workloads.transformer import job_spec

    traces, _ = generate(tp=2, cp=cp, dp=dp, zero=zero, global_batch=8)
    held = rank_parameters(job_spec(parse("transformer", {"model": SMALL, "global_batch": 8, "tp": 2, "cp": cp,
                                                          "dp": dp, "zero": zero})[1]), 0)  # fmt: skip
    shard = held / (dp * cp)
    tr = traces[0]
    [step] = _named(tr, "optimizer_step")
    assert tr.tensor_size[step] == pytest.approx(OPTIMIZER_BYTES * shard, abs=1)
    gathered = sum(tr.comm_size[j] for j in _named(tr, "param_ag") if "_l" not in tr.names[j])
    if zero == 1:
        assert gathered == pytest.approx(held * PARAM_BYTES / (dp * cp), abs=len(_named(tr, "param_ag")))
    else:  # each layer per micro-batch, forward and backward: its shard of the layer
        layer = [tr.comm_size[j] for j in _named(tr, "mb0_c0_l0_param_ag")]
        per_layer = load_model(SMALL).layer_parameters(0) / 2  # split by tp
        assert layer == [pytest.approx(per_layer * PARAM_BYTES / (dp * cp), abs=1)] * 2


def test_zero_steps_and_gathers_experts_over_their_own_group() -> None:
    """ZeRO-1 with experts: the step covers the dense share (÷ dp·cp) and the expert share (÷ edp); expert gradients
    are reduce-scattered and the experts gathered back over edp; ZeRO-3 gathers them before use."""
    from etsim.producers.training.job import OPTIMIZER_BYTES, PARAM_BYTES, stage_parameters
    from etsim.producers.workloads.transformer import job_spec

    moe = {**SMALL, "experts": 4, "top_k": 2}
    values = {"model": moe, "global_batch": 8, "dp": 4, "ep": 4, "zero": 1}
    gen, options = parse("transformer", values)
    traces = gen.generate(options)
    dense, expert = stage_parameters(job_spec(options), 0)
    edp = 1 * 1 * 4 // 4  # tp·cp·dp / (ep·etp): each rank holds the only copy of its experts
    tr = traces[0]
    [step] = _named(tr, "optimizer_step")
    assert tr.tensor_size[step] == pytest.approx(OPTIMIZER_BYTES * (dense / 4 + expert / edp), abs=1)
    assert not _named(tr, "expert_param_ag")  # (no expert-data-parallel group: nothing to gather)
    values = {**values, "ep": 2}  # two copies of each expert: edp = 2
    gen, options = parse("transformer", values)
    tr = gen.generate(options)[0]
    dense, expert = stage_parameters(job_spec(options), 0)
    [step] = _named(tr, "optimizer_step")
    assert tr.tensor_size[step] == pytest.approx(OPTIMIZER_BYTES * (dense / 4 + expert / 2), abs=1)
    assert {COLLECTIVE_NAMES[tr.comm_type[j]] for j in _named(tr, "mb") if "expert_grad" in tr.names[j]} == {
        "reduce_scatter"
    }
    gathered = sum(tr.comm_size[j] for j in _named(tr, "expert_param_ag"))
    assert gathered == pytest.approx(expert * PARAM_BYTES / 2, abs=len(_named(tr, "expert_param_ag")))
    gen, options = parse("transformer", {**values, "zero": 3})
    tr = gen.generate(options)[0]
    assert _named(tr, "mb0_c0_l0_param_ag_experts")  # gathered before the layer, as its dense weights


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_hardware_flops_leave_out_the_copies_a_capacity_drops(recompute: str) -> None:
    # HFU once counted the experts' FLOPs on tokens the capacity factor dropped (at 0.01, 99.8% of them).
    moe = {**SMALL, "arch": "llama", "experts": 8, "top_k": 2, "expert_ffn": 512}
    traces, info = generate(model=moe, dp=4, ep=4, capacity_factor=0.5, expert_imbalance=1.0, recompute=recompute)
    assert info["dropped_copies"] > 0.05
    assert flops(traces) == pytest.approx(info["hardware_flops"], rel=1e-9)
    # Nor do the model's FLOPs count them (they did: MFU 504%, above HFU's 49%, at capacity 0.05): without
    # recomputation the two are one; with it, the hardware runs the kept copies' forward pass once more.
    kept = generate(model=moe, dp=4, ep=4, capacity_factor=None, recompute=recompute)[1]
    dropped = info["dropped_copies"] * 4 * 8 * 128 * 2 * (2 * 256 * 512 * 3)  # (layers × b × s × k × FLOPs a copy)
    assert info["model_flops"] == pytest.approx(kept["model_flops"] - 3 * dropped, rel=1e-12)
    if recompute == "none":
        assert info["hardware_flops"] == info["model_flops"]
    else:
        assert info["hardware_flops"] == pytest.approx(kept["hardware_flops"] - 4 * dropped, rel=1e-12)


def test_expert_parallel_volume_is_four_all_to_alls_per_moe_layer() -> None:
    moe = {**SMALL, "experts": 4, "top_k": 2, "moe_every": 2}
    gen, options = parse("transformer", {"model": moe, "global_batch": 8, "tp": 2, "sp": True, "dp": 4, "ep": 2})
    traces = gen.generate(options)
    info = next(json.loads(a.string_val) for a in traces[0].metadata.attr if a.name == TRAINING_ATTR)
    moe_layers = 2
    # b·s·h·k elements per MoE layer, dispatch and combine, forward and backward; the whole group exchanges it.
    assert volumes(traces, info)[("ep", "all_to_all")] == 4 * moe_layers * B * S * H * 2 * ACT


def test_context_parallel_exchanges_keys_and_values_in_every_layer() -> None:
    traces, info = generate(cp=4, dp=2)
    got = volumes(traces, info)
    kv = 2 * H  # keys and values, multi-head attention
    assert got[("cp", "all_gather")] == got[("cp", "reduce_scatter")] == L * B * S * kv * ACT * 4


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved"])
def test_schedules_run_every_pass_once_and_backward_after_forward(name: str) -> None:
    p, m, v = 4, 8, (2 if name == "interleaved" else 1)
    for stage in range(p):
        ops = schedule(name, p, stage, m, v)
        assert sorted((o.kind, o.micro_batch, o.chunk) for o in ops) == sorted(
            (k, i, c) for k in "FB" for i in range(m) for c in range(v)
        )
        seen = set()
        for o in ops:
            if o.kind == "B":
                assert ("F", o.micro_batch, o.chunk) in seen
            seen.add((o.kind, o.micro_batch, o.chunk))
    assert in_flight(schedule("gpipe", p, 0, m)) == m
    assert [in_flight(schedule("1f1b", p, s, m)) for s in range(p)] == [4, 3, 2, 1]  # at most p - stage


def test_layout_is_tensor_fastest_and_groups_partition_the_ranks() -> None:
    lay = Layout(tp=2, cp=2, dp=4, pp=2, ep=2)
    assert [lay.rank(*lay.coords(r)) for r in range(lay.ranks)] == list(range(32))
    groups = lay.groups()
    assert groups["tp"][0] == [0, 1]
    for role, found in groups.items():
        ranks = sorted(r for g in found for r in g)
        assert ranks == list(range(32)), role


def test_collectives_are_issued_in_the_same_order_on_every_group_member_and_validate_passes() -> None:
    moe = {**SMALL, "experts": 4, "top_k": 2}
    gen, options = parse(
        "transformer",
        {"model": moe, "global_batch": 16, "tp": 2, "sp": True, "pp": 2, "dp": 4, "ep": 2, "zero": 1,
         "schedule": "interleaved", "virtual_stages": 2, "micro_batch": 1},
    )  # fmt: skip
    traces = gen.generate(options)
    order: dict[str, list[list[tuple[int, int]]]] = defaultdict(list)
    for tr in traces:
        mine: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for j, t in enumerate(tr.types):
            if t == NodeType.COMM_COLL_NODE:
                mine[tr.pg_name[j]].append((tr.comm_type[j], tr.comm_size[j]))
        for group, calls in mine.items():
            order[group].append(calls)
    for group, sequences in order.items():
        assert all(s == sequences[0] for s in sequences), group
    issues = validate_workload(Workload(traces))
    assert not issues


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"global_batch": 10, "dp": 4}, "not a multiple of micro_batch × dp"),
        ({"pp": 5}, "4 layers are fewer than pp 5 × 1 chunks"),
        (
            {"pp": 2, "pipeline_layers": [3, 2]},
            "pipeline_layers: expected 2 counts (pp 2 × 1 chunks) of at least 1 "
            "layer adding up to the model's 4 layers, got 3,2 (2 counts, 5 layers)",
        ),
        (
            {"pp": 2, "pipeline_layers": "even"},
            "pipeline_layers: expected auto or layer counts per model chunk such as 8,8,8,6, got 'even'",
        ),
        (
            {"pp": 3, "first_stage_layers": 1},
            "4 layers less the first/last stages' 1 do not split evenly over the other 2 stages",
        ),
        ({"pp": 2, "first_stage_layers": 1, "pipeline_layers": "auto"}, "not both"),
        (
            {"pp": 2, "schedule": "interleaved", "virtual_stages": 2, "first_stage_layers": 1},
            "need one chunk per stage",
        ),
        ({"tp": 3}, "heads (8) is not a multiple of tp 3"),
        ({"schedule": "interleaved", "virtual_stages": 2, "pp": 2, "global_batch": 3}, "multiple of pp 2"),
        ({"virtual_stages": 2}, "needs schedule interleaved"),
        (
            {"schedule": "interleaved", "pp": 2},
            "interleaved needs virtual_stages >= 2 (model chunks",
        ),
        ({"ep": 2, "dp": 2}, "must divide dp 2 and the model's experts (0)"),
        ({"precision": "fp8", "gpu": "a100-80gb"}, "no FP8"),
        ({"model": "gpt-5"}, "neither a model preset"),
        ({"efficiency": {"gemm": 2}}, "efficiency.gemm"),
        # (keys that changed nothing in silence: seq 15 over tp 2 gave 7.5 tokens a rank; MoE keys on a dense model)
        ({"model": {**SMALL, "seq": 15}, "tp": 2, "sp": True}, "seq (15) is not a multiple of cp × tp (2)"),
        ({"model": {**SMALL, "shared_experts": 1}}, "shared_experts is a mixture-of-experts key: it needs experts"),
        ({"model": {**SMALL, "experts": 4, "first_dense": 4}}, "first_dense 4 leaves none of the 4 layers an MoE"),
        ({"model": {**SMALL, "kv_lora_rank": 8, "arch": "llama", "kv_heads": 2}}, "kv_heads 2 does not apply"),
        # (an infinite GEMM dimension raised ZeroDivisionError; a tiny efficiency, durations a trace cannot hold)
        ({"efficiency": {"gemm_half": float("inf")}}, "efficiency.gemm_half: expected a finite GEMM dimension > 0"),
        ({"efficiency": {"attention": 1e-300}}, "efficiency.attention: expected a number in .0.0001, 1., got 1e-300"),
    ],
)
def test_bad_parameters_are_named(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse("transformer", {"model": SMALL, "global_batch": 8, **values})


def test_model_yaml_errors_name_the_file_and_key(tmp_path: Any) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("layers: 2\nhidden: 64\nheads: 4\nvocab: 10\nseq: 16\nexperts: 2\ntop_k: 3\n")
    with pytest.raises(ConfigError, match=r"m\.yaml: top_k 3 must be between 1 and experts 2"):
        load_model(str(path))
    path.write_text("layers: 2\nhidden: 64\nheads: 4\nvocab: 10\nseq: 16\nwidth: 3\n")
    with pytest.raises(ConfigError, match=r"m\.yaml: unknown key 'width'"):
        load_model(str(path))
    path.write_text("layers: 2\nhidden: 64\nheads: 4\nseq: 16\n")
    with pytest.raises(ConfigError, match="missing key 'vocab'"):
        load_model(str(path))


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_expert_gradients_are_all_reduced_over_every_copy_of_the_experts(ep: int) -> None:
    moe = {**SMALL, "experts": 4, "top_k": 2}
    gen, options = parse("transformer", {"model": moe, "global_batch": 8, "tp": 2, "sp": True, "dp": 4, "ep": ep})
    traces = gen.generate(options)
    info = next(json.loads(a.string_val) for a in traces[0].metadata.attr if a.name == TRAINING_ATTR)
    model = load_model(moe)
    experts = sum(4 * model.mlp_weights(model.expert_ffn) for layer in range(4) if model.is_moe(layer))
    # Each of the 8 ranks holds experts/ep of them (replicated over tensor-parallel ranks) and all-reduces their
    # gradients with the other copies (the "edp" groups, counted as data parallelism).
    assert volumes(traces, info)[("edp", "all_reduce")] == 8 * experts / ep * 2


def test_ranks_relabelled_from_their_stage_equal_ranks_built_from_scratch() -> None:
    from etsim.chakra.io import serialize_trace
    from etsim.producers.training.info import job_info
    from etsim.producers.training.job import _build_rank, build_job, job_groups
    from etsim.producers.workloads.transformer import job_spec

    moe = {**SMALL, "experts": 4, "top_k": 2}
    _, options = parse(
        "transformer",
        {"model": moe, "tp": 2, "sp": True, "pp": 2, "dp": 4, "ep": 2, "cp": 2, "zero": 1, "global_batch": 8,
         "schedule": "interleaved", "virtual_stages": 2},
    )  # fmt: skip
    job = job_spec(options)
    groups, roles, members = job_groups(job.layout)
    info = job_info(job, roles)
    columns = "ids names types duration_micros data_ptr data_idx ctrl_ptr ctrl_idx is_cpu_op comm_type comm_size "
    columns += "comm_src comm_dst comm_tag num_ops tensor_size pg_name"
    for rank, trace in enumerate(build_job(job)):
        alone = _build_rank(job, rank, groups, members, info)
        assert serialize_trace(trace) == serialize_trace(alone), rank
        assert all(getattr(trace, c) == getattr(alone, c) for c in columns.split()), rank


@pytest.mark.parametrize(
    ("name", "total", "active", "rel"),
    [("qwen3-235b-a22b", 235.0, 22.0, 0.01), ("deepseek-v3", 671.0, 37.0, 0.015),
     ("llama3.1-405b", 405.85, None, 0.01)],
)  # fmt: skip
def test_2025_presets_have_their_published_total_and_active_parameters(
    name: str, total: float, active: float | None, rel: float
) -> None:
    # Qwen3's and DeepSeek-V3's cards: 235B/22B and 671B/37B (rounded to the billion: DeepSeek's 37B is ±1.4%).
    m = MODELS[name]
    assert m.parameters() / 1e9 == pytest.approx(total, rel=0.01)
    if active is not None:
        used = sum(m.layer_matmul_weights(i) for i in range(m.layers)) + 2 * m.vocab * m.hidden
        assert used / 1e9 == pytest.approx(active, rel=rel)


def test_latent_attention_counts_every_projection_and_its_wider_scores() -> None:
    m = MODELS["deepseek-v3"]
    h, heads = 7168, 128
    weights = h * 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 * heads * (128 + 128) + heads * 128 * h
    assert m.mla and m.attention_weights() == weights
    assert m.layer_parameters(0) == weights + m.mlp_weights(18432) + 2 * h + 1536 + 512  # norms: the latents' too
    # scores over 128 + 64 wide query/key heads, values of 128: 2·s·heads·(192 + 128) FLOPs per token
    assert m.attention_core_flops(0) == 2 * m.seq * heads * (192 + 128)
    with pytest.raises(ConfigError, match="kv_lora_rank \\(latent attention\\) needs arch llama"):
        load_model({**SMALL, "kv_lora_rank": 16})
    for key in ("q_lora_rank", "v_head_dim", "rope_head_dim"):  # once taken without a latent (or silently ignored)
        with pytest.raises(ConfigError, match=f"{key} is latent attention's: it needs kv_lora_rank"):
            load_model({**SMALL, "arch": "llama", key: 16})
    with pytest.raises(ConfigError, match="moe_every: expected an integer >= 1"):  # once a ZeroDivisionError
        load_model({**SMALL, "experts": 4, "moe_every": 0})


def test_sliding_window_layers_attend_to_the_window_and_sinks_add_a_logit_per_head() -> None:
    base = {**SMALL, "arch": "llama", "seq": 1024}
    full = load_model(base)
    windowed = load_model({**base, "window": 128, "full_every": 2, "sinks": True})
    assert [windowed.keys_attended(i) for i in range(4)] == [128, 1024, 128, 1024]
    saved = 2 * (4 * (1024 - 128) * 256)  # two of four layers: 4·(s − w)·h per token fewer
    assert full.forward_flops_per_token() - windowed.forward_flops_per_token() == saved
    assert windowed.parameters() - full.parameters() == 4 * 8  # a sink logit per head and layer
    _, info = generate(model={**base, "window": 128}, recompute="selective")
    core = 4 * 8 * 1024 * sum(min(128, 1024) * 256 for _ in range(4))  # sequences · s · Σ 4·w·h
    assert info["hardware_flops"] - info["model_flops"] == core
    with pytest.raises(ConfigError, match="full_every 2 needs a window"):
        load_model({**base, "full_every": 2})


def test_a_schedule_with_no_effect_or_off_a_published_run_is_warned_about() -> None:
    from etsim.errors import EtsimWarning

    gen, options = parse("transformer", {"model": SMALL, "global_batch": 8, "schedule": "interleaved",
                                         "virtual_stages": 2})  # fmt: skip
    with pytest.warns(EtsimWarning, match="schedule interleaved with pp 1 has no effect"):
        interleaved = gen.generate(options)
    # ... and has none: the traces are 1F1B's (a tied embedding once gained a phantom second copy on the one stage)
    gen, options = parse("transformer", {"model": SMALL, "global_batch": 8})
    plain = gen.generate(options)
    assert [t.comm_size for t in interleaved] == [t.comm_size for t in plain]
    assert [t.tensor_size for t in interleaved] == [t.tensor_size for t in plain]
    from etsim.producers.workloads.transformer import layout_notes

    _, flags = parse("transformer", {"model": {**SMALL, "experts": 4}, "global_batch": 8, "sp": True,
                                     "expert_imbalance": 2.0})  # fmt: skip
    sp, imbalance = layout_notes(flags)
    assert sp.startswith("sp with tp 1 has no effect") and "with ep 1 every expert is on every rank" in imbalance
    # A capacity drops copies with ep 1 too (the step is shorter): it was said to have no effect.
    for capped in ({"capacity_factor": 0.5}, {"capacity_factor": 0.5, "expert_imbalance": 2.0}):
        _, flags = parse("transformer", {"model": {**SMALL, "experts": 4}, "global_batch": 8, **capped})
        assert layout_notes(flags) == []

    _, gpt3 = parse("transformer", {"model": "gpt3-175b", "tp": 8, "pp": 8, "global_batch": 8})
    (note,) = layout_notes(gpt3)
    assert "gpt3-175b was trained with tp 8 pp 8 on the interleaved schedule, 3 chunks per stage" in note
    _, published = parse("transformer", {"model": "gpt3-175b", "tp": 8, "pp": 8, "global_batch": 8,
                                         "schedule": "interleaved", "virtual_stages": 3})  # fmt: skip
    assert layout_notes(published) == []
    _, other = parse("transformer", {"model": "gpt3-175b", "tp": 4, "pp": 8, "global_batch": 8})
    assert layout_notes(other) == []  # (another layout: the published run says nothing about it)
    _, seeded = parse("transformer", {"model": SMALL, "global_batch": 8, "routing_seed": 3})
    assert layout_notes(seeded) == [  # (a dense model, or balanced experts: the seed draws nothing)
        "routing_seed 3 has no effect: it draws the experts' loads, which are balanced without expert_imbalance"
    ]
    _, drawn = parse("transformer", {"model": {**SMALL, "experts": 4}, "ep": 2, "dp": 2, "global_batch": 8,
                                     "expert_imbalance": 0.5, "routing_seed": 3})  # fmt: skip
    assert layout_notes(drawn) == []


def test_expert_blocks_move_the_gating_and_permutation_bytes_and_run_grouped_gemms() -> None:
    moe = {**SMALL, "arch": "llama", "experts": 8, "top_k": 2, "expert_ffn": 512}
    h, f, e, k = 256, 512, 8, 2

    def expert_node(**values: Any) -> tuple[int, int, int]:
        traces, _ = generate(model=moe, global_batch=4, **values)
        tr = traces[0]
        j = next(j for j, name in enumerate(tr.names) if name.endswith("_l0_experts"))
        return tr.tensor_size[j], tr.num_ops[j], tr.duration_micros[j]

    size, ops, _ = expert_node(ep=2, dp=2)
    t = 128  # tokens of one micro-batch on the GPU
    router = (t * h + h * e + t * e) * 2
    gating = 3 * t * e * 4  # softmax and top-k over FP32 logits
    permutation = 2 * 2 * (t + t * k) * h * 2  # every copy's row gathered before, scattered back after
    local = e // 2
    up = t * k * h + local * h * 2 * f + t * k * 2 * f  # (rows, each expert's weights, output) x 2 bytes
    down = t * k * f + local * f * h + t * k * h
    experts = (up + 3 * t * k * f + down) * 2
    assert size == router + gating + permutation + experts
    assert ops == 2 * t * e * h + 2 * t * k * (h * 2 * f + f * h)  # FLOPs: the router and the routed copies only
    # the same FLOPs over twice the local experts: each grouped GEMM runs half the rows per expert, less efficiently
    _, ops_all, time_all = expert_node(ep=1, dp=2)
    _, ops_half, time_half = expert_node(ep=2, dp=2)
    assert ops_all == ops_half and time_all > time_half


def test_expert_tensor_parallelism_groups_split_each_expert_over_consecutive_tensor_parallel_ranks() -> None:
    lay = Layout(tp=4, cp=1, dp=2, pp=1, ep=2, experts=True, etp=2)
    groups = lay.groups()
    assert groups["etp"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # the same experts (d mod ep) and the same half of each (t mod etp)
    assert groups["edp"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups["ep"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert Layout(tp=4, cp=1, dp=2, pp=1, ep=2, experts=True).groups()["edp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert Layout(tp=4, cp=1, dp=2, pp=1, ep=2, experts=True, etp=4).groups()["etp"] == groups["tp"]


@pytest.mark.parametrize("etp", [2, 4])
def test_expert_tensor_parallelism_gathers_the_copies_and_splits_the_weights(etp: int) -> None:
    moe = {**SMALL, "arch": "llama", "experts": 8, "top_k": 2, "expert_ffn": 512}
    h, f, e, k, tp = 256, 512, 8, 2, 4

    def expert_node(traces: list[Any], name: str = "_l0_experts") -> tuple[int, int]:
        tr = traces[0]
        j = next(j for j, n in enumerate(tr.names) if n.endswith(name))
        return tr.tensor_size[j], tr.num_ops[j]

    base, base_info = generate(model=moe, global_batch=4, tp=tp, sp=True, ep=2, dp=2)
    split, info = generate(model=moe, global_batch=4, tp=tp, sp=True, ep=2, dp=2, etp=etp)
    assert info["etp"] == etp and "etp" not in base_info
    # The same FLOPs: etp times the rows on 1/etp of each expert's columns; each expert's weights read 1/etp, the
    # gathered rows' inputs (h wide) and outputs (h wide) read and written etp times over.
    size1, ops1 = expert_node(base)
    size2, ops2 = expert_node(split)
    assert ops1 == ops2
    local = e // 2
    weights = local * (h * 2 * f + f * h) * 2
    copies = 128 // tp * k  # tokens of one micro-batch on one tensor-parallel rank, top_k copies each
    assert size1 - size2 == weights - weights // etp - 2 * (etp - 1) * copies * h * ACT
    # Every MoE layer and pass: the copies a rank received gathered over its etp ranks, the outputs reduce-scattered.
    got = volumes(split, info)
    ranks, micro_batches, passes = 8, 2, 2  # (tp 4 × dp 2; 4 sequences over dp 2; forward and backward)
    per_rank = copies * h * ACT * L * micro_batches * passes  # (the small model's 4 layers all have experts)
    assert got[("etp", "all_gather")] == got[("etp", "reduce_scatter")] == ranks * per_rank * etp
    assert ("etp", "all_gather") not in volumes(base, base_info)
    # Expert gradients: each rank holds 1/etp of its experts and reduces them with the ranks holding the same share.
    experts = L * e // 2 * (h * 2 * f + f * h)
    # (etp 4: each rank holds the only copy of its share, nothing to reduce)
    copies_of_share = ranks // (2 * etp)
    assert got.get(("edp", "all_reduce"), 0) == (ranks * experts / etp * 2 if copies_of_share > 1 else 0)
    assert volumes(base, base_info)[("edp", "all_reduce")] == ranks * experts * 2


def test_expert_tensor_parallelism_divides_the_expert_memory() -> None:
    from etsim.producers.training.memory import layer_activations, stage_memory
    from etsim.producers.workloads.transformer import job_spec

    moe = {**SMALL, "arch": "llama", "experts": 8, "top_k": 2, "expert_ffn": 512}
    values = {"model": moe, "global_batch": 4, "tp": 4, "sp": True, "ep": 2, "dp": 2, "zero": 1}
    jobs = {etp: job_spec(parse("transformer", {**values, "etp": etp})[1]) for etp in (1, 4)}
    mem = {etp: stage_memory(job, 0) for etp, job in jobs.items()}
    experts = Fraction(L * 8 * 3 * 256 * 512, 2)  # routed experts' weights per rank under ep 2
    assert Fraction(mem[1]["weights"]) - Fraction(mem[4]["weights"]) == 2 * (experts - experts / 4)
    # ZeRO-1 shards the experts' states over the ranks holding the same share: 8 / (2·1) of them for the whole
    # experts, 8 / (2·4) = 1 for a quarter of each: the same bytes per rank either way.
    assert mem[1]["optimizer states"] == mem[4]["optimizer states"]
    assert mem[1]["gradients"] - mem[4]["gradients"] == mem[1]["weights"] - mem[4]["weights"]
    sbh = Fraction(128 * 256)
    acts = {etp: layer_activations(job, 0)["expert inputs and outputs"] for etp, job in jobs.items()}
    assert acts[4] - acts[1] == 2 * 2 * 3 * sbh / 4  # top_k copies' inputs kept gathered over 4 ranks, not 1


def test_expert_tensor_parallelism_needs_experts_and_a_divisor_of_tp() -> None:
    moe = {**SMALL, "experts": 4, "top_k": 2}
    with pytest.raises(ConfigError, match="etp 3 must divide tp 4"):
        parse("transformer", {"model": moe, "global_batch": 8, "tp": 4, "sp": True, "etp": 3})
    with pytest.raises(ConfigError, match="needs a model with experts"):
        parse("transformer", {"model": SMALL, "global_batch": 8, "tp": 2, "etp": 2})


def test_an_untied_output_layer_is_reduced_and_stepped_on_the_last_stage() -> None:
    from etsim.producers.training.job import rank_parameters
    from etsim.producers.workloads.transformer import job_spec

    llama = {**SMALL, "arch": "llama"}
    values = {"model": llama, "global_batch": 8, "pp": 2, "dp": 2}
    traces, _ = generate(**values)
    job = job_spec(parse("transformer", values)[1])
    h, v = 256, 1000
    per_stage = [rank_parameters(job, stage) for stage in range(2)]
    layer = load_model(llama).layer_parameters(0)
    assert per_stage == [2 * layer + v * h, 2 * layer + v * h + h]  # input embedding first, output layer and norm last
    for rank, stage in ((0, 0), (2, 1)):  # (rank = dp + 2·pp)
        tr = traces[rank]
        reduced = [tr.comm_size[j] for j, t in enumerate(tr.types) if t == NodeType.COMM_COLL_NODE]
        assert sum(reduced) == per_stage[stage] * 2  # every parameter's BF16 gradient, once
    # the output layer's gradients are ready first: they open the last stage's first bucket
    tr = traces[2]
    first = next(j for j, t in enumerate(tr.types) if t == NodeType.COMM_COLL_NODE)
    assert tr.names[first].endswith("_grad_bucket0") and tr.comm_size[first] >= (v * h + h) * 2


@pytest.mark.parametrize(("schedule", "p", "v"), [("1f1b", 4, 1), ("interleaved", 2, 2)])
def test_a_tied_embedding_is_kept_on_the_last_stage_and_its_gradients_summed_with_the_first(
    schedule: str, p: int, v: int
) -> None:
    from etsim.producers.training.job import rank_parameters
    from etsim.producers.workloads.transformer import job_spec

    t, d = 2, 2
    values = {"model": SMALL, "global_batch": 8, "tp": t, "pp": p, "dp": d, "schedule": schedule}
    if v > 1:
        values["virtual_stages"] = v
    traces, info = generate(**values)
    job = job_spec(parse("transformer", values)[1])
    h, vocab = SMALL["hidden"], SMALL["vocab"]
    # Megatron-LM's embedding groups: the first and the last stage's rank of each pipeline (rank = t + 2·d + 4·p)
    groups = sorted(members for members in _members(traces, info, "emb").values())
    assert groups == sorted([tt + t * dd, tt + t * dd + t * d * (p - 1)] for tt in range(t) for dd in range(d))
    # the copy is the last stage's (held, reduced over dp and stepped), not a middle stage's
    layer = load_model(SMALL).layer_parameters(0) / t
    per_stage = [rank_parameters(job, stage) for stage in range(p)]
    layers = 4 * layer / p
    assert per_stage[1:-1] == [layers] * (p - 2)
    assert per_stage[-1] == layers + vocab * h / t
    assert per_stage[0] == layers + (vocab + SMALL["seq"]) * h / t
    # one all-reduce of the word embedding's BF16 gradient per end-stage rank, after its buckets, before its step
    got = volumes(traces, info)
    assert got[("emb", "all_reduce")] == 2 * (t * d) * vocab * h / t * 2
    for rank in (0, t * d * (p - 1)):
        tr = traces[rank]
        ar = next(j for j, name in enumerate(tr.names) if name == "embedding_grad_ar")
        step = tr.names.index("optimizer_step")
        buckets = [j for j, name in enumerate(tr.names) if "_grad_bucket" in name]
        assert buckets and set(buckets) <= _ancestors(tr, ar) and ar in _ancestors(tr, step)
    assert not any("embedding_grad_ar" in tr.names for tr in traces[t * d : t * d * (p - 1)])
    # a single stage holds one embedding: no copy, no group
    flat, flat_info = generate(global_batch=8, tp=t, dp=d)
    assert "emb" not in flat_info["groups"].values()
    assert not any("embedding_grad_ar" in tr.names for tr in flat)


def test_an_untied_model_has_no_embedding_group() -> None:
    traces, info = generate(model={**SMALL, "arch": "llama"}, global_batch=8, pp=2, dp=2)
    assert "emb" not in info["groups"].values()
    assert not any("embedding_grad_ar" in tr.names for tr in traces)


def _members(traces: list[Any], info: dict[str, Any], role: str) -> dict[str, list[int]]:
    """The ranks that issue collectives in each group of *role*."""
    found: dict[str, list[int]] = defaultdict(list)
    for r, tr in enumerate(traces):
        names = {tr.pg_name[j] for j, t in enumerate(tr.types) if t == NodeType.COMM_COLL_NODE}
        for name in sorted(names):
            if info["groups"][name] == role:
                found[name].append(r)
    return dict(found)


def _ancestors(tr: Any, node: int) -> set[int]:
    """Every node *node* depends on, directly or not (positions)."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        j = stack.pop()
        for k in (*tr.data_deps(j), *tr.ctrl_deps(j)):
            if k not in seen:
                seen.add(k)
                stack.append(k)
    return seen


def test_mfu_is_of_the_16_bit_peak_for_fp8_jobs_too() -> None:
    """An FP8 job's MFU was of the FP8 peak: faster than the same job in BF16, it read lower (18.7% against 29.6%)."""
    from etsim.network import load_network
    from etsim.report.training import training_lines, training_report
    from etsim.simulation import simulate

    model = {"layers": 2, "hidden": 1024, "heads": 8, "vocab": 1000, "seq": 512, "arch": "llama"}
    mfu = {}
    for precision in ("bf16", "fp8"):
        values = {"model": model, "global_batch": 2, "tp": 8, "gpu": "h100-sxm", "precision": precision}
        gen, options = parse("transformer", values)
        traces = gen.generate(options)
        info = next(json.loads(a.string_val) for a in traces[0].metadata.attr if a.name == TRAINING_ATTR)
        assert info["peak_flops_per_gpu"] == 989e12
        topology = load_network({"kind": "gpu_cluster", "preset": "dgx-h100", "gpus": 8}).topology
        report = training_report(info, simulate(Workload(traces), topology=topology), None)
        mfu[precision] = report["mfu"]
        if precision == "fp8":
            assert "(of the BF16 peak)" in "\n".join(training_lines(report))
    assert mfu["fp8"] > mfu["bf16"]
