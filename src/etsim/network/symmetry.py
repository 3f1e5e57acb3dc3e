"""Symmetries of a topology: which rank permutations leave it unchanged, and where they move its links.

The network layer answers these questions for whoever uses symmetry (replica folding, ``workload/fold.py``): a
permutation of the NPUs is a symmetry of an intact product topology when it acts on the coordinates one dimension
at a time, as a symmetry of each dimension it moves: any permutation of a switch or fully-connected dimension, a
rotation of a ring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from etsim.network.topology import Topology

__all__ = ["ANY_PERMUTATION", "ROTATIONS", "link_images", "symmetry_violation"]

#: Dimension kinds every permutation of their coordinates leaves unchanged.
ANY_PERMUTATION = frozenset({"switch", "fully_connected"})
#: Dimension kinds a rotation of their coordinates leaves unchanged.
ROTATIONS = frozenset({"ring", "uni_ring"})


def symmetry_violation(topology: Topology, permutation: Sequence[int]) -> str | None:
    """None if *permutation* (``permutation[r]``: the image of NPU r) is a symmetry of *topology*, else why not.

    It must act on the coordinates one dimension at a time, as a symmetry of each dimension it moves.
    """
    maps: list[dict[int, int]] = [{} for _ in topology.dims]
    for r, image in enumerate(permutation):
        for d, (a, b) in enumerate(zip(topology.coords(r), topology.coords(image), strict=True)):
            if maps[d].setdefault(a, b) != b:
                return f"the replica shift is not a per-dimension permutation of topology {topology.name}"
    for d, (dim, mapping) in enumerate(zip(topology.dims, maps, strict=True)):
        if all(a == b for a, b in mapping.items()):
            continue
        if dim.kind in ANY_PERMUTATION:
            continue
        n = dim.npus
        turn = mapping[0]
        if dim.kind in ROTATIONS and all(b == (a + turn) % n for a, b in mapping.items()):
            continue
        return f"the replica shift permutes dimension {d} ({dim.kind}) of topology {topology.name}, not a symmetry"
    return None


def link_images(topology: Topology, moves: Callable[[int], Callable[[int], int]]) -> list[int | None]:
    """Per link, the link a symmetry moves it onto; None for a link that joins two switches (not a product's).

    ``moves(npu)`` is the symmetry applied to the link attached to *npu* (a link between two NPUs: its source's);
    it must map *npu* onto an NPU of the same switch group in every dimension it permutes, as a symmetry does. A
    switch's image is the switch of its dimension that serves the image of the NPU.
    """
    ids = topology.link_ids
    dim_of = topology.switch_dimensions()
    out: list[int | None] = []
    switch_of: dict[tuple[int, int], str] = {}
    for u, v in topology.links:
        if isinstance(u, int) and isinstance(v, int):
            move = moves(u)
            out.append(ids[move(u), move(v)])
            continue
        npu, switch = (u, v) if isinstance(u, int) else (v, u)
        if not isinstance(npu, int) or isinstance(switch, int):
            out.append(None)
            continue
        dim = dim_of[switch]
        image = moves(npu)(npu)
        found = switch_of.get((dim, image))
        if found is None:
            stride = topology.strides[dim]
            base = image - ((image // stride) % topology.dims[dim].npus) * stride
            found = switch_of[dim, image] = topology.dim_switch(dim, base)
        out.append(ids[(image, found) if isinstance(u, int) else (found, image)])
    return out
