"""Summaries and drawings of Chakra ET workloads for people (``etsim inspect``/``visualize``)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from etsim.chakra.graph import COLLECTIVE_NAMES, NodeType, Trace
from etsim.chakra.validate import topological_order
from etsim.errors import TraceError
from etsim.files import make_parent, write_text

__all__ = ["RankSummary", "critical_path_nodes", "summarize_trace", "to_networkx", "write_graph"]


@dataclass
class RankSummary:
    """What one rank's trace contains."""

    rank: int | None
    path: str
    nodes: int
    nodes_by_type: dict[str, int]
    collectives: dict[str, dict[int, int]] = field(default_factory=dict)
    """Collective name → {size in bytes: count}."""
    collective_bytes: int = 0
    send_bytes: int = 0
    recv_bytes: int = 0
    compute_micros: int = 0
    critical_path_nodes: int = 0
    """Nodes on the longest dependency chain, or -1 if the graph has a cycle."""
    critical_path_deps: str = "data+ctrl"
    """Which dependencies the critical path follows: ``data+ctrl``, or ``data`` when control
    dependencies form a cycle (as the call-stack edges of PyTorch-derived traces can)."""

    @property
    def total_bytes(self) -> int:
        """Bytes this rank communicates: collective sizes plus bytes sent."""
        return self.collective_bytes + self.send_bytes

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rank": self.rank,
            "path": self.path,
            "nodes": self.nodes,
            "nodes_by_type": self.nodes_by_type,
            "collectives": {k: {str(s): c for s, c in v.items()} for k, v in self.collectives.items()},
            "collective_bytes": self.collective_bytes,
            "send_bytes": self.send_bytes,
            "recv_bytes": self.recv_bytes,
            "total_bytes": self.total_bytes,
            "compute_micros": self.compute_micros,
            "critical_path_nodes": self.critical_path_nodes,
            "critical_path_deps": self.critical_path_deps,
        }


def critical_path_nodes(trace: Trace, *, include_ctrl: bool = True) -> int:
    """Number of nodes on the longest dependency chain; -1 if the graph has a cycle."""
    order = topological_order(trace, include_ctrl=include_ctrl)
    if len(order) != trace.num_nodes:
        return -1
    depth = [0] * trace.num_nodes
    best = 0
    for pos in order:
        d = 0
        deps = trace.data_deps(pos) + trace.ctrl_deps(pos) if include_ctrl else trace.data_deps(pos)
        for dep in deps:
            if depth[dep] > d:
                d = depth[dep]
        depth[pos] = d + 1
        best = max(best, d + 1)
    return best


def summarize_trace(trace: Trace) -> RankSummary:
    """Count nodes, collectives and bytes of one rank."""
    by_type = Counter(NodeType(t).name if t in NodeType._value2member_map_ else f"TYPE_{t}" for t in trace.types)
    summary = RankSummary(
        rank=trace.rank,
        path=str(trace.path) if trace.path else "",
        nodes=trace.num_nodes,
        nodes_by_type=dict(sorted(by_type.items())),
    )
    collectives: dict[str, Counter[int]] = {}
    for pos, node_type in enumerate(trace.types):
        size = trace.comm_size[pos] or 0
        if node_type == NodeType.COMM_COLL_NODE:
            ct = trace.comm_type[pos]
            name = COLLECTIVE_NAMES.get(ct, f"comm_type_{ct}") if ct is not None else "unknown"
            collectives.setdefault(name, Counter())[size] += 1
            summary.collective_bytes += size
        elif node_type == NodeType.COMM_SEND_NODE:
            summary.send_bytes += size
        elif node_type == NodeType.COMM_RECV_NODE:
            summary.recv_bytes += size
        elif node_type == NodeType.COMP_NODE:
            summary.compute_micros += trace.duration_micros[pos]
    summary.collectives = {k: dict(sorted(v.items())) for k, v in sorted(collectives.items())}
    summary.critical_path_nodes = critical_path_nodes(trace)
    if summary.critical_path_nodes < 0:
        summary.critical_path_nodes = critical_path_nodes(trace, include_ctrl=False)
        summary.critical_path_deps = "data"
    return summary


def to_networkx(trace: Trace) -> nx.DiGraph:
    """The dependency graph as a networkx DiGraph.

    One vertex per node id (attributes: name, type, duration, comm fields) and an edge
    parent → child per dependency (``kind`` = ``data`` or ``ctrl``).
    """
    g = nx.DiGraph()
    for pos, nid in enumerate(trace.ids):
        attrs: dict[str, Any] = {
            "name": trace.names[pos],
            "type": NodeType(trace.types[pos]).name if trace.types[pos] in NodeType._value2member_map_ else "?",
            "duration_micros": trace.duration_micros[pos],
        }
        for key in ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag"):
            value = getattr(trace, key)[pos]
            if value is not None:
                attrs[key] = value
        g.add_node(nid, **attrs)
    for pos in range(trace.num_nodes):
        for dep in trace.data_deps(pos):
            g.add_edge(trace.ids[dep], trace.ids[pos], kind="data")
        for dep in trace.ctrl_deps(pos):
            if not g.has_edge(trace.ids[dep], trace.ids[pos]):
                g.add_edge(trace.ids[dep], trace.ids[pos], kind="ctrl")
    return g


def _dot_label(lines: list[str]) -> str:
    escaped = (line.replace("\\", "\\\\").replace('"', '\\"') for line in lines)
    return '"' + "\\n".join(escaped) + '"'


def write_graph(trace: Trace, out: str | os.PathLike[str]) -> Path:
    """Write the dependency graph as Graphviz ``.dot`` or ``.graphml`` (chosen by the suffix)."""
    path = Path(out)
    if path.suffix not in (".graphml", ".dot"):
        raise TraceError(f"{path}: unsupported output format {path.suffix!r} (use .dot or .graphml)")
    g = to_networkx(trace)
    if path.suffix == ".graphml":
        make_parent(path, TraceError)
        try:
            nx.write_graphml(g, path)
        except OSError as exc:
            raise TraceError(f"{path}: cannot write: {exc.strerror or exc}") from None
    else:
        lines = ["digraph chakra {", "  node [shape=box];"]
        for nid, data in g.nodes(data=True):
            detail = data["type"]
            if "comm_size" in data:
                detail += f" {data['comm_size']} B"
            if data["duration_micros"]:
                detail += f" {data['duration_micros']} us"
            title = f"{nid}: {data['name']}"
            lines.append(f"  {nid} [label={_dot_label([title, detail])}];")
        for u, v, data in g.edges(data=True):
            style = " [style=dashed]" if data["kind"] == "ctrl" else ""
            lines.append(f"  {u} -> {v}{style};")
        lines.append("}")
        write_text(path, "\n".join(lines) + "\n", TraceError)
    return path
