"""Timelines of a run as Chrome trace-event JSON, which the Perfetto UI and Chrome's trace viewer open.

The layout (one process per rank, then one for the network links):

- tracks (threads) per rank: ``CPU ops``, ``compute``, ``comm`` (collectives, sends, memory), ``recv``
  (workload receives) and ``other`` (metadata nodes), each split into lanes ``compute 1``,
  ``compute 2`` … when nodes overlap (more than one stream, or free slots);
- every workload node is one complete (``X``) slice named after the node, with its node id, type,
  bytes and communicator group in ``args``; a collective's slice also names its algorithm;
- a collective's chunks (its algorithm parts) are slices too: the first nests inside the collective's
  slice, the others run concurrently on ``comm N · chunk c`` tracks below it;
- with messages, every message is a ``send → D`` slice on the sender (hand-off to delivery) and a
  ``recv ← S`` slice on the receiver (delivery until its receive took it; zero long when the receive
  was already waiting), joined by a flow arrow;
- per directed link, a counter of the bytes in flight through it: a message counts on every link of
  its route from when it is sent until it is delivered (derived from messages and routes, so it is the
  same for every network model; busy time per link is in the result's ``links``).

Times: the format's ``ts``/``dur`` are µs; etsim writes them as exact decimals of the simulation's ns
(``2510 ns`` is ``2.51``), so nothing is rounded. Output is deterministic (byte-identical for the same
run; ``.gz`` files carry no time stamp).

Size: at most *limit* events are written (metadata not counted). When a run has more, the trace
keeps everything that starts before the time at which the limit is reached and says so: in
``otherData``, with an instant event at that time, and with an :class:`~etsim.errors.EtsimWarning`.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etsim.chakra.graph import NodeType
from etsim.errors import ConfigError, warn
from etsim.files import make_parent
from etsim.units import format_time
from etsim.workload.runs import COMM, COMPUTE, CPU

if TYPE_CHECKING:
    from etsim.report.record import RunRecorder
    from etsim.workload.collectives import CollectiveCall

__all__ = ["DEFAULT_LIMIT", "TraceSummary", "us", "write_chrome_trace"]

#: Events written at most unless told otherwise (≈ 100–150 MB of JSON, a few MB gzipped).
DEFAULT_LIMIT = 1_000_000

# Track categories of workload nodes, in display order.
_CPU, _COMPUTE, _COMM, _RECV, _OTHER, _SENDS, _RECVS = range(7)
_TRACK_LABEL = ("CPU ops", "compute", "comm", "recv", "other", "messages sent", "messages received")
_T_COMP = int(NodeType.COMP_NODE)
_T_COLL = int(NodeType.COMM_COLL_NODE)
_T_SEND = int(NodeType.COMM_SEND_NODE)
_T_RECV = int(NodeType.COMM_RECV_NODE)
_T_LOAD = int(NodeType.MEM_LOAD_NODE)
_T_STORE = int(NodeType.MEM_STORE_NODE)
_TYPE_NAMES = {int(t): t.name for t in NodeType}
_CAT = {_T_COMP: "compute", _T_COLL: "collective", _T_SEND: "send", _T_RECV: "recv", _T_LOAD: "memory"}
_CAT[_T_STORE] = "memory"


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """What :func:`write_chrome_trace` wrote.

    Attributes:
        path: the file.
        events: trace events written (metadata not counted).
        available: events the run produced.
        truncated: the limit (or a recorder's message limit) cut the trace.
        cut_ns: the time from which nothing was written (None if the trace is complete).
        size: bytes written.
    """

    path: Path
    events: int
    available: int
    truncated: bool
    cut_ns: float | None
    size: int


def us(ns: float) -> str:
    """*ns* as an exact decimal number of µs (the trace format's unit), e.g. 2510.0 → ``2.51``."""
    if ns == math.floor(ns) and abs(ns) < 2**53:
        q, r = divmod(int(ns), 1000)
        return str(q) if r == 0 else f"{q}.{r:03d}".rstrip("0")
    # Shift the shortest round-tripping decimal of ns by three places: exact, and it reads back as ns.
    return format(Decimal(repr(ns)).scaleb(-3), "f")


class _Lanes:
    """Greedy lane assignment: a slice takes the lowest lane free at its start."""

    __slots__ = ("ends",)

    def __init__(self) -> None:
        self.ends: list[float] = []

    def take(self, start: float, end: float) -> int:
        for lane, free in enumerate(self.ends):
            if free <= start:
                self.ends[lane] = end
                return lane
        self.ends.append(end)
        return len(self.ends) - 1


def _category(trace: Any, node_class: int, j: int) -> int:
    t = trace.types[j]
    if node_class == CPU:
        return _CPU
    if node_class == COMPUTE:
        return _COMPUTE
    if node_class == COMM:
        return _COMM
    return _RECV if t == _T_RECV else _OTHER


def _node_args(trace: Any, j: int, call: CollectiveCall | None) -> dict[str, Any]:
    t = trace.types[j]
    args: dict[str, Any] = {"node_id": trace.ids[j], "type": _TYPE_NAMES.get(t, str(t))}
    size = trace.comm_size[j] if t in (_T_COLL, _T_SEND, _T_RECV) else trace.tensor_size[j]
    if size is not None:
        args["bytes"] = size
    if t == _T_COLL:
        pg = trace.pg_name[j]
        args["group"] = pg if pg else "0"
    if t == _T_SEND and trace.comm_dst[j] is not None:
        args["to"] = trace.comm_dst[j]
    if t == _T_RECV and trace.comm_src[j] is not None:
        args["from"] = trace.comm_src[j]
    if call is not None:
        args["collective"] = call.type
        args["algorithm"] = call.algorithm
        args["ranks"] = len(call.group)
        args["chunks"] = len(call.runs)
    return args


class _Builder:
    """Collects events as (ts_ns, text) per category, then writes those before the cut."""

    def __init__(self, rec: RunRecorder, messages: bool, names: Mapping[int, str] | None = None) -> None:
        if rec.engine is None or not rec.complete:
            raise ConfigError("no trace: the recorder did not watch a completed run")
        self.names = names or {}
        self.rec = rec
        self.engine = rec.engine
        self.with_messages = messages
        # Per rank: (category, lane, chunk) -> tid, assigned after all slices are placed.
        self.tracks: list[dict[tuple[int, int, int], int]] = [{} for _ in self.engine.runs]
        # Slices as (rank, track key, ts, text without pid/tid), and other events with their pid/tid.
        self.ts: list[float] = []
        self.slices: list[tuple[int, tuple[int, int, int], str]] = []
        self.flows: list[tuple[int, int, tuple[int, int, int], int, tuple[int, int, int], float, float]] = []
        self.counters: list[str] = []
        self.counter_ts: list[float] = []

    def _slice(self, rank: int, key: tuple[int, int, int], name: str, cat: str, start: float, end: float,
               args: str) -> None:  # fmt: skip
        self.tracks[rank].setdefault(key, 0)
        self.ts.append(start)
        text = (
            f'"ph":"X","name":{json.dumps(name)},"cat":"{cat}","ts":{us(start)},"dur":{us(end - start)},"args":{args}'
        )
        self.slices.append((rank, key, text))

    def nodes(self) -> None:
        rec = self.rec
        calls = {(c.rank, c.j): c for c in rec.calls}
        for run in self.engine.runs:
            trace = run.trace
            rank = run.rank
            starts, finishes = rec.start[rank], rec.finish[rank]
            order = sorted((s, j) for j, s in enumerate(starts) if s == s)
            lanes = [_Lanes() for _ in range(5)]
            for s, j in order:
                f = finishes[j]
                cat_track = _category(trace, run.node_class[j], j)
                lane = lanes[cat_track].take(s, f)
                call = calls.get((rank, j)) if trace.types[j] == _T_COLL and cat_track != _CPU else None
                name = trace.names[j] or f"{_TYPE_NAMES.get(trace.types[j], 'node')} {trace.ids[j]}"
                cat = "cpu" if cat_track == _CPU else _CAT.get(trace.types[j], "other")
                args = json.dumps(_node_args(trace, j, call), separators=(",", ":"))
                self._slice(rank, (cat_track, lane, 0), name, cat, s, f, args)
                if call is not None:
                    for c, part in enumerate(call.runs):
                        ps = rec.part_start.get(part)
                        pe = rec.part_end.get(part)
                        if ps is None or pe is None:
                            continue
                        label = f"{call.algorithm} chunk {c + 1}/{len(call.runs)}"
                        pargs = f'{{"chunk":{c},"node_id":{trace.ids[j]}}}'
                        self._slice(rank, (cat_track, lane, c), label, "chunk", ps, pe, pargs)

    def messages(self) -> None:
        rec = self.rec
        n = rec.num_messages
        send_lanes = [_Lanes() for _ in self.engine.runs]
        recv_lanes = [_Lanes() for _ in self.engine.runs]
        for row in sorted(range(n), key=lambda i: (rec.m_sent[i], i)):
            src, dst, size = rec.m_src[row], rec.m_dst[row], rec.m_size[row]
            sent, delivered, received = rec.m_sent[row], rec.m_delivered[row], rec.m_received[row]
            if delivered != delivered or received != received:
                continue  # not delivered (only in a run that did not complete)
            skey = (_SENDS, send_lanes[src].take(sent, delivered), 0)
            self._slice(src, skey, f"send → {dst}", "send", sent, delivered, f'{{"bytes":{size!r},"to":{dst}}}')
            rkey = (_RECVS, -1, 0)  # lanes of receives are taken in delivery order below
            self.flows.append((row, src, skey, dst, rkey, delivered, received))
        for i, (row, src, skey, dst, _rkey, delivered, received) in enumerate(
            sorted(self.flows, key=lambda f: (f[5], f[0]))
        ):
            rkey = (_RECVS, recv_lanes[dst].take(delivered, received), 0)
            self.flows[i] = (row, src, skey, dst, rkey, delivered, received)
            size = rec.m_size[row]
            self._slice(dst, rkey, f"recv ← {src}", "recv", delivered, received, f'{{"bytes":{size!r},"from":{src}}}')

    def links(self) -> None:
        rec = self.rec
        network = self.engine.network
        topo = network.topology
        routes: dict[tuple[int, int], list[int]] = {}
        changes: dict[int, list[tuple[float, int, float]]] = {}
        for row in range(rec.num_messages):
            key = (rec.m_src[row], rec.m_dst[row])
            route = routes.get(key)
            if route is None:
                route = routes[key] = list(network.route(*key))
            delivered = rec.m_delivered[row]
            size = rec.m_size[row]
            for link in route:
                lst = changes.setdefault(link, [])
                lst.append((rec.m_sent[row], 1, size))
                if delivered == delivered:
                    lst.append((delivered, -1, size))
        pid = len(self.engine.runs)
        for link in sorted(changes):
            u, v = topo.links[link]
            name = json.dumps(f"link {link}: {u} → {v}")
            in_flight = 0
            total = 0.0
            events = sorted(changes[link], key=lambda e: (e[0], e[1]))
            i = 0
            while i < len(events):
                t = events[i][0]
                while i < len(events) and events[i][0] == t:
                    _, sign, size = events[i]
                    in_flight += sign
                    total = total + size if sign > 0 else total - size
                    i += 1
                if in_flight == 0:
                    total = 0.0  # no rounding residue once the link is empty
                self.counter_ts.append(t)
                self.counters.append(
                    f'{{"ph":"C","pid":{pid},"name":{name},"ts":{us(t)},"args":{{"bytes":{total!r}}}}}'
                )

    def cut(self, limit: int) -> tuple[float, int]:
        """The time from which nothing is written (inf: everything) and the number of events available."""
        per_flow = 2 if self.with_messages else 0
        available = len(self.ts) + len(self.counter_ts) + per_flow * len(self.flows)
        cut = self.rec.messages_cut_ns
        if available > limit:
            times = sorted([*self.ts, *self.counter_ts, *([f[5] for f in self.flows] * per_flow)])
            cut = min(cut, times[limit])
        return cut, available

    def assign_tids(self) -> None:
        for tracks in self.tracks:
            for tid, key in enumerate(sorted(tracks), start=1):
                tracks[key] = tid

    def metadata(self) -> Iterator[str]:
        topo_pid = len(self.engine.runs)
        order = {rank: i for i, rank in enumerate(self.names)}  # (named processes in the order named: a job's together)
        for rank, tracks in enumerate(self.tracks):
            process = json.dumps(self.names.get(rank, f"rank {rank}"))
            position = order.get(rank, len(order) + rank)
            yield f'{{"ph":"M","pid":{rank},"name":"process_name","args":{{"name":{process}}}}}'
            yield f'{{"ph":"M","pid":{rank},"name":"process_sort_index","args":{{"sort_index":{position}}}}}'
            for key, tid in tracks.items():
                cat, lane, chunk = key
                label = _TRACK_LABEL[cat] + (f" {lane + 1}" if lane > 0 or _has_lanes(tracks, cat) else "")
                if chunk:
                    label += f" · chunk {chunk + 1}"
                name = json.dumps(label)
                yield f'{{"ph":"M","pid":{rank},"tid":{tid},"name":"thread_name","args":{{"name":{name}}}}}'
                yield f'{{"ph":"M","pid":{rank},"tid":{tid},"name":"thread_sort_index","args":{{"sort_index":{tid}}}}}'
        if self.counters:
            yield f'{{"ph":"M","pid":{topo_pid},"name":"process_name","args":{{"name":"network links"}}}}'
            yield f'{{"ph":"M","pid":{topo_pid},"name":"process_sort_index","args":{{"sort_index":{topo_pid}}}}}'

    def events(self, cut: float) -> Iterator[str]:
        for (rank, key, text), ts in zip(self.slices, self.ts, strict=True):
            if ts < cut:
                yield f'{{"pid":{rank},"tid":{self.tracks[rank][key]},{text}}}'
        if self.with_messages:
            for row, src, skey, dst, rkey, delivered, _received in self.flows:
                if delivered < cut:
                    sent = self.rec.m_sent[row]
                    stid, rtid = self.tracks[src][skey], self.tracks[dst][rkey]
                    yield (
                        f'{{"ph":"s","id":{row},"pid":{src},"tid":{stid},"name":"message","cat":"message",'
                        f'"ts":{us(sent)}}}'
                    )
                    yield (
                        f'{{"ph":"f","bp":"e","id":{row},"pid":{dst},"tid":{rtid},"name":"message",'
                        f'"cat":"message","ts":{us(delivered)}}}'
                    )
        for text, ts in zip(self.counters, self.counter_ts, strict=True):
            if ts < cut:
                yield text


def _has_lanes(tracks: dict[tuple[int, int, int], int], cat: int) -> bool:
    return any(k[0] == cat and k[1] > 0 for k in tracks)


def write_chrome_trace(
    rec: RunRecorder,
    path: str | os.PathLike[str],
    *,
    messages: bool = False,
    limit: int = DEFAULT_LIMIT,
    links: bool = True,
    process_names: Mapping[int, str] | None = None,
) -> TraceSummary:
    """Write the run *rec* watched as a Chrome trace-event JSON file (gzipped if *path* ends in ``.gz``).

    Args:
        rec: a :class:`~etsim.report.record.RunRecorder` that watched a completed run (with
            ``messages=True`` for message slices and link counters).
        path: the output file.
        messages: write every message as send and receive slices joined by a flow arrow.
        links: write per-link bytes-in-flight counters (needs recorded messages).
        limit: write at most this many events; a trace cut by it says so (``otherData``, an instant
            event at the cut) and an :class:`~etsim.errors.EtsimWarning` is issued.
        process_names: rank → the name its process shows (default ``rank R``; a cluster names each job's); named
            processes sort in the mapping's order, before the others.

    Returns:
        What was written.

    Raises:
        ConfigError: *limit* is below 1, the recorder watched no completed run, or the file cannot be
            written (named).
    """
    if limit < 1:
        raise ConfigError(f"the trace limit must be at least 1 event, got {limit}")
    b = _Builder(rec, messages, process_names)
    b.nodes()
    if messages and rec.messages:
        b.messages()
    if links and rec.messages:
        b.links()
    cut, available = b.cut(limit)
    b.assign_tids()
    truncated = cut != math.inf
    other, note = _other_data(b, cut, available, limit)
    fold = getattr(b.engine, "fold", None)
    if fold is not None:  # (the ranks it mirrors ran as the simulated ones did: their rows would repeat them)
        other["folded"] = f"{fold.description}: only the simulated ranks are traced"
        warn(f"{make_parent(path)}: replica folding ({fold.description}): only the simulated ranks are traced; "
             "--no-fold-replicas traces every rank")  # fmt: skip
    p = make_parent(path)
    count = _write_file(p, b, other, cut, note)
    if truncated:
        warn(f"{p}: {note}")
    return TraceSummary(p, count, available, truncated, cut if truncated else None, p.stat().st_size)


def _other_data(b: _Builder, cut: float, available: int, limit: int) -> tuple[dict[str, Any], str]:
    """The trace's ``otherData``, and the note of a trace cut at *cut* ("" when nothing is cut)."""
    truncated = cut != math.inf
    other: dict[str, Any] = {
        "generator": "etsim",
        "time_unit": "ts and dur are µs, written as exact decimals of the simulation's ns",
        "finish_ns": max((r.finish_ns for r in b.engine.runs), default=0.0),
        "events_available": available,
        "truncated": truncated,
    }
    note = ""
    unrecorded = b.rec.messages_not_recorded
    if unrecorded:
        other["messages_not_recorded"] = unrecorded
    if truncated:
        has = (
            f"more than {available:,} events ({unrecorded:,} messages past the recording limit were not counted)"
            if unrecorded
            else f"{available:,} events"
        )
        note = (
            f"trace cut at {format_time(cut)}: the run has {has}, more than the limit of {limit:,}; "
            f"nothing from {cut!r} ns on was written (raise --trace-limit, or trace fewer messages)"
        )
        other["cut_ns"] = cut
        other["note"] = note
    return other, note


def _write_file(p: Path, b: _Builder, other: dict[str, Any], cut: float, note: str) -> int:
    """Write the trace's JSON to *p* (gzipped if it ends in ``.gz``); the events written, metadata not counted.

    Raises:
        ConfigError: the file cannot be written (named).
    """
    truncated = cut != math.inf
    count = 0
    try:
        with open(p, "wb") as raw:
            stream: Any = raw
            if p.name.endswith(".gz"):  # no name and no time stamp in the header: identical bytes every time
                stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            out = io.TextIOWrapper(stream, encoding="utf-8", newline="\n")
            out.write('{"displayTimeUnit":"ns","otherData":')
            out.write(json.dumps(other, separators=(",", ":")))
            out.write(',"traceEvents":[\n')
            first = True
            for text in b.metadata():
                out.write(text if first else ",\n" + text)
                first = False
            for text in b.events(cut):
                out.write(text if first else ",\n" + text)
                first = False
                count += 1
            if truncated:
                marker = (
                    f'{{"ph":"i","s":"g","pid":0,"tid":0,"name":"etsim: trace limit reached","ts":{us(cut)},'
                    f'"args":{{"note":{json.dumps(note)}}}}}'
                )
                out.write(marker if first else ",\n" + marker)
            out.write("\n]}\n")
            out.flush()
            out.detach()
            if stream is not raw:
                stream.close()
    except IsADirectoryError:
        raise ConfigError(f"{p}: cannot write the trace: it is a directory") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot write the trace: {exc.strerror or exc}") from None
    return count
