"""The MSCCL-IR program model: steps, thread blocks, GPUs, programs, and the step-type table."""

from __future__ import annotations

from dataclasses import dataclass, field

from etsim.chakra.graph import CollectiveType, parse_collective
from etsim.errors import TraceError

__all__ = [
    "BUFFERS",
    "COLLECTIVES",
    "STEP_TYPES",
    "MscclError",
    "MscclGpu",
    "MscclProgram",
    "MscclStep",
    "MscclTb",
    "msccl_collective",
    "step_uses",
]

#: Step types and the nodes each lowers to ("recv", "reduce", "copy", "send").
STEP_TYPES: dict[str, tuple[str, ...]] = {
    "s": ("send",),
    "r": ("recv",),
    "rcs": ("recv", "send"),
    "rrs": ("recv", "reduce", "send"),
    "rrc": ("recv", "reduce"),
    "rrcs": ("recv", "reduce", "send"),
    "cpy": ("copy",),
    "re": ("reduce",),
    "nop": (),
}

#: ``<algo coll>`` words beyond the collective names :func:`~etsim.chakra.graph.parse_collective`
#: knows (``allreduce``, ``reduce_scatter`` …): None means any collective (``custom`` and
#: point-to-point programs).
_EXTRA_COLLS: dict[str, CollectiveType | None] = {
    "alltoallv": CollectiveType.ALL_TO_ALL,
    "custom": None,
    "send": None,
    "recv": None,
}

#: ``<algo coll>`` values (both runtimes' spellings) accepted, for messages.
COLLECTIVES = (
    "allreduce", "allgather", "alltoall", "alltoallv", "reduce_scatter", "reducescatter",
    "broadcast", "reduce", "gather", "scatter", "custom", "send", "recv",
)  # fmt: skip


def msccl_collective(coll: str) -> CollectiveType | None:
    """The collective an ``<algo coll>`` value names (None: any collective).

    Raises:
        ValueError: not a collective MSCCL-IR or Chakra names.
    """
    if coll in _EXTRA_COLLS:
        return _EXTRA_COLLS[coll]
    return parse_collective(coll)


BUFFERS = ("i", "o", "s")
"""Buffer names: input, output, scratch."""
WHY_UNKNOWN = {
    "ra": "'ra' (residual add) is accepted only by the old MSCCL runtime, whose semantics "
    "(which buffers it reads) no generator or document defines",
}


class MscclError(TraceError):
    """An MSCCL-IR document that cannot be converted; the message says where and why.

    Attributes:
        path: the file (or ``<string>``).
        gpu: GPU id, or None.
        tb: thread block id, or None.
        step: step index ``s``, or None.
        reason: what is wrong, without the location.
    """

    def __init__(
        self,
        path: str,
        reason: str,
        *,
        gpu: int | None = None,
        tb: int | None = None,
        step: int | None = None,
        line: int | None = None,
    ) -> None:
        self.path, self.reason, self.gpu, self.tb, self.step, self.line = path, reason, gpu, tb, step, line
        where = [path + (f":{line}" if line else "")]
        if gpu is not None:
            where.append(f"gpu {gpu}")
        if tb is not None:
            where.append(f"tb {tb}")
        if step is not None:
            where.append(f"step {step}")
        super().__init__(f"{', '.join(where)}: {reason}")


@dataclass(slots=True)
class MscclStep:
    """One ``<step>``."""

    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    line: int | None = None
    stride: int = 1
    """Distance between the step's chunks: 1 as written; *k* after :func:`replicate_instances` with k instances."""


@dataclass(slots=True)
class MscclTb:
    """One ``<tb>``: a peer to send to (or −1), a peer to receive from (or −1), a channel, steps."""

    id: int
    send: int
    recv: int
    chan: int
    steps: list[MscclStep] = field(default_factory=list)
    line: int | None = None


@dataclass(slots=True)
class MscclGpu:
    """One ``<gpu>``: buffer sizes in chunks and thread blocks (indexed by tb id)."""

    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list[MscclTb] = field(default_factory=list)
    copies: list[tuple[int, int]] = field(default_factory=list)
    """TACCL ``<copy i_off o_off>`` hints (no runtime reads them; kept for information)."""
    line: int | None = None


@dataclass(slots=True)
class MscclProgram:
    """A parsed ``<algo>`` document."""

    path: str
    name: str
    coll: str
    ngpus: int
    nchunksperloop: int
    nchannels: int
    proto: str
    inplace: bool | None
    outofplace: bool | None
    min_bytes: int | None
    max_bytes: int | None
    gpus: list[MscclGpu]
    attributes: dict[str, str] = field(default_factory=dict)
    """Every ``<algo>`` attribute as written (extra ones such as ``redop``/``maxcount`` included)."""

    @property
    def collective(self) -> CollectiveType | None:
        """The collective implemented, or None for ``custom`` (any collective)."""
        return msccl_collective(self.coll)

    @property
    def num_steps(self) -> int:
        """All ``<step>`` elements, nops included."""
        return sum(len(tb.steps) for gpu in self.gpus for tb in gpu.tbs)


def step_uses(kind: str, role: str) -> bool:
    """Whether step *kind* touches its local *role* ("src"/"dst") buffer (see the module table)."""
    if role == "src":
        return kind in ("s", "rrs", "rrc", "rrcs", "cpy", "re")
    return kind in ("r", "rcs", "rrc", "rrcs", "cpy", "re")
