"""Ranks of one pipeline stage made from the stage's first: a training job of thousands of ranks builds one per stage.

Every rank of a stage runs the same graph; another rank's trace is the first one's with its peers shifted and its
groups renamed (:func:`relabelled`), every other column shared with it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import overload

from etsim.chakra.graph import Trace
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.producers.training.describe import rank_metadata

__all__ = ["relabelled"]


def relabelled(
    template: Trace,
    rank: int,
    info: str,
    group_ids: dict[str, dict[int, str]],
    roles: dict[str, str],
    members: dict[str, list[int]],
) -> Trace:
    """*template*'s trace for *rank* of the same stage: peers shifted, groups renamed, every other column shared.

    Peers move by ``rank - template.rank`` (ranks are linear in the coordinates); the columns and protobuf nodes
    that do not change are the template's own objects, never modified afterwards.
    """
    delta = rank - (template.rank or 0)
    rename = {name: group_ids[role][rank] for name, role in roles.items() if rank in group_ids[role]}
    clone = copy.copy(template)
    clone.rank = rank
    clone.pg_name = [None if v is None else rename.get(v, v) for v in template.pg_name]
    clone.comm_src = [None if v is None else v + delta for v in template.comm_src]
    clone.comm_dst = [None if v is None else v + delta for v in template.comm_dst]
    clone.metadata = rank_metadata(rank, info, group_ids, members)
    clone.nodes = _RelabelledNodes(template, delta, rename)
    return clone


class _RelabelledNodes(Sequence[pb.Node]):
    """A relabelled rank's protobuf nodes, made from the template's when read (as files are written).

    The simulation reads the columns only, so a job of thousands of ranks holds no copied nodes.
    """

    __slots__ = ("_delta", "_rename", "_template")

    def __init__(self, template: Trace, delta: int, rename: dict[str, str]) -> None:
        self._template = template
        self._delta = delta
        self._rename = rename

    def __len__(self) -> int:
        return len(self._template.nodes)

    @overload
    def __getitem__(self, index: int) -> pb.Node: ...

    @overload
    def __getitem__(self, index: slice) -> list[pb.Node]: ...

    def __getitem__(self, index: int | slice) -> pb.Node | list[pb.Node]:
        if isinstance(index, slice):
            return [self[j] for j in range(*index.indices(len(self)))]
        t = self._template
        node = t.nodes[index]
        if t.pg_name[index] is None and t.comm_src[index] is None and t.comm_dst[index] is None:
            return node  # (shared: never modified)
        node = _copy_node(node)
        for attr in node.attr:
            if attr.name == "pg_name":
                attr.string_val = self._rename.get(attr.string_val, attr.string_val)
            elif attr.name in ("comm_src", "comm_dst"):
                attr.int32_val += self._delta
        return node


def _copy_node(node: pb.Node) -> pb.Node:
    copied = pb.Node()
    copied.CopyFrom(node)
    return copied
