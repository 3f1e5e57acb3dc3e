"""``transformer``: one training iteration of a GPT/Llama/MoE model under TP/SP/PP/DP/EP/CP and ZeRO.

The traces are built by :mod:`etsim.producers.training.job`; this module declares the parameters (the flags of
``etsim workload gen transformer``, the keys of ``workload: {generate: transformer}``) and checks them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from etsim.chakra.graph import Trace
from etsim.errors import ConfigError, warn
from etsim.options import Boolean, Choice, Integer, ListOf, Number, Parser, Size, option
from etsim.options import Optional as OptionalOf
from etsim.producers.training.job import JobSpec, build_job, job_groups
from etsim.producers.training.model import MODELS, ModelSpec, load_model
from etsim.producers.training.parallel import SCHEDULES, Layout
from etsim.producers.training.routing import Routing
from etsim.producers.training.stages import split_layers
from etsim.producers.workloads.base import WORKLOAD_GENERATORS, Rewrite, WorkloadGenerator
from etsim.system.gpus import GPUS, gpu_preset, parse_efficiency

__all__ = ["TransformerGenerator", "job_spec"]


class ModelName(Parser):
    """A model preset name, the path of a model YAML, or (in experiment files) a mapping of its keys."""

    metavar = "PRESET|FILE"

    def __call__(self, value: Any, *, key: str) -> Any:
        """*value*, once :func:`~etsim.producers.training.model.load_model` accepts it."""
        if isinstance(value, Mapping):
            load_model(value, key)
            return dict(value)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: expected a model preset ({', '.join(MODELS)}) or a model YAML path")
        load_model(value, key)
        return value


class Efficiencies(Parser):
    """Overrides of the compute-efficiency model: ``gemm=0.7,attention=0.5`` or a mapping."""

    metavar = "KIND=X,…"

    def __call__(self, value: Any, *, key: str) -> dict[str, float]:
        """The overrides as a mapping, checked."""
        if isinstance(value, str):
            return self.from_text(value, key=key)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping such as {{gemm: 0.7}}, got {value!r}") from None
        parse_efficiency(value, key)
        return {str(k): float(v) for k, v in value.items()}

    def from_text(self, text: str, *, key: str) -> dict[str, float]:
        """``gemm=0.7,attention=0.5``."""
        values: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, sep, number = item.partition("=")
            try:
                values[name.strip()] = float(number)
            except ValueError:
                raise ConfigError(f"{key}: expected KIND=NUMBER pairs such as gemm=0.7, got {item!r}") from None
            if not sep:
                raise ConfigError(f"{key}: expected KIND=NUMBER pairs such as gemm=0.7, got {item!r}")
        return self(values, key=key)


class PipelineLayers(Parser):
    """``auto``, or the layers of each model chunk: ``8,8,8,6`` (or a list)."""

    metavar = "auto|N,N,…"

    def __call__(self, value: Any, *, key: str) -> Any:
        """``"auto"``, None, or the counts as a list of integers >= 1."""
        if value is None or value == "auto":
            return value
        try:
            return ListOf(Integer(1), example="[8, 8, 8, 6]", what="layer counts")(value, key=key)
        except ConfigError:
            expected = "expected auto or layer counts per model chunk such as 8,8,8,6"
            raise ConfigError(f"{key}: {expected}, got {value!r}") from None

    def from_text(self, text: str, *, key: str) -> Any:
        """``auto`` or comma-separated counts."""
        return self(text.strip(), key=key)


def job_spec(options: Any) -> JobSpec:
    """The :class:`~etsim.producers.training.job.JobSpec` of checked options."""
    o = options
    job = _job_spec(o)
    split = split_layers(job, o.pipeline_layers, o.first_stage_layers, o.last_stage_layers, "pipeline_layers")
    return replace(job, pipeline_layers=split)


def _job_spec(o: Any) -> JobSpec:
    """The job with an even split of its layers (:func:`job_spec` then splits them as the options say)."""
    model = load_model(o.model, "model")
    return JobSpec(
        model=model,
        layout=Layout(
            tp=o.tp, cp=o.cp, dp=o.dp, pp=o.pp, ep=o.ep, experts=model.experts > 0, etp=o.etp, tied=model.tied
        ),
        sp=o.sp,
        global_batch=o.global_batch,
        micro_batch=o.micro_batch,
        # interleaving one stage does nothing (layout_notes says so): it runs as 1F1B, without chunks' copies
        schedule="1f1b" if (o.schedule, o.pp) == ("interleaved", 1) else o.schedule,
        chunks=o.virtual_stages if o.schedule == "interleaved" and o.pp > 1 else 1,
        zero=o.zero,
        recompute=o.recompute,
        precision=o.precision,
        gpu=gpu_preset(o.gpu, "gpu"),
        efficiency=parse_efficiency(o.efficiency, "efficiency"),
        bucket_bytes=o.bucket_size,
        attention=o.attention,
        routing=Routing(o.expert_imbalance, o.capacity_factor, o.routing_seed),
    )


#: The published training runs of presets whose source states their layout: what a job with the same tensor and
#: pipeline parallelism is told when it runs another schedule.
PUBLISHED_RUNS: dict[str, dict[str, Any]] = {
    "gpt3-175b": {"tp": 8, "pp": 8, "schedule": "interleaved", "virtual_stages": 3, "sp": True,
                  "recompute": "selective", "source": "Korthikanti et al. 2022 (64 A100s, 13.75 s per step)"},
    "megatron-530b": {"tp": 8, "pp": 35, "schedule": "interleaved", "virtual_stages": 3, "sp": True,
                      "recompute": "selective", "source": "Korthikanti et al. 2022 (280 A100s, 37.83 s per step)"},
}  # fmt: skip


def layout_notes(options: Any) -> list[str]:
    """What a job's layout does not do that its user may expect (each a warning when the job is generated).

    A schedule with no effect (interleaving one stage), or a preset's published run on the same tensor and pipeline
    parallelism with another schedule (:data:`PUBLISHED_RUNS`).
    """
    o, notes = options, []
    if o.pp == 1 and o.schedule == "interleaved":
        notes.append(
            f"schedule interleaved with pp 1 has no effect: its {o.virtual_stages} model chunks would all run on the "
            "one stage, so it runs as 1F1B; interleaving shortens a bubble of several stages"
        )
    if o.sp and o.tp == 1:
        notes.append("sp with tp 1 has no effect: sequence parallelism splits what tensor parallelism shares")
    if o.ep == 1 and o.expert_imbalance and o.capacity_factor is None:  # (a capacity drops copies on one rank too)
        notes.append("expert_imbalance shapes the tokens each expert-parallel rank gets: with ep 1 every expert is on "
                     "every rank, and without a capacity_factor (nothing dropped) it has no effect")  # fmt: skip
    if o.routing_seed and not o.expert_imbalance:
        notes.append(f"routing_seed {o.routing_seed} has no effect: it draws the experts' loads, which are balanced "
                     "without expert_imbalance")  # fmt: skip
    published = PUBLISHED_RUNS.get(o.model) if isinstance(o.model, str) else None
    if published and (o.tp, o.pp) == (published["tp"], published["pp"]):
        wanted = (published["schedule"], published["virtual_stages"])
        if (o.schedule, o.virtual_stages if o.schedule == "interleaved" else 1) != wanted:
            notes.append(
                f"{o.model} was trained with tp {o.tp} pp {o.pp} on the {wanted[0]} schedule, {wanted[1]} chunks per "
                f"stage ({published['source']}); this job runs {o.schedule}: give schedule {wanted[0]} and "
                f"virtual_stages {wanted[1]} to reproduce it"
            )
    return notes


#: How many nodes relabelled from a stage's first rank cost as much memory as one built node (measured: about 43
#: bytes each, against some 570).
RELABELLED_SHARE = 12


@WORKLOAD_GENERATORS.register("transformer")
class TransformerGenerator(WorkloadGenerator):
    """One training iteration of a transformer (GPT, Llama, MoE) under every parallelism, timed on a GPU preset.

    Tensor (with or without sequence parallelism), pipeline (GPipe, 1F1B, interleaved), data (ZeRO 0-3), expert
    and context parallelism, activation recomputation (:mod:`etsim.producers.training.job`).
    """

    name = "transformer"
    summary = "a transformer training iteration: TP/SP/PP/DP/EP/CP, ZeRO, recomputation, GPU compute times"
    training_job = True

    @dataclass(frozen=True, kw_only=True)
    class Options(WorkloadGenerator.Options):
        """The model, the parallel layout, the batch and the GPU."""

        model: Any = option(help=f"model preset ({', '.join(MODELS)}) or model YAML", parse=ModelName())
        tp: int = option(1, "tensor-parallel degree", Integer(1))
        pp: int = option(1, "pipeline-parallel degree (stages)", Integer(1))
        dp: int = option(1, "data-parallel degree", Integer(1))
        cp: int = option(1, "context-parallel degree", Integer(1))
        ep: int = option(1, "expert-parallel degree (divides dp)", Integer(1))
        etp: int = option(
            1, "expert tensor-parallel degree: the tensor-parallel ranks each expert is split over (divides tp)",
            Integer(1),
        )  # fmt: skip
        sp: bool = option(False, "sequence parallelism with tensor parallelism", Boolean())
        expert_imbalance: float = option(
            0.0, "coefficient of variation of the experts' loads, drawn per micro-batch and layer (0: balanced)",
            Number(0.0, 10.0),
        )  # fmt: skip
        capacity_factor: float | None = option(
            None, "each expert keeps at most this many times its mean load, dropping the rest (default: dropless)",
            OptionalOf(Number(0.01)),
        )  # fmt: skip
        routing_seed: int = option(0, "seed of the experts' loads", Integer(0))
        global_batch: int = option(help="sequences per iteration (B)", parse=Integer(1))
        micro_batch: int = option(1, "sequences per micro-batch (b)", Integer(1))
        schedule: str = option("1f1b", "pipeline schedule", Choice(*SCHEDULES))
        virtual_stages: int = option(1, "model chunks per stage for the interleaved schedule (v)", Integer(1))
        zero: int = option(0, "ZeRO stage: 0 all-reduce, 1/2 sharded optimizer, 3 sharded parameters", Integer(0, 3))
        recompute: str = option("none", "activation recomputation", Choice("none", "selective", "full"))
        precision: str = option("bf16", "GEMM precision", Choice("bf16", "fp8"))
        gpu: str = option("a100-80gb", "GPU preset", Choice(*GPUS))
        bucket_size: int = option(80_000_000, "data-parallel gradient bucket", Size(1))
        attention: str = option(
            "fused",
            "attention kernels, for the memory estimate: fused (flash: no score matrix kept) or unfused",
            Choice("fused", "unfused"),
        )
        pipeline_layers: Any = option(
            None, "layers of each model chunk (p·v counts, e.g. 8,8,8,6), or auto: balanced by compute time "
            "(default: even, or auto when the layers do not divide)", PipelineLayers(),
        )  # fmt: skip
        first_stage_layers: int | None = option(
            None,
            "layers of the first pipeline stage (Megatron-LM's; the other stages share the rest)",
            OptionalOf(Integer(1)),
        )
        last_stage_layers: int | None = option(
            None,
            "layers of the last pipeline stage (Megatron-LM's; the other stages share the rest)",
            OptionalOf(Integer(1)),
        )
        efficiency: dict[str, float] = option(
            help="compute-efficiency overrides, e.g. gemm=0.7,attention=0.5", parse=Efficiencies(), default_factory=dict
        )

    def check(self, options: Any, key: Callable[[str], str]) -> Any:
        """Divisibilities: batch by micro-batch and dp, layers by stages and chunks, heads by tp, and the like."""
        o = options
        model: ModelSpec = load_model(o.model, key("model"))
        if o.global_batch % (o.micro_batch * o.dp):
            raise ConfigError(
                f"{key('global_batch')} {o.global_batch} is not a multiple of {key('micro_batch')} × {key('dp')} "
                f"({o.micro_batch} × {o.dp})"
            )
        v = o.virtual_stages if o.schedule == "interleaved" else 1
        if o.virtual_stages > 1 and o.schedule != "interleaved":
            raise ConfigError(f"{key('virtual_stages')} {o.virtual_stages} needs {key('schedule')} interleaved")
        if o.schedule == "interleaved" and o.virtual_stages < 2:
            # One chunk per stage is 1F1B: a run labelled interleaved would not be one.
            raise ConfigError(
                f"{key('schedule')} interleaved needs {key('virtual_stages')} >= 2 (model chunks per stage); with 1 it "
                f"is 1F1B: give {key('virtual_stages')} 2 or more, or {key('schedule')} 1f1b"
            )
        if o.pipeline_layers is not None or o.first_stage_layers is not None or o.last_stage_layers is not None:
            split_layers(_job_spec(o), o.pipeline_layers, o.first_stage_layers, o.last_stage_layers,
                         key("pipeline_layers"))  # fmt: skip
        elif model.layers < o.pp * v:
            raise ConfigError(f"the model's {model.layers} layers are fewer than {key('pp')} {o.pp} × {v} chunks")
        m = o.global_batch // (o.micro_batch * o.dp)
        if o.schedule == "interleaved" and m % o.pp:
            raise ConfigError(
                f"{key('schedule')} interleaved needs the micro-batches per pipeline ({m}) to be a multiple of "
                f"{key('pp')} {o.pp}"
            )
        for name, size in (("heads", model.heads), ("kv_heads", model.kv_heads), ("ffn", model.ffn)):
            if size % o.tp:
                raise ConfigError(f"the model's {name} ({size}) is not a multiple of {key('tp')} {o.tp}")
        if model.seq % o.cp:
            raise ConfigError(f"the model's seq ({model.seq}) is not a multiple of {key('cp')} {o.cp}")
        if o.sp and model.seq % (o.cp * o.tp):  # (sequence parallelism splits each rank's tokens over tp)
            raise ConfigError(
                f"{key('sp')}: the model's seq ({model.seq}) is not a multiple of {key('cp')} × {key('tp')} "
                f"({o.cp * o.tp}): sequence parallelism gives each tensor-parallel rank an equal part"
            )
        if o.ep > 1 and (o.dp % o.ep or not model.experts or model.experts % o.ep):
            raise ConfigError(
                f"{key('ep')} {o.ep} must divide {key('dp')} {o.dp} and the model's experts ({model.experts})"
            )
        if o.etp > 1 and (o.tp % o.etp or not model.experts):
            raise ConfigError(
                f"{key('etp')} {o.etp} must divide {key('tp')} {o.tp} and needs a model with experts"
                + ("" if model.experts else f" ({model.name} has none)")
            )
        if (o.expert_imbalance or o.capacity_factor is not None) and not model.experts:
            what = key("expert_imbalance") if o.expert_imbalance else key("capacity_factor")
            raise ConfigError(f"{what} needs a model with experts ({model.name} has none)")
        if o.etp > 1 and model.expert_ffn % o.etp:
            raise ConfigError(f"the model's expert_ffn ({model.expert_ffn}) is not a multiple of {key('etp')} {o.etp}")
        if model.experts and o.tp > 1 and not o.sp:
            raise ConfigError(f"a mixture-of-experts model with {key('tp')} > 1 needs {key('sp')} (as in Megatron-LM)")
        if o.precision == "fp8":
            gpu_preset(o.gpu, key("gpu")).peak("fp8")
        return options

    def nodes(self, options: Any) -> int:
        """Per micro-batch, layer and pass: up to four COMP nodes and eight collectives; a little more per rank."""
        o = options
        model = load_model(o.model, "model")
        m = o.global_batch // (o.micro_batch * o.dp)
        passes = 3 if o.recompute == "full" else 2
        per_layer = 12 if (o.sp or o.cp > 1) else 6
        unbalanced = (o.expert_imbalance or o.capacity_factor is not None) and o.ep > 1
        if unbalanced:  # each all-to-all as a send and a receive per peer
            per_layer += 2 * 2 * (o.ep - 1)
        ranks = o.tp * o.pp * o.dp * o.cp
        per_rank = m * model.layers // o.pp * passes * per_layer + 8 * m + 64
        # One rank per stage (per expert-parallel position, unbalanced) is built; the others are relabelled copies
        # sharing its columns and nodes (three new list slots a node): counted as a share of a built node.
        built = o.pp * (o.ep if unbalanced else 1)
        return built * per_rank + (ranks - built) * per_rank // RELABELLED_SHARE

    def generate(self, options: Any) -> list[Trace]:
        """One trace per rank (a layout with no effect, or off a preset's published run, is warned about)."""
        for note in layout_notes(options):
            warn(note)
        return build_job(job_spec(options))

    def rewrites(self, options: Any) -> list[Rewrite]:
        """The changes that keep the model, the global batch and the GPU count.

        The micro-batch (×2, ÷2), the pipeline schedule (``1f1b``, ``gpipe``, ``interleaved`` with v = 2, 3,
        4 chunks), a factor 2 moved between two of tp, pp and dp, activation recomputation, the ZeRO stage,
        sequence parallelism, the gradient bucket (×2, ÷2).
        """
        o = options
        out = [Rewrite((("micro_batch", b),), "pp") for b in (o.micro_batch * 2, o.micro_batch // 2) if b >= 1]
        schedules = [("1f1b", 1), ("gpipe", 1), *(("interleaved", k) for k in (2, 3, 4))]
        for schedule, chunks in schedules:
            if (schedule, chunks) != (o.schedule, o.virtual_stages) and o.pp > 1:
                out.append(Rewrite((("schedule", schedule), ("virtual_stages", chunks)), "pp"))
        degrees = {"tp": o.tp, "pp": o.pp, "dp": o.dp}
        for a, b in (("tp", "pp"), ("pp", "tp"), ("pp", "dp"), ("dp", "pp"), ("tp", "dp"), ("dp", "tp")):
            if degrees[b] % 2 == 0:
                new = {a: degrees[a] * 2, b: degrees[b] // 2}
                out.append(Rewrite(tuple(sorted(new.items())), "pp" if "pp" in (a, b) else "tp"))
        out += [Rewrite((("recompute", r),), "compute") for r in ("none", "selective", "full") if r != o.recompute]
        if o.dp > 1:
            out += [Rewrite((("zero", z),), "dp") for z in range(4) if z != o.zero]
            sizes = (o.bucket_size * 2, o.bucket_size // 2)
            out += [Rewrite((("bucket_size", size),), "dp") for size in sizes if size >= 1 << 20]
        if o.tp > 1:
            out.append(Rewrite((("sp", not o.sp),), "tp"))
        return out

    def memory_rewrites(self, options: Any) -> list[Rewrite]:
        """The changes that lower the memory per GPU, in the order to try them (each kept with the ones before).

        Sequence parallelism, selective recomputation, the next ZeRO stage, full recomputation, half the micro-batch.
        """
        o = options
        out = []
        if o.tp > 1 and not o.sp:
            out.append(Rewrite((("sp", True),), "memory"))
        if o.recompute == "none":
            out.append(Rewrite((("recompute", "selective"),), "memory"))
        if o.dp > 1 and o.zero < 3:
            out.append(Rewrite((("zero", o.zero + 1),), "memory"))
        if o.recompute != "full":
            out.append(Rewrite((("recompute", "full"),), "memory"))
        if o.micro_batch > 1:
            out.append(Rewrite((("micro_batch", o.micro_batch // 2),), "memory"))
        return out

    def comm_groups(self, options: Any) -> dict[str, list[int]]:
        """Every tensor-, context-, data-, expert- and expert-data-parallel group, by ``pg_name``."""
        return job_groups(job_spec(options).layout)[2]

    def collectives(self, options: Any) -> list[str]:
        """The collective types the traces use, in order of first use."""
        o = options
        model = load_model(o.model, "model")
        out: list[str] = []
        sharded = o.zero >= 1 and o.dp * o.cp > 1
        if (o.sp and o.tp > 1) or o.cp > 1 or sharded:
            out += ["all_gather", "reduce_scatter"]
        expert_copies = o.tp * o.cp * o.dp // o.ep
        experts_reduced = model.experts and expert_copies > 1 and o.zero == 0  # (under ZeRO: reduce-scattered)
        tied = model.tied and o.pp > 1  # (the two copies of a tied embedding: their gradients all-reduced)
        if (o.tp > 1 and not o.sp) or (o.dp * o.cp > 1 and o.zero == 0) or experts_reduced or tied:
            out.append("all_reduce")
        balanced = Routing(o.expert_imbalance, o.capacity_factor, o.routing_seed).balanced
        if o.ep > 1 and balanced:  # (an unbalanced router's exchange is a send and a receive per peer)
            out.append("all_to_all")
        return out
