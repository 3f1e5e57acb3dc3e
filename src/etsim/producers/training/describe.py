"""Reading back what a generated training job says about itself: is a workload one, and what is its layout.

The ``transformer`` generator writes the job's description (model and hardware FLOPs, tokens, GPUs, the parallel
layout, which ``pg_name`` is which parallelism, memory estimates) as JSON into every rank's GlobalMetadata, under
:data:`TRAINING_ATTR`. The step report (``report/training.py``) and replica folding (``workload/fold.py``) ask these
helpers, never the metadata themselves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from etsim.chakra.attributes import make_attribute
from etsim.chakra.builder import SCHEMA_VERSION
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.system.groups import GROUPS_ATTR

if TYPE_CHECKING:
    from etsim.chakra.graph import Trace

__all__ = ["TRAINING_ATTR", "ParallelLayout", "job_description", "parallel_layout", "rank_metadata", "training_job"]

#: The GlobalMetadata attribute holding a generated training job's description (a JSON string).
TRAINING_ATTR = "etsim_training"


@dataclass(frozen=True)
class ParallelLayout:
    """A training job's parallel degrees, in Megatron-LM's rank order ``t + T·(c + C·(d + D·p))``."""

    tp: int
    cp: int
    dp: int
    pp: int
    ep: int = 1


def rank_metadata(
    rank: int, info: str, group_ids: dict[str, dict[int, str]], members: dict[str, list[int]]
) -> pb.GlobalMetadata:
    """*rank*'s GlobalMetadata: the job's description *info* and the groups the rank belongs to (``GROUPS_ATTR``).

    Groups are not a ``process_group:init`` METADATA node: the reference Chakra consumer aborts on METADATA nodes.
    """
    mine = {ids[rank]: members[ids[rank]] for ids in group_ids.values() if rank in ids}
    metadata = pb.GlobalMetadata(version=SCHEMA_VERSION)
    metadata.attr.append(make_attribute(TRAINING_ATTR, info))
    metadata.attr.append(make_attribute(GROUPS_ATTR, json.dumps(mine)))
    return metadata


def job_description(traces: Sequence[Trace]) -> dict[str, Any] | None:
    """The JSON object rank 0's metadata holds under :data:`TRAINING_ATTR`, or None (absent, or not JSON)."""
    if not traces:
        return None
    for attr in traces[0].metadata.attr:
        if attr.name == TRAINING_ATTR and attr.WhichOneof("value") == "string_val":
            try:
                info = json.loads(attr.string_val)
            except json.JSONDecodeError:
                return None
            return info if isinstance(info, dict) else None
    return None


def training_job(traces: Sequence[Trace]) -> dict[str, Any] | None:
    """The description of a generated training job (one the step report can read), or None for any other workload."""
    info = job_description(traces)
    return info if info is not None and "model_flops" in info else None


def parallel_layout(traces: Sequence[Trace]) -> ParallelLayout | None:
    """The parallel layout the workload declares, or None (none declared, or not one of its ranks' count).

    Valid when every degree is at least 1, ``tp·cp·dp·pp`` is the number of ranks and ``ep`` divides ``dp``.
    """
    info = job_description(traces)
    if info is None:
        return None
    try:
        tp, cp, dp, pp = (int(info[k]) for k in ("tp", "cp", "dp", "pp"))
        ep = int(info.get("ep", 1))
    except (KeyError, TypeError, ValueError):
        return None
    if min(tp, cp, dp, pp, ep) < 1 or tp * cp * dp * pp != len(traces) or dp % ep:
        return None
    return ParallelLayout(tp, cp, dp, pp, ep)
