"""Several jobs as one workload: each job's ranks moved onto its GPUs, its groups and peers renamed with it.

A job's rank ``r`` runs on cluster GPU ``gpus[r]``. Its traces keep their nodes; what names ranks is rewritten:
send/receive peers become GPUs, and every ``pg_name`` becomes the job's own (``JOB/0`` for the job's whole world,
``JOB/NAME`` for its group ``NAME``), defined over the job's GPUs. Jobs therefore never share a rank, a group, a
collective or a message tag, and GPUs no job uses run empty traces. :func:`job_group` undoes the renaming.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

from etsim.chakra.graph import NodeType, Trace, Workload
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import ConfigError
from etsim.system.groups import GROUPS_ATTR, CommGroups

__all__ = ["PlacedJob", "is_whole_cluster", "job_group", "job_pg_name", "merge_jobs"]


_COLLECTIVE = NodeType.COMM_COLL_NODE


@dataclass(frozen=True)
class PlacedJob:
    """One job ready to merge: its name, its workload, its communicator groups (job ranks) and its GPUs."""

    name: str
    workload: Workload
    groups: CommGroups
    gpus: tuple[int, ...]


def job_pg_name(job: str, pg_name: str | None) -> str:
    """The merged name of *job*'s group *pg_name* (``JOB/0`` for its world: no name, ``""`` or ``"0"``)."""
    return f"{job}/{pg_name if pg_name and pg_name != '0' else '0'}"


def job_group(job: str, pg_name: str) -> str | None:
    """The job's own name of the merged group *pg_name* (``"0"`` for its world), or None if it is another job's."""
    prefix = f"{job}/"
    return pg_name[len(prefix) :] if pg_name.startswith(prefix) else None


def _metadata(trace: Trace, groups: dict[str, list[int]] | None) -> pb.GlobalMetadata:
    """*trace*'s metadata without its own group definitions; with *groups* (the job's, renamed) when given."""
    metadata = pb.GlobalMetadata()
    metadata.CopyFrom(trace.metadata)
    kept = [a for a in metadata.attr if a.name != GROUPS_ATTR]
    del metadata.attr[:]
    metadata.attr.extend(kept)
    if groups is not None:
        metadata.attr.add(name=GROUPS_ATTR, string_val=json.dumps(groups, sort_keys=True))
    return metadata


def _placed_trace(trace: Trace, job: PlacedJob, gpu: int, groups: dict[str, list[int]] | None) -> Trace:
    """*trace* as it runs on *gpu*: peers moved onto the job's GPUs, groups renamed, raw nodes dropped.

    The raw nodes go because METADATA nodes define groups in job ranks; the job's groups, already read from them,
    travel in the metadata (*groups*, on the job's first rank only).
    """
    gpus = job.gpus
    for column, what in ((trace.comm_src, "receives from"), (trace.comm_dst, "sends to")):
        bad = next((j for j, p in enumerate(column) if p is not None and not 0 <= p < len(gpus)), None)
        if bad is not None:
            raise ConfigError(
                f"job {job.name!r}: {trace.describe(bad)} {what} rank {column[bad]}, but the job has {len(gpus)} ranks"
            )
    return dataclasses.replace(
        trace,
        nodes=[],
        rank=gpu,
        metadata=_metadata(trace, groups),
        comm_src=[None if p is None else gpus[p] for p in trace.comm_src],
        comm_dst=[None if p is None else gpus[p] for p in trace.comm_dst],
        pg_name=[
            job_pg_name(job.name, p) if p is not None or t == _COLLECTIVE else None
            for p, t in zip(trace.pg_name, trace.types, strict=True)
        ],
    )


def is_whole_cluster(jobs: Sequence[PlacedJob], npus: int) -> bool:
    """Whether *jobs* is one job whose rank r runs on GPU r of a cluster of its size (merging changes nothing)."""
    return len(jobs) == 1 and jobs[0].gpus == tuple(range(npus))


def merge_jobs(jobs: Sequence[PlacedJob], npus: int) -> Workload:
    """One workload of *npus* ranks running every job on its GPUs (the others empty).

    One job on every GPU in order is its own workload, its group names kept (:func:`is_whole_cluster`).

    Raises:
        ConfigError: a job's send or receive names a rank the job does not have.
        ValueError: a GPU out of range or used twice (callers check placements first, naming the key).
    """
    if is_whole_cluster(jobs, npus):
        return jobs[0].workload  # (one job on every GPU in order: its own workload, its names kept)
    traces: list[Trace | None] = [None] * npus
    for job in jobs:
        world = job_pg_name(job.name, None)
        renamed = {world: list(job.gpus)}
        for name, members in job.groups.groups.items():
            renamed[job_pg_name(job.name, name)] = [job.gpus[r] for r in members]
        for rank, trace in enumerate(job.workload.traces):
            gpu = job.gpus[rank]
            if not 0 <= gpu < npus or traces[gpu] is not None:
                raise ValueError(f"job {job.name!r}: GPU {gpu} is out of range or taken")
            traces[gpu] = _placed_trace(trace, job, gpu, renamed if rank == 0 else None)
    return Workload([t if t is not None else Trace(pb.GlobalMetadata(), [], rank=r) for r, t in enumerate(traces)])
