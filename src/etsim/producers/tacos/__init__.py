"""TACOS-style topology-aware collective synthesis: any topology in, a Chakra ET algorithm out.

All-Gather is synthesised by greedy link–chunk matching over an implicit time-expanded network
(Won et al., TACOS; ``reference/synthesis.md`` §1): time jumps from one chunk arrival to the next, and
at every event each free logical link whose source holds a chunk its destination still lacks (and is
not already receiving) is given one such chunk. Reduce-Scatter is the time reverse of an All-Gather on
the transposed graph (a chunk's broadcast tree becomes its reduction tree); All-Reduce is that
Reduce-Scatter followed by an All-Gather, chunk by chunk (a chunk's All-Gather starts as soon as its
reduction has reached its owner).

Differences from the released reference (v1.3.0), all deliberate:

- **Incremental state.** Per NPU a bitset of held chunks and a bitset of chunks still needed (not held,
  not in flight); per event only the free in-links of the NPUs that just received a chunk and of their
  out-neighbours are examined. A link whose candidate set ``held(src) & needed(dst)`` was empty stays
  empty until its source receives something, so nothing else needs looking at. The reference rebuilds
  the demand sets and scans all link pairs at every event (~N³ overall).
- **No duplicate transfers.** A chunk in flight to an NPU is not sent to it again, so no transfer is
  wasted or relabelled, and every transfer is causal (its chunk is at the source when it starts).
- **Link order.** At an event the examined links are taken fastest first (smallest ``w``), ties in a
  seeded random order; each picks a seeded-random chunk among its candidates.
- **Schedules are ASAP.** Every transfer starts at ``max(link free, chunk arrived at source)``, which is
  exactly when the emitted algorithm's SEND becomes ready in the simulator (it depends on the previous
  SEND on its link and on the RECV that brought the chunk), so the synthesised time is what the
  simulator measures under the ``link`` model (store-and-forward, one SEND in flight per link).

The emitted algorithm family uses **one tag per logical link** (the k-th SEND on a link matches the
k-th RECV) and symbolic sizes: every message is one chunk of ``buffer / (n·k)``.

Typical use::

    from etsim.network import load_topology
    from etsim.producers.tacos import synthesize, write_synthesis

    syn = synthesize(load_topology("topologies/mesh4x4.yaml"), "all_gather", size=1 << 30, runs=8)
    print(syn.time_ns, syn.bound.value)
    write_synthesis(syn, "out/tacos_ag")           # out/tacos_ag.0.et … simulate with --algo out/tacos_ag

Modules: :mod:`~etsim.producers.tacos.links` (the logical link graph and lower bounds),
:mod:`~etsim.producers.tacos.greedy` (the matching and schedules), :mod:`~etsim.producers.tacos.synthesis`
(runs, bounds and the algorithm family).
"""

from typing import TYPE_CHECKING

from etsim.lazy import lazy_attributes

if TYPE_CHECKING:
    from etsim.producers.tacos.greedy import Schedule, greedy_all_gather, retime, reverse
    from etsim.producers.tacos.links import LinkGraph, LowerBound, build_link_graph, lower_bound
    from etsim.producers.tacos.synthesis import COLLECTIVES, Synthesis, algo_graphs, synthesize, write_synthesis

#: Where each public name lives; a submodule (and what it imports) loads when one of its names is first used.
_HOMES = {
    "COLLECTIVES": "synthesis",
    "LinkGraph": "links",
    "LowerBound": "links",
    "Schedule": "greedy",
    "Synthesis": "synthesis",
    "algo_graphs": "synthesis",
    "build_link_graph": "links",
    "greedy_all_gather": "greedy",
    "lower_bound": "links",
    "retime": "greedy",
    "reverse": "greedy",
    "synthesize": "synthesis",
    "write_synthesis": "synthesis",
}
__getattr__ = lazy_attributes(__name__, _HOMES)

__all__ = [
    "COLLECTIVES",
    "LinkGraph",
    "LowerBound",
    "Schedule",
    "Synthesis",
    "algo_graphs",
    "build_link_graph",
    "greedy_all_gather",
    "lower_bound",
    "retime",
    "reverse",
    "synthesize",
    "write_synthesis",
]
