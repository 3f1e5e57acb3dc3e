"""NCCL's own choice of algorithm, protocol and channels for a call: its tuning model (``src/graph/tuning.cc``).

NCCL tabulates, per collective, algorithm and protocol, a latency and a bandwidth from the topology search
(``search.py``), and per call takes the pair of least ``latency + bytes / bandwidth``; then it trims the channels
and threads of a small call. Its constants changed across releases: :func:`bucket` names the variant a version
uses (2.8–2.11, 2.12–2.17, 2.18–2.20, 2.21–2.22, 2.23–2.27, 2.28 and later). The formulas are written here from
NCCL's documented behaviour and constants; ``docs/nccl.md`` lists them. This is a *selection* rule: how long the
chosen pair takes is the simulation's (``timing.py`` and the network), not this model's estimate, which is kept for
reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from etsim.chakra.graph import CollectiveType
from etsim.system.algorithms.nccl.search import Comm, Graph, Graphs
from etsim.system.algorithms.nccl.settings import ALGORITHMS, PROTOCOLS, NcclSettings

__all__ = ["UNEVEN", "Choice", "bucket", "call_channels", "choose", "cost_table"]

C = CollectiveType
# NCCL's names of the collectives its tuner models.
_KIND = {C.BROADCAST: "bcast", C.REDUCE: "reduce", C.ALL_GATHER: "ag", C.REDUCE_SCATTER: "rs", C.ALL_REDUCE: "ar"}

# Base latency per algorithm, (LL, LL128, Simple) µs; per version bucket.
_BASE = {
    "old": {"Tree": (4.4, 4.4, 0), "Ring": (3.6, 10.0, 8.4), "CollNetDirect": (4.4, 4.4, 0),
            "CollNetChain": (4.4, 4.4, 0), "NVLS": (0, 0, 40.0), "NVLSTree": (0, 0, 40.0), "PAT": (0, 0, 0)},
    "2.18": {"Tree": (6.8, 14.0, 0), "Ring": (6.6, 14.0, 8.4)},
    "2.23": {"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4), "PAT": (8, 8, 8)},  # (PAT's "base time", 2.23+)
    "2.28": {"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4), "PAT": (8, 8, 8)},
}  # fmt: skip
# Hardware latency per hop kind and algorithm, (LL, LL128, Simple) µs; per version bucket.
_HW = {
    "old": {
        "nvl": {"Tree": (.52, 1.25, 28), "Ring": (.47, 1.9, 3.4), "CollNetDirect": (.5, 1.2, 8.0),
                "CollNetChain": (.5, 1.2, 8.0)},
        "pci": {"Tree": (1.0, 1.9, 28), "Ring": (1.0, 2.5, 5.7), "CollNetDirect": (1.0, 1.9, 8.0),
                "CollNetChain": (1.0, 1.9, 8.0)},
        "net": {"Tree": (5.0, 8.5, 28), "Ring": (2.7, 4.0, 9.6), "CollNetDirect": (5.0, 5.0, 10.7),
                "CollNetChain": (5.0, 5.0, 10.7)},
    },
    "2.18": {
        "nvl": {"Tree": (.6, 1.25, 28), "Ring": (.6, 1.9, 3.4), "CollNetDirect": (0, 0, 3.7),
                "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 23), "NVLSTree": (0, 0, 23)},
        "pci": {"Tree": (1.0, 1.9, 28), "Ring": (1.0, 2.5, 5.7), "CollNetDirect": (0, 0, 3.7),
                "CollNetChain": (0, 0, 2.8)},
        "net": {"Tree": (5.0, 8.5, 28), "Ring": (2.7, 4.0, 14.0), "CollNetDirect": (0, 0, 31),
                "CollNetChain": (0, 0, 30), "NVLS": (0, 0, 18), "NVLSTree": (0, 0, 14)},
    },
    "2.23": {
        "nvl": {"Tree": (.6, 1.25, 4.0), "Ring": (.6, 1.9, 3.4), "CollNetDirect": (0, 0, 3.7),
                "CollNetChain": (0, 0, 2.8), "NVLS": (0, 0, 25), "NVLSTree": (0, 0, 25)},
        "pci": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7), "CollNetDirect": (0, 0, 3.7),
                "CollNetChain": (0, 0, 2.8)},
        "net": {"Tree": (5.0, 8.5, 14), "Ring": (2.7, 4.0, 14.0), "CollNetDirect": (0, 0, 31),
                "CollNetChain": (0, 0, 30), "NVLS": (0, 0, 18), "NVLSTree": (0, 0, 14)},
    },
}  # fmt: skip
_HW["2.28"] = {hop: dict(table) for hop, table in _HW["2.23"].items()}
_HW["2.28"]["nvl"]["PAT"] = _HW["2.28"]["pci"]["PAT"] = (0, 0, 4.0)
_HW["2.28"]["net"]["PAT"] = (0, 0, 14)
_HW["2.28"]["net"]["NVLSTree"] = (0, 0, 20.9)

# Caps (GB/s) by GPU architecture (Volta, Ampere, Hopper, Blackwell) and nodes (1, 2, more).
_LL_MAX = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
_RING_LL128 = {"new": (20.0, 20.0, 36.7, 73.4), "2.28": (20.0, 20.0, 36.7, 34.5)}
_TREE_LL128 = {"new": ((20,) * 3, (20,) * 3, (36.7, 36.7, 29.0), (73.4, 73.4, 58.0)),
               "2.28": ((20,) * 3, (20,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))}  # fmt: skip
_TREE_MAX = {"2.8": ((26.5, 18.5, 10.0), (24.0, 22.5, 16.0)) * 2,
             "new": ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (77.4, 82.8, 72.0)),
             "2.28": ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))}  # fmt: skip
_NVLS_TREE_MAX = ((1e9,) * 3, (1e9,) * 3, (0.0, 57.7, 45.5), (0.0, 96.0, 43.8))
_LL128_BY_COLL_28 = {"bcast": 18.8, "reduce": 12.0, "ag": 18.3, "rs": 15.2, "ar": 16.9}
# The tree's bandwidth correction by log2(bytes / 64), per protocol.
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)  # fmt: skip
#: Threads of a channel per protocol, and the bytes per thread under which a call drops channels.
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
_THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}


@dataclass(frozen=True)
class Choice:
    """NCCL's choice for one call.

    The algorithm and protocol, the channels (CTAs) and threads it launches, and NCCL's own estimate of the time
    (µs), which the simulation does not use.
    """

    algorithm: str
    protocol: str
    channels: int
    threads: int
    estimate_us: float


def bucket(version: tuple[int, int]) -> str:
    """The tuning-model variant of an NCCL version (see the module docstring)."""
    for limit, name in (((2, 12), "2.8"), ((2, 18), "2.12"), ((2, 21), "2.18"), ((2, 23), "2.21"), ((2, 28), "2.23")):
        if version < limit:
            return name
    return "2.28"


def _tables(b: str) -> tuple[dict[str, tuple[float, float, float]], dict[str, dict[str, tuple[float, float, float]]]]:
    key = {"2.8": "old", "2.12": "old", "2.18": "2.18", "2.21": "2.18", "2.23": "2.23"}.get(b, "2.28")
    return _BASE[key], _HW[key]


def _arch(cc: int) -> int:
    return 3 if cc >= 100 else 2 if cc >= 90 else 1 if cc >= 80 else 0


def _log2(n: float) -> int:
    return -1 if n <= 0 else int(n).bit_length() - 1


def _candidates(kind: str, b: str) -> tuple[str, ...]:
    if kind in ("bcast", "reduce"):
        return ("Ring",)
    if kind in ("ag", "rs"):
        return ("Ring",) if b in ("2.8", "2.12") else ("Ring", "NVLS", "PAT", "CollNetDirect")
    return ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree")


#: Why a communicator whose nodes hold different numbers of its GPUs runs rings only here.
UNEVEN = "its nodes hold different numbers of the communicator's GPUs, where etsim models NCCL's rings only"


def _excluded(comm: Comm, graphs: Graphs, kind: str, settings: NcclSettings) -> dict[str, str]:
    """The algorithms NCCL cannot use for this communicator and collective, each with why."""
    out: dict[str, str] = {}
    if graphs.collnet is None:
        out["CollNetDirect"] = out["CollNetChain"] = (
            "CollNet runs across nodes only" if comm.nodes == 1
            else "CollNet is off (collnet: false)" if comm.hardware.sharp and not settings.collnet
            else "the fabric has no in-network reduction (sharp: false)"
        )  # fmt: skip
        if comm.nodes > 1:
            out["NVLS"] = "across nodes NCCL runs NVLS only with CollNet (NVLSTree is its tree form)"
    elif comm.hardware.intra != "nvswitch":
        out["CollNetDirect"] = "CollNetDirect needs an NVSwitch node"
    if comm.nodes == 1:
        out["NVLSTree"] = "NVLSTree runs across nodes only"
    if not comm.even:
        for algo in ("Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain"):
            out[algo] = UNEVEN
    if graphs.nvls is None:
        out["NVLS"] = out["NVLSTree"] = (
            "NVLS is off (nvls: false)" if not settings.nvls
            else "NVLS arrived in NCCL 2.17" if settings.version < (2, 17)
            else "no NVLink SHARP (NVLS) on these GPUs and switches for this communicator"
        )  # fmt: skip
    if comm.nodes != comm.ranks or bucket(settings.version) not in ("2.23", "2.28"):
        out["PAT"] = "PAT runs with one GPU per node, from NCCL 2.23"
    if kind in ("ag", "rs") and comm.nodes > 1:
        out.setdefault("NVLS", "NVLS all-gather and reduce-scatter across nodes need the CollNet plugin")
        # (tuning.cc zeroes it without the plugin's iallgather/ireducescatter and one NIC per GPU; etsim lays no
        # cross-node stage for it: its graphs moved no byte between nodes)
        out.setdefault(
            "CollNetDirect",
            "CollNetDirect all-gather and reduce-scatter across nodes need the CollNet plugin's iallgather and "
            "ireducescatter, which etsim does not model",
        )
    return out


def _enabled(comm: Comm, graphs: Graphs, kind: str, settings: NcclSettings) -> set[str]:
    """The algorithms NCCL may use for this communicator and collective.

    From 2.24 NCCL never swaps a forced one; before, a forced CollNet it cannot run (or NVLS across nodes without
    CollNet) left nothing, and NCCL enabled Ring and Tree instead (2.12-2.23 ``tuning.cc``).
    """
    algos = set(settings.algo if settings.algo is not None else ALGORITHMS)
    if graphs.collnet is None and settings.version < (2, 24):
        left = algos - {"CollNetDirect", "CollNetChain"} - ({"NVLS"} if comm.nodes > 1 else set())
        if not left & {"Ring", "Tree", "NVLS", "NVLSTree"}:
            algos |= {"Ring", "Tree"}
    return algos - _excluded(comm, graphs, kind, settings).keys()


def cost_table(
    comm: Comm, graphs: Graphs, collective: CollectiveType, settings: NcclSettings
) -> dict[tuple[str, str], tuple[float, float]]:
    """NCCL's (latency µs, bandwidth GB/s) per enabled (algorithm, protocol) for *collective* on *comm*."""
    kind = _KIND[collective]
    b = bucket(settings.version)
    enabled = _enabled(comm, graphs, kind, settings)
    protocols = set(settings.proto if settings.proto is not None else PROTOCOLS)
    patterns: dict[str, Graph | None] = {
        "Ring": graphs.ring, "Tree": graphs.tree, "NVLS": graphs.nvls, "NVLSTree": graphs.nvls,
        "CollNetChain": graphs.collnet, "CollNetDirect": graphs.collnet, "PAT": graphs.ring,
    }  # fmt: skip
    out = {}
    for algo in _candidates(kind, b):
        graph = patterns[algo]
        if graph is None or algo not in enabled:
            continue
        for p, proto in enumerate(PROTOCOLS):
            if proto not in protocols or (algo not in ("Ring", "Tree") and proto != "Simple"):
                continue
            if proto == "LL128" and not graphs.ll128 and settings.proto is None:
                continue
            bw = _bandwidth(comm, graph, algo, proto, kind, b)
            if bw is None:
                continue
            out[algo, proto] = (_latency(comm, graph, algo, p, kind, b), bw)
    return out


def _bandwidth(comm: Comm, graph: Graph, algo: str, proto: str, kind: str, b: str) -> float | None:
    """NCCL's algorithm bandwidth of one (algorithm, protocol), GB/s; None: not a candidate."""
    n, nodes, ppn = comm.ranks, comm.nodes, comm.ranks / comm.nodes
    cc = comm.compute_capability
    arch = min(_arch(cc), 1) if b in ("2.8", "2.12") else _arch(cc)
    i2 = nodes - 1 if nodes <= 2 else 2
    ll_max = (_LL_MAX if b not in ("2.8", "2.12", "2.18") else _LL_MAX[:2] * 2)[arch if nodes == 1 else 0][i2]
    steps = 2 * (n - 1) if kind == "ar" else n - 1 if kind in ("ag", "rs") else n
    bw = graph.bw_intra if (nodes <= 2 or algo.startswith("CollNet")) else graph.bw_inter
    if algo == "NVLS":
        ar_rule = kind == "ar" or b != "2.23"
        bw = (
            min(graph.bw_intra, graph.bw_inter)
            if ar_rule
            else min(graph.bw_intra * (ppn - 1) / ppn, 0.9 * graph.bw_inter)
        )
    elif algo == "NVLSTree":
        bw = min(graph.bw_intra, graph.bw_inter if nodes <= 2 else graph.bw_inter / 2)
    if b == "2.28" and algo in ("NVLS", "NVLSTree"):
        if graph.channels < 2:
            return None
        eff = {2: 0.85, 3: 0.74}.get(arch, 0.0)
        intra = (
            graph.bw_intra * eff * (graph.channels - 1) / graph.channels * (2.0 if kind == "ar" else (ppn - 1) / ppn)
        )
        inter = graph.bw_inter * (2 if (nodes <= 2 and algo == "NVLSTree") else 1)
        bw = min(intra, inter, _NVLS_TREE_MAX[arch][i2] if algo == "NVLSTree" else 1e30)
    bus = graph.channels * bw
    if b == "2.8" and cc == 80:
        bus = min(bus, 235.0)
    if algo == "Ring" and proto == "LL":
        share = 0.5 if b in ("2.21", "2.23", "2.28") else (0.25 if (nodes > 1 or kind in ("ar", "reduce")) else 1 / 3)
        bus = min(ll_max, bus * share)
    elif algo == "Ring" and proto == "LL128":
        limit = (_LL128_BY_COLL_28[kind] if b == "2.8" else 20.0 if b == "2.12"
                 else (_RING_LL128["2.28"] if b == "2.28" else _RING_LL128["new"])[arch])  # fmt: skip
        bus = min(bus * (0.7 if (ppn < 2 and b not in ("2.23", "2.28")) else 0.92), graph.channels * limit)
    if algo == "Tree" and (kind == "ar" or b not in ("2.23", "2.28")):
        table = _TREE_MAX["2.8"] if b == "2.8" else _TREE_MAX["2.28"] if b == "2.28" else _TREE_MAX["new"]
        bus = min(bus * 0.92, graph.channels * table[arch][i2])
    if algo == "Tree" and proto == "LL":
        bus = min(bus / 3.8, ll_max)
    elif algo == "Tree" and proto == "LL128":
        limit = (_LL128_BY_COLL_28[kind] if b == "2.8" else 20.0 if b == "2.12"
                 else (_TREE_LL128["2.28"] if b == "2.28" else _TREE_LL128["new"])[arch][i2])  # fmt: skip
        bus = min(bus * (7 / 9 if nodes == 1 else (0.915 if b == "2.8" else 120 / 128)), graph.channels * limit)
    if algo == "PAT":
        bus *= 0.75
    if algo == "CollNetDirect":
        if kind in ("ag", "rs"):
            bus = ppn * min(graph.bw_intra, 0.9 * graph.bw_inter)
        else:
            f = ppn / graph.channels
            bus /= f - (f - 1) / 2
            if cc >= 90:
                bus *= 0.85
    if not (algo != "Ring" and kind in ("ag", "rs") and b in ("2.23", "2.28")):
        if algo == "Ring" or (b == "2.28" and algo in ("NVLS", "NVLSTree")):
            bus *= n / steps
        else:
            bus *= 5 / 6 if algo in ("NVLS", "NVLSTree") else 0.5
    return bus


def _latency(comm: Comm, graph: Graph, algo: str, p: int, kind: str, b: str) -> float:
    """NCCL's latency of one (algorithm, protocol index), µs."""
    base, hw = _tables(b)
    n, nodes, ppn = comm.ranks, comm.nodes, comm.ranks // comm.nodes
    steps = 2 * (n - 1) if kind == "ar" else n - 1 if kind in ("ag", "rs") else n
    if b in ("2.18", "2.21"):
        inter_steps = (2 * nodes if nodes > 1 else 0) if kind == "ar" else nodes - 1 if kind in ("ag", "rs") else nodes
    else:
        inter_steps = (
            0 if nodes == 1 else 2 * (nodes - 1) if kind == "ar" else nodes - 1 if kind in ("ag", "rs") else nodes
        )
    zero = (0.0, 0.0, 0.0)
    hop = "nvl" if graph.nvlink else "pci"
    lat = base.get(algo, zero)[p]
    intra = hw[hop].get(algo, zero)[p]
    if b in ("2.8", "2.12") and nodes > 1 and p == 0:
        intra *= 1.8
    # (from 2.23, one GPU per node takes the tree's network latency, "fully exposed", for every algorithm: PAT's
    # own is none, so it had no network latency at all)
    inter = hw["net"].get("Tree" if (ppn == 1 and b in ("2.23", "2.28")) else algo, zero)[p]
    if algo == "Ring":
        if kind in ("bcast", "reduce"):
            return lat + hw[hop if nodes == 1 else "net"]["Ring"][p]
        overhead = 0.0
        if nodes > 1 and b not in ("2.8", "2.12"):
            overhead = 3.0 if p == 2 else 1.0
        intra = max(intra, overhead)
        return lat + (steps - inter_steps) * intra + inter_steps * inter
    if algo == "Tree":
        return lat + 2 * ((ppn - 1) * intra + _log2(nodes) * inter)
    if algo == "CollNetDirect":
        return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    if algo == "CollNetChain":
        return lat + 2 * (ppn - 1) * intra + inter
    if algo == "NVLS":
        return lat + intra + (inter if nodes > 1 else 0)
    if algo == "NVLSTree":
        return lat + intra + 2 * _log2(nodes) * inter
    return lat + _log2(nodes) * (inter / 3.5) + n * 2.8  # PAT


def _time(comm: Comm, graphs: Graphs, key: tuple[str, str], cost: tuple[float, float], nbytes: float,
          collective: CollectiveType, b: str) -> float | None:  # fmt: skip
    lat, bw = cost
    if bw <= 0:
        return None
    algo, proto = key
    log = _log2(int(nbytes) >> 6)
    if algo == "Tree" and (collective == C.ALL_REDUCE or b in ("2.8", "2.12", "2.18", "2.21")) and 0 <= log < 23:
        bw *= _TREE_CORRECTION[PROTOCOLS.index(proto)][log]
    if algo == "Ring" and proto == "Simple" and comm.nodes > 1 and collective == C.ALL_REDUCE:
        if b in ("2.8", "2.12"):
            if nbytes >= comm.ranks / 16.0 * 65536:
                lat *= 1.9
        elif nbytes / (graphs.comm_channels * comm.ranks) >= 64:
            lat *= 1.9 if comm.compute_capability < 80 else 1.4
    return lat + nbytes / (1000.0 * bw)


def call_channels(comm: Comm, graphs: Graphs, algo: str, proto: str, nbytes: float) -> tuple[int, int]:
    """The channels (CTAs) and threads NCCL launches for one call of *nbytes*."""
    if algo in ("NVLS", "NVLSTree"):
        return graphs.nvls_channels, 640
    channels, threads = graphs.comm_channels, MAX_THREADS[proto]
    if algo == "Ring" and proto == "Simple" and graphs.ring.bw_intra * graphs.ring.channels <= 12:
        threads = 256
    threshold = _THREAD_THRESHOLD[proto] * (comm.ranks if (algo == "Ring" and proto == "LL") else 1)
    if algo.startswith("CollNet"):
        threshold = 512
    while nbytes < channels * threads * threshold:
        if channels >= 2:
            channels -= 1
        elif threads % 128 == 0:
            threads //= 2
        else:
            break
    return channels, threads


def choose(
    comm: Comm, graphs: Graphs, collective: CollectiveType, nbytes: float, settings: NcclSettings
) -> Choice | str:
    """NCCL's choice for a call of *nbytes*, or why no pair is enabled.

    *nbytes* is NCCL's byte count: the all-gather's output, the reduce-scatter's input.
    """
    if comm.ranks == 1:  # NCCL copies the buffer locally and reports Ring/Simple (enqueue.cc: a cost of 0)
        return Choice("Ring", "Simple", 1, MAX_THREADS["Simple"], 0.0)
    b = bucket(settings.version)
    table = cost_table(comm, graphs, collective, settings)
    best: tuple[float, str, str] | None = None
    for algo in ALGORITHMS:
        for proto in PROTOCOLS:
            cost = table.get((algo, proto))
            if cost is None:
                continue
            t = _time(comm, graphs, (algo, proto), cost, nbytes, collective, b)
            if t is not None and t >= 0 and (best is None or t < best[0]):
                best = (t, algo, proto)
    if best is None:
        allowed = ", ".join(sorted(settings.algo or ALGORITHMS))
        protos = ", ".join(sorted(settings.proto or PROTOCOLS))
        excluded = _excluded(comm, graphs, _KIND[collective], settings)
        reasons = [f"{a}: {excluded[a]}" for a in sorted(settings.algo or ()) if a in excluded]
        if settings.proto is not None and "Simple" not in settings.proto:
            reasons.append("only Ring and Tree run LL or LL128")
        why = "".join(f"; {reason}" for reason in reasons)
        ours = any(reason.endswith(UNEVEN) for reason in reasons)
        return (
            f"no NCCL algorithm and protocol allowed here serves this call (algo: {allowed}; proto: {protos}){why}"
            + (
                " (a limit of etsim's, not NCCL's)"
                if ours
                else " (NCCL 2.24+ stops: 'no algorithm/protocol available')"
            )
        )
    channels, threads = call_channels(comm, graphs, best[1], best[2], nbytes)
    return Choice(best[1], best[2], channels, threads, best[0])
