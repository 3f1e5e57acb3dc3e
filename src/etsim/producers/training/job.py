"""One training iteration of a transformer as one Chakra ET trace per rank (the ``transformer`` generator).

Per micro-batch and layer a rank runs an attention block and an MLP (or expert) block, each one COMP node whose
``num_ops`` (FLOPs) and ``tensor_size`` (HBM bytes) are the sums over its kernels and whose duration is their
time on the chosen GPU (:mod:`etsim.system.gpus`); around them the tensor-parallel collectives (two all-reduces
per layer and pass, or with sequence parallelism an all-gather before and a reduce-scatter after each block),
context-parallel key/value all-gathers, expert-parallel all-to-alls, and between pipeline stages a SEND and a
RECV per micro-batch and chunk. Each stage runs its schedule (:func:`~etsim.producers.training.parallel.schedule`)
in order: an operation's first compute waits for the previous operation's last. Data-parallel gradients are
reduced in buckets as the last micro-batch's backward produces them (overlapping it), ZeRO-3 gathers each
layer's parameters before its forward and backward on every micro-batch, and the optimizer step follows.
Every collective is issued in the same order on every member of its group.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import CollectiveType, Trace
from etsim.producers.training.describe import TRAINING_ATTR, rank_metadata
from etsim.producers.training.model import ModelSpec
from etsim.producers.training.parallel import Layout, Op, schedule
from etsim.producers.training.relabel import relabelled
from etsim.producers.training.routing import MOE_TAG_BASE, Routing, exchange, rank_shares
from etsim.system.gpus import Efficiency, Gpu

__all__ = ["ACTIVATION_BYTES", "GRAD_BYTES", "PARAM_BYTES", "TRAINING_ATTR", "JobSpec", "build_job", "job_groups"]

#: Bytes per element of activations, parameters and gradients (16-bit mixed precision; FP8 only speeds up GEMMs).
ACTIVATION_BYTES = PARAM_BYTES = GRAD_BYTES = 2
#: Bytes per parameter the optimizer step reads and writes (Adam: fp32 master weights and two moments).
OPTIMIZER_BYTES = 30

AR, AG, RS = CollectiveType.ALL_REDUCE, CollectiveType.ALL_GATHER, CollectiveType.REDUCE_SCATTER
A2A = CollectiveType.ALL_TO_ALL


@dataclass(frozen=True)
class JobSpec:
    """Everything that determines the traces."""

    model: ModelSpec
    layout: Layout
    sp: bool
    global_batch: int
    micro_batch: int
    schedule: str
    chunks: int
    zero: int
    recompute: str
    precision: str
    gpu: Gpu
    efficiency: Efficiency
    bucket_bytes: int
    attention: str = "fused"
    """``fused`` (flash attention: the score matrix is never stored) or ``unfused`` (for the memory estimate)."""
    pipeline_layers: tuple[int, ...] = ()
    """Layers of each model chunk, chunk 0 first (``p · v`` counts); empty: ``layers / (p · v)`` each."""
    routing: Routing = field(default_factory=Routing)
    """How the router spreads tokens over the experts (:mod:`~etsim.producers.training.routing`)."""

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration: ``B / (b · d)``."""
        return self.global_batch // (self.micro_batch * self.layout.dp)

    @cached_property
    def chunk_layers(self) -> tuple[int, ...]:
        """Layers of each model chunk (model chunk ``k`` runs on stage ``k mod p``)."""
        chunks = self.layout.pp * self.chunks
        return self.pipeline_layers or (self.model.layers // chunks,) * chunks

    def layers_of(self, chunk: int) -> range:
        """The layers of model *chunk*."""
        first = sum(self.chunk_layers[:chunk])
        return range(first, first + self.chunk_layers[chunk])

    def with_recompute(self, recompute: str) -> JobSpec:
        """The same job with another recomputation mode."""
        return replace(self, recompute=recompute)


@dataclass
class _Cost:
    """A COMP node being assembled: FLOPs, bytes and ns of its kernels."""

    flops: float = 0.0
    nbytes: float = 0.0
    ns: float = 0.0


class _Rank:
    """Builds one rank's trace."""

    def __init__(self, job: JobSpec, rank: int, group_ids: dict[str, dict[int, str]]) -> None:
        self.job = job
        self.rank = rank
        self.b = TraceBuilder()
        self.groups = {role: ids[rank] for role, ids in group_ids.items() if rank in ids}
        lay = job.layout
        self.t, self.c, self.d, self.p = lay.coords(rank)
        m = job.model
        self.n = job.micro_batch * m.seq // lay.cp  # tokens of one micro-batch on this rank
        self.last_compute: int | None = None
        # The last collective issued on each group: the next one waits for it, as collectives of one communicator
        # run one after the other on its stream (and so every member issues them in one order).
        self.last_collective: dict[str, int] = {}
        self.stage_chunks = [k * lay.pp + self.p for k in range(job.chunks)]
        self.total_chunks = lay.pp * job.chunks
        self.grad_collectives: list[int] = []
        # Gradient buckets, in the order the last micro-batch's backward makes them: their sizes (parameters), and
        # the parameters waiting in the one being filled.
        self.bucket_sizes: list[float] = []
        self.pending_bytes = 0.0
        self.grad_role = "dp" if "dp" in self.groups else None
        self.expert_sizes: list[float] = []  # experts' gradients reduced over edp, per layer (ZeRO gathers them back)
        self.dp_size, self.edp_size = lay.dense_copies, lay.expert_copies  # ZeRO's shards (as the memory model's)
        #: What the next pass waits for: the previous pass's last compute and tensor-parallel collectives.
        self.prev: list[int] = []
        self.micro_batch = 0  # of the pass being built (the experts' loads are drawn per micro-batch and layer)

    # -- kernels
    def _kernel(self, cost: _Cost, kind: str, flops: float, nbytes: float, dim: float = 0.0) -> None:
        job = self.job
        cost.flops += flops if kind != "memory" else 0.0
        cost.nbytes += nbytes
        cost.ns += job.efficiency.kernel_ns(job.gpu, job.precision, kind, flops, nbytes, dim)

    def _gemm(
        self, cost: _Cost, rows: float, cols: float, inner: float, factor: float = 1.0, groups: float = 1.0
    ) -> None:
        """A GEMM of (rows × inner) · (inner × cols), *factor* times (2 for a backward: input and weight grads).

        *groups* > 1: a grouped GEMM, the rows split evenly over that many weight matrices (one per expert): its
        efficiency is that of one group's rows, and each group reads its own weights.
        """
        ab = ACTIVATION_BYTES
        nbytes = (rows * inner + groups * inner * cols + rows * cols) * ab
        dim = min(rows / groups, cols, inner)
        self._kernel(cost, "gemm", 2.0 * rows * cols * inner * factor, nbytes * factor, dim)

    def _comp(self, name: str, cost: _Cost, deps: list[int]) -> int:
        node = self.b.comp(
            name,
            duration_micros=max(1, round(cost.ns / 1000.0)) if cost.ns > 0 else 0,
            deps=deps,
            # A memory-bound node (norms, embedding, optimizer) still says it does one operation: a roofline then gives
            # it its memory time (num_ops 0 would make the operational intensity 0 and the time 0/0).
            num_ops=max(1, round(cost.flops)),
            tensor_size=round(cost.nbytes),
        )
        self.last_compute = node
        return node

    def _coll(self, kind: CollectiveType, size: float, deps: list[int], name: str, role: str) -> int:
        previous = self.last_collective.get(role)
        if previous is not None and previous not in deps:
            deps = [*deps, previous]
        node = self.b.collective(kind, max(1, round(size)), deps=deps, name=name, pg_name=self.groups[role])
        self.last_collective[role] = node
        return node

    # -- blocks
    def _attention(self, layer: int, factor: float, core_only: bool = False, qkv: bool = True) -> _Cost:
        """The attention block's kernels (*factor* 1 forward, 2 backward; *qkv* False: its own node made them)."""
        job, m, lay = self.job, self.job.model, self.job.layout
        t, n, h = lay.tp, self.n, m.hidden
        cost = _Cost()
        if not core_only:
            if qkv:
                self._gemm(cost, n, m.in_projection_width() / t, h, factor)
            self._gemm(cost, n, h, m.o_hidden / t, factor)
            norm_tokens = n / t if job.sp else n
            self._kernel(cost, "memory", 0, 8 * norm_tokens * h * ACTIVATION_BYTES * factor)
        core = n * m.attention_core_flops(layer) / t * factor
        self._kernel(cost, "attention", core, 4 * n * m.q_hidden / t * ACTIVATION_BYTES * factor)
        return cost

    def _mlp(self, factor: float) -> _Cost:
        job, m, lay = self.job, self.job.model, self.job.layout
        t, n, h = lay.tp, self.n, m.hidden
        cost = _Cost()
        self._gemm(cost, n, m.ffn * (2 if m.gated else 1) / t, h, factor)
        self._kernel(cost, "memory", 0, 3 * n * m.ffn / t * ACTIVATION_BYTES * factor)
        self._gemm(cost, n, h, m.ffn / t, factor)
        norm_tokens = n / t if job.sp else n
        self._kernel(cost, "memory", 0, 8 * norm_tokens * h * ACTIVATION_BYTES * factor)
        return cost

    def _received(self, layer: int) -> float:
        """The routed copies this rank's experts process in *layer* (``top_k`` per token when balanced)."""
        job, lay = self.job, self.job.layout
        copies = self.n / lay.tp * job.model.top_k
        if job.routing.keeps_all(lay.ep):
            return copies
        shares = rank_shares(job.routing, job.model.experts, lay.ep, self.micro_batch, layer)
        return copies * lay.ep * shares[self.d % lay.ep]

    def _experts(self, factor: float, routed: float) -> _Cost:
        """An MoE block: router, gating, token permutation, the experts as grouped GEMMs, unpermutation.

        Tokens are balanced over the experts: each GPU receives as many routed copies as it dispatches (``top_k``
        per token), spread evenly over its ``experts / ep`` local experts, whose grouped GEMMs run at the
        efficiency of one expert's rows. With expert tensor parallelism the ``etp`` ranks of an expert gathered
        their copies: each runs ``etp`` times the rows on ``1 / etp`` of every expert's weights. *routed*: the
        copies this rank's experts process (:meth:`_received`).
        """
        m, lay = self.job.model, self.job.layout
        tokens = self.n / lay.tp  # sequence parallel: each tensor-parallel rank routes its own share
        h = m.hidden
        cost = _Cost()
        self._gemm(cost, tokens, m.experts, h, factor)  # router
        # gating: softmax and top-k over the FP32 logits (read, probabilities written and read)
        self._kernel(cost, "memory", 0, 3 * tokens * m.experts * 4 * factor)
        copies = tokens * m.top_k
        # permutation before the experts and (weighted) unpermutation after: each reads and writes every copy's row
        self._kernel(cost, "memory", 0, 2 * 2 * (tokens + copies) * h * ACTIVATION_BYTES * factor)
        local = max(1, m.experts // lay.ep)
        etp = lay.etp
        for share, groups, split in ((routed * etp, local, etp), (tokens * m.shared_experts, m.shared_experts, 1)):
            if share:
                ffn = m.expert_ffn / split
                self._gemm(cost, share, ffn * (2 if m.gated else 1), h, factor, groups)
                self._kernel(cost, "memory", 0, 3 * share * ffn * ACTIVATION_BYTES * factor)
                self._gemm(cost, share, h, ffn, factor, groups)
        return cost

    def _experts_block(self, deps: list[int], name: str, factor: float, layer: int) -> list[int]:
        """The experts' node, between the gather and the reduce-scatter of their tokens under expert tensor parallelism.

        Forward: the ``etp`` ranks of an expert gather the copies each received, and reduce-scatter the partial
        outputs; backward: the same pair on the gradients (a gather's gradient is a reduce-scatter and back).
        """
        lay = self.job.layout
        received = self._received(layer)
        if lay.etp == 1:
            return [self._comp(name, self._experts(factor, received), deps)]
        size = received * self.job.model.hidden * ACTIVATION_BYTES  # the copies one rank received
        deps = [self._coll(AG, size, deps, f"{name}_etp_ag", "etp")]
        deps = [self._comp(name, self._experts(factor, received), deps)]
        return [self._coll(RS, size * lay.etp, deps, f"{name}_etp_rs", "etp")]

    def _tp_before(self, deps: list[int], name: str) -> list[int]:
        """With sequence parallelism, the all-gather that starts a block (forward) or ends it (backward)."""
        lay = self.job.layout
        if lay.tp == 1 or not self.job.sp:
            return deps
        size = self.n * self.job.model.hidden * ACTIVATION_BYTES / lay.tp
        return [self._coll(AG, size, deps, name, "tp")]

    def _tp_after(self, deps: list[int], name: str) -> list[int]:
        """The all-reduce (or, with sequence parallelism, reduce-scatter) that ends a block."""
        lay = self.job.layout
        if lay.tp == 1:
            return deps
        size = self.n * self.job.model.hidden * ACTIVATION_BYTES
        return [self._coll(RS if self.job.sp else AR, size, deps, name, "tp")]

    def _kv_exchange(self, deps: list[int], name: str, backward: bool) -> list[int]:
        lay = self.job.layout
        if lay.cp == 1:
            return deps
        size = self.n * 2 * self.job.model.kv_hidden / lay.tp * ACTIVATION_BYTES
        if backward:
            return [self._coll(RS, size * lay.cp, deps, name, "cp")]
        return [self._coll(AG, size, deps, name, "cp")]

    def _moe_exchange(self, deps: list[int], name: str, layer: int, phase: int) -> list[int]:
        """An expert-parallel all-to-all; with an unbalanced router, each peer's part as a send and a receive.

        *phase*: 0 dispatch, 1 combine, 2 and 3 their gradients, 4 and 5 their recomputation (tags apart).
        """
        job, m, lay = self.job, self.job.model, self.job.layout
        if lay.ep == 1:
            return deps
        size = self.n / lay.tp * m.hidden * m.top_k * ACTIVATION_BYTES
        if job.routing.balanced:
            return [self._coll(A2A, size, deps, name, "ep")]
        shares = rank_shares(job.routing, m.experts, lay.ep, self.micro_batch, layer)
        first = self.d - self.d % lay.ep
        members = [lay.rank(self.t, self.c, first + q, self.p) for q in range(lay.ep)]
        tag = MOE_TAG_BASE + (self.micro_batch * m.layers + layer) * 6 + phase
        sizes = [size * share for share in shares]
        to_experts = phase in (0, 2, 4)
        made = exchange(self.b, self.groups["ep"], members, self.d % lay.ep, sizes, to_experts, tag, deps, name)
        return made or deps

    def layer_forward(self, layer: int, deps: list[int], tag: str) -> list[int]:
        """One layer's forward on one micro-batch; returns the nodes the next step waits for."""
        p = f"{tag}_l{layer}"
        deps = self._tp_before(deps, f"{p}_attn_ag")
        if self.job.layout.cp > 1:
            qkv = _Cost()
            h, m = self.job.model.hidden, self.job.model
            self._gemm(qkv, self.n, m.in_projection_width() / self.job.layout.tp, h)
            deps = [self._comp(f"{p}_qkv", qkv, deps)]
            deps = self._kv_exchange(deps, f"{p}_kv_ag", backward=False)
        deps = [self._comp(f"{p}_attn", self._attention(layer, 1.0, qkv=self.job.layout.cp == 1), deps)]
        deps = self._tp_after(deps, f"{p}_attn_rs" if self.job.sp else f"{p}_attn_ar")
        if self.job.model.is_moe(layer):
            again = 4 if tag.startswith("R_") else 0  # (recomputation exchanges the tokens again)
            deps = self._moe_exchange(deps, f"{p}_dispatch", layer, again)
            deps = self._experts_block(deps, f"{p}_experts", 1.0, layer)
            return self._moe_exchange(deps, f"{p}_combine", layer, again + 1)
        deps = self._tp_before(deps, f"{p}_mlp_ag")
        deps = [self._comp(f"{p}_mlp", self._mlp(1.0), deps)]
        return self._tp_after(deps, f"{p}_mlp_rs" if self.job.sp else f"{p}_mlp_ar")

    def layer_backward(self, layer: int, deps: list[int], tag: str) -> tuple[list[int], int]:
        """One layer's backward; returns the nodes the next step waits for and the node that makes its gradients."""
        p = f"{tag}_l{layer}"
        if self.job.model.is_moe(layer):
            deps = self._moe_exchange(deps, f"{p}_combine_grad", layer, 2)
            deps = self._experts_block(deps, f"{p}_experts_bwd", 2.0, layer)
            deps = self._moe_exchange(deps, f"{p}_dispatch_grad", layer, 3)
        else:
            deps = self._tp_before(deps, f"{p}_mlp_grad_ag")
            deps = [self._comp(f"{p}_mlp_bwd", self._mlp(2.0), deps)]
            deps = self._tp_after(deps, f"{p}_mlp_grad_rs" if self.job.sp else f"{p}_mlp_grad_ar")
        deps = self._tp_before(deps, f"{p}_attn_grad_ag")
        cost = self._attention(layer, 2.0)
        if self.job.recompute == "selective":
            extra = self._attention(layer, 1.0, core_only=True)
            cost.flops += extra.flops
            cost.nbytes += extra.nbytes
            cost.ns += extra.ns
        made = self._comp(f"{p}_attn_bwd", cost, deps)
        deps = self._kv_exchange([made], f"{p}_kv_grad_rs", backward=True)
        return self._tp_after(deps, f"{p}_attn_grad_rs" if self.job.sp else f"{p}_attn_grad_ar"), made

    # -- pipeline
    def _peer(self, model_chunk: int) -> int:
        lay = self.job.layout
        return lay.rank(self.t, self.c, self.d, model_chunk % lay.pp)

    def _p2p_size(self) -> int:
        """Bytes of a pipeline transfer: one micro-batch's activations (sequence-sharded with SP)."""
        size = self.n * self.job.model.hidden * ACTIVATION_BYTES
        return max(1, round(size / self.job.layout.tp if self.job.sp else size))

    def _tag(self, op: Op, model_chunk: int, backward: bool) -> int:
        return (op.micro_batch * self.total_chunks + model_chunk) * 2 + int(backward)

    # -- the whole rank
    def build(self, members: dict[str, list[int]], info: str, group_ids: dict[str, dict[int, str]]) -> Trace:
        """The rank's trace: the passes of its pipeline schedule in order, then the optimizer step."""
        job = self.job
        self.b.metadata = rank_metadata(self.rank, info, group_ids, members)
        for op in schedule(job.schedule, job.layout.pp, self.p, job.micro_batches, job.chunks):
            model_chunk = self.stage_chunks[op.chunk]
            layers = job.layers_of(model_chunk)
            if op.kind == "F":
                self._forward_pass(op, model_chunk, layers)
            else:
                self._backward_pass(op, model_chunk, layers)
        self._optimizer_step()
        return self.b.build(rank=self.rank)

    def _forward_pass(self, op: Op, model_chunk: int, layers: range) -> None:
        """One micro-batch's forward pass through one model chunk (receive, embedding, layers, head or send)."""
        lay, model, b = self.job.layout, self.job.model, self.b
        tag = f"mb{op.micro_batch}_c{model_chunk}"
        self.micro_batch = op.micro_batch
        prev = self.prev
        deps = list(prev)
        if model_chunk > 0:
            recv = b.recv(self._peer(model_chunk - 1), self._p2p_size(), self._tag(op, model_chunk, False),
                          deps=prev[-1:], name=f"{tag}_recv_act")  # fmt: skip
            deps.append(recv)
        elif model.vocab:
            emb = _Cost()
            self._kernel(emb, "memory", 0, 2 * self.n * model.hidden * ACTIVATION_BYTES)
            deps = self._zero3_gather_weights(model.input_embedding_parameters() / lay.tp, deps, f"{tag}_emb_ag")
            deps = [self._comp(f"{tag}_embedding", emb, deps)]
        start = deps
        for layer in layers:
            deps, start = self._zero3_gather(layer, deps, start, f"{tag}_l{layer}_param_ag")
            deps = self.layer_forward(layer, deps, f"F_{tag}")
        if model_chunk == self.total_chunks - 1:
            if model.vocab:
                logits = _Cost()
                self._gemm(logits, self.n, model.vocab / lay.tp, model.hidden)
                deps = self._zero3_gather_weights(self._head_parameters(model_chunk), deps, f"{tag}_head_ag")
                self._kernel(logits, "memory", 0, 3 * self.n * model.vocab / lay.tp * 4)  # softmax and loss, fp32
                deps = [self._comp(f"{tag}_logits", logits, deps)]
        else:
            b.send(self._peer(model_chunk + 1), self._p2p_size(), self._tag(op, model_chunk + 1, False),
                   deps=deps, name=f"{tag}_send_act")  # fmt: skip
        self.prev = deps  # the next pass starts once this one's compute and tensor-parallel collectives are done

    def _backward_pass(self, op: Op, model_chunk: int, layers: range) -> None:
        """One micro-batch's backward pass through one model chunk; the last micro-batch's reduces the gradients."""
        job, lay, model, b = self.job, self.job.layout, self.job.model, self.b
        tag = f"mb{op.micro_batch}_c{model_chunk}"
        self.micro_batch = op.micro_batch
        last_mb = job.micro_batches - 1
        prev = self.prev
        deps = list(prev)
        if model_chunk < self.total_chunks - 1:
            recv = b.recv(self._peer(model_chunk + 1), self._p2p_size(), self._tag(op, model_chunk, True),
                          deps=prev[-1:], name=f"{tag}_recv_grad")  # fmt: skip
            deps.append(recv)
        elif model.vocab:
            logits = _Cost()
            self._gemm(logits, self.n, model.vocab / lay.tp, model.hidden, 2.0)
            deps = self._zero3_gather_weights(self._head_parameters(model_chunk), deps, f"{tag}_head_ag_bwd")
            deps = [self._comp(f"{tag}_logits_bwd", logits, deps)]
            if op.micro_batch == last_mb:  # (the output layer's gradients: the first ready, the first bucket's)
                self.pending_bytes += model.output_layer_parameters(lay.tp, apart=self.total_chunks > 1)
        if job.recompute == "full":
            start = deps
            for layer in layers:
                deps, start = self._zero3_gather(layer, deps, start, f"{tag}_l{layer}_param_ag_re")
                deps = self.layer_forward(layer, deps, f"R_{tag}")
        start = deps
        for layer in reversed(layers):
            deps, start = self._zero3_gather(layer, deps, start, f"{tag}_l{layer}_param_ag_bwd")
            deps, made = self.layer_backward(layer, deps, f"B_{tag}")
            if op.micro_batch == last_mb:
                self._layer_gradients(layer, made, tag)
        if model_chunk == 0 and model.vocab:
            emb_bwd = _Cost()
            self._kernel(emb_bwd, "memory", 0, 2 * self.n * model.hidden * ACTIVATION_BYTES)
            deps = self._zero3_gather_weights(model.input_embedding_parameters() / lay.tp, deps, f"{tag}_emb_ag_bwd")
            deps = [self._comp(f"{tag}_embedding_bwd", emb_bwd, deps)]
            if op.micro_batch == last_mb:
                self.pending_bytes += model.input_embedding_parameters() / lay.tp
        if op.micro_batch == last_mb:
            self._flush([self.last_compute], f"{tag}_grad_bucket{len(self.bucket_sizes)}")  # type: ignore[list-item]
        if model_chunk > 0:
            b.send(self._peer(model_chunk - 1), self._p2p_size(), self._tag(op, model_chunk - 1, True),
                   deps=deps, name=f"{tag}_send_grad")  # fmt: skip
        self.prev = deps

    # -- gradients and the optimizer step
    def _layer_gradients(self, layer: int, made: int, tag: str) -> None:
        """*layer*'s gradients (made by node *made*) into a bucket, or reduced at once (ZeRO-3, experts)."""
        job, grad_role = self.job, self.grad_role
        dense, expert = layer_parameters(job.model, layer, job.layout)
        if job.zero == 3 and grad_role:
            self.grad_collectives.append(
                self._coll(RS, dense * GRAD_BYTES, [made], f"{tag}_l{layer}_grad_rs", grad_role)
            )
        else:
            self.pending_bytes += dense
            if self.pending_bytes * GRAD_BYTES >= job.bucket_bytes:
                self._flush([made], f"{tag}_l{layer}_grad_bucket{len(self.bucket_sizes)}")
        if expert and "edp" in self.groups:  # (reduced over the ranks that hold the same experts; ZeRO shards them)
            name = f"{tag}_l{layer}_expert_grad"
            kind = AR if job.zero == 0 else RS
            self.grad_collectives.append(self._coll(kind, expert * GRAD_BYTES, [made], name, "edp"))
            self.expert_sizes.append(expert)

    def _flush(self, deps: list[int], name: str) -> None:
        """Reduce the gradient bucket filled so far (all-reduce, or reduce-scatter under ZeRO), and start another."""
        if self.grad_role and self.pending_bytes > 0:
            kind = AR if self.job.zero == 0 else RS
            self.grad_collectives.append(self._coll(kind, self.pending_bytes * GRAD_BYTES, deps, name, self.grad_role))
            self.bucket_sizes.append(self.pending_bytes)
        self.pending_bytes = 0.0

    def _optimizer_step(self) -> None:
        """The optimizer step, once this rank's gradients are reduced; ZeRO-1/2 then gather the updated parameters.

        ZeRO shards over each parameter's gradient group: dense ones over ``dp`` (its ``dp·cp`` ranks), experts over
        ``edp`` (the ranks holding the same experts), as the memory model does.
        """
        job = self.job
        dense, expert = stage_parameters(job, self.p)
        shard = dense / self.dp_size + expert / self.edp_size if job.zero >= 1 else dense + expert
        step = _Cost()
        self._kernel(step, "memory", 0, OPTIMIZER_BYTES * shard)
        ready = self.prev + self.grad_collectives
        if "emb" in self.groups:  # the two copies of a tied embedding: gradients summed once the buckets are reduced
            size = job.model.vocab * job.model.hidden / job.layout.tp * GRAD_BYTES
            ready = [*ready, self._coll(AR, size, ready, "embedding_grad_ar", "emb")]
        done = self._comp("optimizer_step", step, ready)
        if job.zero in (1, 2):
            if self.grad_role:
                for k, size in enumerate(self.bucket_sizes):
                    self._coll(AG, size * PARAM_BYTES / self.dp_size, [done], f"param_ag_bucket{k}", self.grad_role)
            if "edp" in self.groups:
                for k, size in enumerate(self.expert_sizes):
                    self._coll(AG, size * PARAM_BYTES / self.edp_size, [done], f"expert_param_ag{k}", "edp")

    def _zero3_gather(self, layer: int, deps: list[int], start: list[int], name: str) -> tuple[list[int], list[int]]:
        """ZeRO-3: gather *layer*'s parameters, issued when the previous layer could start (*start*: one layer ahead).

        Dense weights over ``dp``, experts over ``edp``. Returns what the layer waits for and what the next layer's
        gather waits for (this layer's inputs).
        """
        job = self.job
        if job.zero != 3:
            return deps, deps
        dense, expert = layer_parameters(job.model, layer, job.layout)
        gathers = []
        if "dp" in self.groups:
            gathers.append(self._coll(AG, dense * PARAM_BYTES / self.dp_size, start, name, "dp"))
        if expert and "edp" in self.groups:
            gathers.append(self._coll(AG, expert * PARAM_BYTES / self.edp_size, start, f"{name}_experts", "edp"))
        return [*deps, *gathers], deps

    def _head_parameters(self, model_chunk: int) -> float:
        return self.job.model.output_layer_parameters(self.job.layout.tp, apart=model_chunk > 0)

    def _zero3_gather_weights(self, parameters: float, deps: list[int], name: str) -> list[int]:
        """ZeRO-3: gather a dense weight outside the layers (the embedding, the output layer) before its use."""
        if self.job.zero != 3 or "dp" not in self.groups or parameters <= 0:
            return deps
        return [*deps, self._coll(AG, parameters * PARAM_BYTES / self.dp_size, deps, name, "dp")]


def layer_parameters(model: ModelSpec, layer: int, layout: Layout) -> tuple[float, float]:
    """Per-rank (dense, expert) parameters of *layer*: dense weights split by tp, experts by ep and etp."""
    total = model.layer_parameters(layer)
    if not model.is_moe(layer):
        return total / layout.tp, 0.0
    experts = model.expert_weights(layer)
    return (total - experts) / layout.tp, experts / (layout.ep * layout.etp)


def _build_rank(
    job: JobSpec, rank: int, group_ids: dict[str, dict[int, str]], members: dict[str, list[int]], info: str
) -> Trace:
    """*rank*'s trace, built from scratch."""
    return _Rank(job, rank, group_ids).build(members, info, group_ids)


def job_groups(layout: Layout) -> tuple[dict[str, dict[int, str]], dict[str, str], dict[str, list[int]]]:
    """Communicator group names (``"1"``, ``"2"`` …): per role each rank's group, each name's role, its ranks."""
    group_ids: dict[str, dict[int, str]] = {}
    roles: dict[str, str] = {}
    members: dict[str, list[int]] = {}
    next_id = 1
    for role, groups in layout.groups().items():
        ids: dict[int, str] = {}
        for ranks in groups:
            name = str(next_id)
            next_id += 1
            roles[name] = role
            members[name] = ranks
            for r in ranks:
                ids[r] = name
        group_ids[role] = ids
    return group_ids, roles, members


def build_job(job: JobSpec) -> list[Trace]:
    """The traces of one iteration, rank 0 first (see the module docstring)."""
    lay = job.layout
    group_ids, roles, members = job_groups(lay)
    from etsim.producers.training.info import job_info  # (it reads the job's memory model)

    info = job_info(job, roles)
    traces: list[Trace | None] = [None] * lay.ranks
    # Every rank of a pipeline stage runs the same graph: build the stage's first rank, relabel it for the others.
    # An unbalanced router loads each expert-parallel position differently: one built rank per position.
    positions = 1 if job.routing.balanced else lay.ep
    for stage in range(lay.pp):
        templates = [lay.rank(0, 0, q, stage) for q in range(positions)]
        for first in templates:
            traces[first] = _Rank(job, first, group_ids).build(members, info, group_ids)
        for t in range(lay.tp):
            for c in range(lay.cp):
                for d in range(lay.dp):
                    rank = lay.rank(t, c, d, stage)
                    if rank not in templates:
                        template = traces[templates[d % positions]]
                        traces[rank] = relabelled(template, rank, info, group_ids, roles, members)  # type: ignore[arg-type]
    return traces  # type: ignore[return-value]


def stage_parameters(job: JobSpec, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters one rank of pipeline *stage* holds (dense split by tp, experts by ep and etp)."""
    lay, model = job.layout, job.model
    dense = expert = 0.0
    for k in range(job.chunks):
        chunk = k * lay.pp + stage
        for layer in job.layers_of(chunk):
            d, e = layer_parameters(model, layer, lay)
            dense, expert = dense + d, expert + e
        if chunk == 0:
            dense += model.input_embedding_parameters() / lay.tp
        if chunk == lay.pp * job.chunks - 1:
            dense += model.output_layer_parameters(lay.tp, apart=chunk > 0)
    return dense, expert


def rank_parameters(job: JobSpec, stage: int) -> float:
    """Parameters one rank of pipeline *stage* holds (dense ones split by tp, experts by ep and etp)."""
    return sum(stage_parameters(job, stage))
