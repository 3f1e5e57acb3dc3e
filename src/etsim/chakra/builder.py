"""Build one rank's Chakra ET graph in code.

:class:`TraceBuilder` owns its node ids (no module-global counter), writes every attribute
with the oneof member the reference consumers read, and always writes ``is_cpu_op``
explicitly (a missing one was once read as ``true`` and made COMM nodes disappear).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from etsim.chakra.attributes import make_attribute
from etsim.chakra.graph import CollectiveType, NodeType, Trace, parse_collective
from etsim.chakra.schema import et_def_pb2 as pb
from etsim.errors import TraceError

__all__ = ["TraceBuilder"]

#: The version string etsim writes in GlobalMetadata (the Chakra generator's current one).
SCHEMA_VERSION = "1.0.0"
_COLLECTIVE_VALUES = frozenset(c.value for c in CollectiveType)


class TraceBuilder:
    """Accumulates nodes for one rank; each method returns the new node's id.

    Args:
        first_id: the id given to the first node; ids then increase by one.
        version: ``GlobalMetadata.version`` to write.
    """

    def __init__(self, first_id: int = 0, version: str = SCHEMA_VERSION) -> None:
        self._next_id = first_id
        self.metadata = pb.GlobalMetadata(version=version)
        self.nodes: list[pb.Node] = []

    def node(
        self,
        node_type: NodeType | int,
        name: str = "",
        *,
        deps: Iterable[int] = (),
        ctrl_deps: Iterable[int] = (),
        duration_micros: int = 0,
        attrs: Mapping[str, Any] | None = None,
    ) -> int:
        """Add a node of any type with the given attributes; return its id."""
        nid = self._next_id
        # Any integer is written as given (unknown node types must survive a round trip).
        try:
            node = pb.Node(id=nid, name=name, type=int(node_type), duration_micros=duration_micros)  # type: ignore[arg-type]
            node.data_deps.extend(deps)
            node.ctrl_deps.extend(ctrl_deps)
        except ValueError as exc:  # protobuf's range checks: a duration past 2^64 µs, say
            raise TraceError(f"node {nid} ({name or 'unnamed'}): does not fit Chakra's Node message: {exc}") from None
        except TypeError:  # (a duration of "100" or 1.5, a name that is no string, deps that are no ids)
            raise TraceError(
                f"node {nid} ({name!r}): expected a string name, an integer duration_micros and integer node ids in "
                f"deps, got name {name!r}, duration_micros {duration_micros!r}, deps {deps!r:.60}"
            ) from None
        for key, value in (attrs or {}).items():
            if value is not None:
                try:
                    node.attr.append(make_attribute(key, value))
                except TypeError:  # (a size of "1 MiB", a float where Chakra's field is an integer)
                    raise TraceError(f"node {nid} ({name}): attribute {key!r}: {value!r:.60} is not of its type "
                                     "(sizes and counts are integers, in bytes)") from None  # fmt: skip
        self.nodes.append(node)
        self._next_id += 1  # (only for a node made: a refused one leaves no gap)
        return nid

    def comp(
        self,
        name: str = "comp",
        *,
        duration_micros: int = 0,
        deps: Iterable[int] = (),
        num_ops: int | None = None,
        tensor_size: int | None = None,
        is_cpu_op: bool = False,
        **extra: Any,
    ) -> int:
        """Add a COMP node (replayed for *duration_micros*, or roofline from *num_ops*)."""
        attrs = {"is_cpu_op": is_cpu_op, "num_ops": num_ops, "tensor_size": tensor_size, **extra}
        return self.node(NodeType.COMP_NODE, name, deps=deps, duration_micros=duration_micros, attrs=attrs)

    def send(self, dst: int, size: int, tag: int = 0, *, deps: Iterable[int] = (), name: str = "", **extra: Any) -> int:
        """Add a COMM_SEND node to rank *dst*."""
        attrs = {"is_cpu_op": False, "comm_dst": dst, "comm_size": size, "comm_tag": tag, **extra}
        return self.node(NodeType.COMM_SEND_NODE, name or f"send_to_{dst}", deps=deps, attrs=attrs)

    def recv(self, src: int, size: int, tag: int = 0, *, deps: Iterable[int] = (), name: str = "", **extra: Any) -> int:
        """Add a COMM_RECV node from rank *src*."""
        attrs = {"is_cpu_op": False, "comm_src": src, "comm_size": size, "comm_tag": tag, **extra}
        return self.node(NodeType.COMM_RECV_NODE, name or f"recv_from_{src}", deps=deps, attrs=attrs)

    def collective(
        self,
        comm_type: CollectiveType | int | str,
        size: int,
        *,
        deps: Iterable[int] = (),
        name: str = "",
        pg_name: str | None = None,
        **extra: Any,
    ) -> int:
        """Add a COMM_COLL node of *size* bytes (size semantics per collective: see ``collective_buffer_bytes``).

        *comm_type*: a :class:`CollectiveType`, its value, or its name (``"all_reduce"``, ``"ALL_REDUCE"``).
        """
        if isinstance(comm_type, str):
            try:
                comm_type = parse_collective(comm_type)
            except ValueError as exc:
                raise TraceError(f"collective: {exc}") from None
        attrs = {"is_cpu_op": False, "comm_type": int(comm_type), "comm_size": size, "pg_name": pg_name, **extra}
        value = int(comm_type)
        label = name or (CollectiveType(value).name if value in _COLLECTIVE_VALUES else f"collective_{value}")
        return self.node(NodeType.COMM_COLL_NODE, label, deps=deps, attrs=attrs)

    def mem(self, store: bool, tensor_size: int, *, deps: Iterable[int] = (), name: str = "", **extra: Any) -> int:
        """Add a MEM_LOAD (``store=False``) or MEM_STORE node of *tensor_size* bytes."""
        node_type = NodeType.MEM_STORE_NODE if store else NodeType.MEM_LOAD_NODE
        attrs = {"is_cpu_op": False, "tensor_size": tensor_size, **extra}
        return self.node(node_type, name or ("mem_store" if store else "mem_load"), deps=deps, attrs=attrs)

    def build(self, *, rank: int | None = None) -> Trace:
        """The flat :class:`Trace` of the nodes added so far."""
        return Trace.from_nodes(self.nodes, self.metadata, rank=rank)
