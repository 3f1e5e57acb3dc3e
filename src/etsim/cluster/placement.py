"""Where each job runs: explicit GPU lists first, then ``packed``, ``spread`` and ``{random: SEED}`` in file order.

- ``packed``: a job of a node or more takes whole free nodes first, in order, then the lowest free GPUs; a smaller
  job the first node with room for it (else the lowest free GPUs), as a scheduler packs them;
- ``spread``: one free GPU per node in turn (the first free GPU of every node, then the second, …);
- ``{random: SEED}``: GPUs drawn without replacement by ``numpy.random.default_rng(SEED)`` from the free ones, then
  sorted (job rank r runs on the r-th lowest drawn GPU);
- a list: job rank r on the r-th GPU listed.

A node is a block of the topology's first dimension (a ``gpu_cluster``'s node of GPUs) or, on a topology without
dimensions (``kind: graph``), the GPUs under one switch (a leaf).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from etsim.errors import ConfigError
from etsim.network import Topology

__all__ = ["node_of", "place"]


def node_of(topology: Topology) -> list[int]:
    """Each GPU's node (numbered from 0 in GPU order).

    A block of the first dimension when the topology has several dimensions; else the switch the GPU hangs from
    (the first, by name), a GPU that hangs from none a node of its own.
    """
    dims = topology.dims
    if len(dims) > 1:
        return [gpu // int(dims[0].npus) for gpu in range(topology.npus)]
    switches = set(topology.switches)
    keys: dict[object, int] = {}
    out = []
    for gpu in range(topology.npus):
        above = [n for n in topology.graph.successors(gpu) if n in switches] if gpu in topology.graph else []
        key = min(above, key=str) if above else ("gpu", gpu)
        out.append(keys.setdefault(key, len(keys)))
    return out


def place(placements: Sequence[Any], sizes: Sequence[int], topology: Topology, where: str) -> list[tuple[int, ...]]:
    """The GPUs of each job (*placements* as :class:`~etsim.cluster.spec.Placement` parses them, *sizes* its ranks).

    Raises:
        ConfigError: a GPU outside the cluster or failed, two jobs on one GPU, a job that does not fit in the GPUs
            left; the message names ``jobs[i].placement``.
    """
    usable = list(topology.live_npus)
    owner: dict[int, int] = {}
    out: list[tuple[int, ...] | None] = [None] * len(sizes)
    for i, (placement, size) in enumerate(zip(placements, sizes, strict=True)):
        if not isinstance(placement, tuple) or (placement and placement[0] == "random"):
            continue
        key = f"{where}: jobs[{i}].placement"
        if len(placement) != size:
            raise ConfigError(f"{key}: {len(placement)} GPUs for a job of {size} ranks")
        for gpu in placement:
            if gpu >= topology.npus or gpu in topology.failed_npus:
                which = "failed" if gpu < topology.npus else f"not one of the cluster's GPUs 0..{topology.npus - 1}"
                raise ConfigError(f"{key}: GPU {gpu} is {which}")
            if gpu in owner:
                raise ConfigError(f"{key}: GPU {gpu} is also jobs[{owner[gpu]}]'s")
            owner[gpu] = i
        out[i] = placement
    nodes = node_of(topology)
    for i, (placement, size) in enumerate(zip(placements, sizes, strict=True)):
        if out[i] is not None:
            continue
        free = [r for r in usable if r not in owner]
        if size > len(free):
            raise ConfigError(
                f"{where}: jobs[{i}].placement: the job has {size} ranks but only {len(free)} of the cluster's "
                f"{len(usable)} GPUs are free"
            )
        if placement == "packed":
            chosen = _packed(free, size, nodes)
        elif placement == "spread":
            turn: dict[int, int] = {}  # node → its free GPUs taken so far in the order
            order = []
            for gpu in free:
                node = nodes[gpu]
                order.append((turn.get(node, 0), node, gpu))
                turn[node] = turn.get(node, 0) + 1
            chosen = sorted(gpu for _, _, gpu in sorted(order)[:size])
        else:
            import numpy as np

            picked = np.random.default_rng(placement[1]).choice(len(free), size=size, replace=False)
            chosen = sorted(free[int(k)] for k in picked)
        for gpu in chosen:
            owner[gpu] = i
        out[i] = tuple(chosen)
    return [p for p in out if p is not None]


def _packed(free: list[int], size: int, nodes: list[int]) -> list[int]:
    """*size* of the *free* GPUs, packed (see the module docstring); *nodes* gives each GPU's node."""
    per_node: dict[int, int] = {}
    for node in nodes:
        per_node[node] = per_node.get(node, 0) + 1
    left: dict[int, int] = {}
    for gpu in free:
        left[nodes[gpu]] = left.get(nodes[gpu], 0) + 1
    if size < min(per_node.values(), default=1):  # (into the first node with room: 3 GPUs took 2, 3, 4 over two)
        room = next((node for node in sorted(left) if left[node] >= size), None)
        return free[:size] if room is None else [gpu for gpu in free if nodes[gpu] == room][:size]
    # (whole nodes first: a job of 8 beside a job on GPUs 0 and 1 of 8-GPU nodes took GPUs 2..9, over two nodes)
    taken: list[int] = []
    for node in sorted(left):
        if left[node] == per_node[node] and len(taken) + per_node[node] <= size:
            taken += [gpu for gpu in free if nodes[gpu] == node]
    chosen = set(taken)
    return sorted([*taken, *[gpu for gpu in free if gpu not in chosen][: size - len(taken)]])
