"""The Chakra execution-trace format: schema, reading, writing, validation and tools.

This layer never imports SimPy; it is usable on its own.

Examples:
    >>> from etsim.chakra import TraceBuilder, write_trace, read_trace
    >>> b = TraceBuilder()
    >>> a = b.comp("fwd", duration_micros=5)
    >>> _ = b.send(dst=1, size=1024, tag=0, deps=[a])
    >>> b.build().num_nodes
    2
"""

from etsim.chakra.attributes import attribute_value, make_attribute
from etsim.chakra.builder import TraceBuilder
from etsim.chakra.graph import COLLECTIVE_NAMES, CollectiveType, NodeType, Trace, Workload
from etsim.chakra.io import (
    load_workload,
    read_trace,
    resolve_family,
    serialize_trace,
    write_trace,
    write_workload,
)
from etsim.chakra.schema import et_def_pb2
from etsim.chakra.validate import Issue, validate_workload

__all__ = [
    "COLLECTIVE_NAMES",
    "CollectiveType",
    "Issue",
    "NodeType",
    "Trace",
    "TraceBuilder",
    "Workload",
    "attribute_value",
    "et_def_pb2",
    "load_workload",
    "make_attribute",
    "read_trace",
    "resolve_family",
    "serialize_trace",
    "validate_workload",
    "write_trace",
    "write_workload",
]
