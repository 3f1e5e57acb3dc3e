"""Tables of a result: the sections of the text summary, and Markdown and CSV tables for papers.

Every function reads the JSON-ready forms (:meth:`Result.to_dict`'s lists), so a saved result
renders exactly as a fresh one (``etsim report RESULT.json``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from etsim.units import format_size, format_time

if TYPE_CHECKING:
    from etsim.report.result import CollectiveRecord, Result

__all__ = [
    "TABLES",
    "collective_lines",
    "critical_path_lines",
    "critical_path_summary",
    "group_lines",
    "link_lines",
    "render",
    "rows",
]

#: Links listed in the text summary.
TOP_LINKS = 5


def _bw(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _collective_rows(collectives: Sequence[CollectiveRecord]) -> list[dict[str, Any]]:
    """One row per (type, size, algorithm, group size): count, min/max duration, bandwidths of the slowest rank."""
    found: dict[tuple[str, int, str, int], list[CollectiveRecord]] = {}
    for c in collectives:
        found.setdefault((c.type, c.bytes, c.algorithm, len(c.group)), []).append(c)
    out = []
    for (ctype, size, algo, n), records in found.items():
        slowest = max(records, key=lambda c: c.end_ns - c.start_ns)
        durs = [c.end_ns - c.start_ns for c in records]
        algbw, busbw = slowest.bandwidths()
        out.append(
            {
                "collective": ctype.lower(),
                "bytes": size,
                "algorithm": algo,
                "ranks": n,
                "calls": len(records),
                "min_ns": min(durs),
                "max_ns": max(durs),
                "algbw_GBps": algbw,
                "busbw_GBps": busbw,
            }
        )
    return out


def collective_lines(collectives: Sequence[CollectiveRecord]) -> list[str]:
    """The collectives section: per kind, per-rank duration range and nccl-tests bandwidths of the slowest rank."""
    table = _collective_rows(collectives)
    if not table:
        return []
    lines = ["collectives (per rank: min / max duration; algbw / busbw in GB/s of the slowest rank, as nccl-tests):"]
    for r in table:
        lines.append(
            f"  {r['collective']:<15} {format_size(r['bytes']):>10}  {r['algorithm']:<20} x{r['calls']:<5} "
            f"{format_time(r['min_ns']):>12} {format_time(r['max_ns']):>12} {_bw(r['algbw_GBps']):>9} "
            f"{_bw(r['busbw_GBps']):>9}"
        )
    return lines


def group_lines(groups: Sequence[dict[str, Any]]) -> list[str]:
    """Exposed communication per communicator group."""
    if not groups:
        return []
    lines = ["communicator groups (exposed comm: mean / max over ranks):"]
    for g in groups:
        lines.append(
            f"  {g['group']:<15} {g['ranks']:>5} ranks {g['calls']:>7} ops {format_size(g['bytes']):>10}  "
            f"exposed {format_time(g['exposed_comm_ns_mean']):>12} {format_time(g['exposed_comm_ns_max']):>12} "
            f"(rank {g['rank_of_max']})"
        )
    return lines


def _busiest(links: Sequence[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    return sorted(links, key=lambda lk: (-lk.get("busy_ns", 0.0), lk.get("link", 0)))[:k]


def link_lines(links: Sequence[dict[str, Any]], finish_ns: float, k: int = TOP_LINKS) -> list[str]:
    """The *k* busiest directed links."""
    if not links:
        return []
    lines = [f"busiest links (of {len(links)} that carried traffic; utilisation = busy time / finish time):"]
    for lk in _busiest(links, k):
        util = lk.get("utilisation")
        if util is None:
            util = lk["busy_ns"] / finish_ns if finish_ns > 0 else None
        util_text = "-" if util is None else f"{100 * util:.1f} %"
        lines.append(
            f"  link {lk['link']:<5} {lk['src']!s:>6} -> {lk['dst']!s:<6} {format_size(lk['bytes']):>10} "
            f"busy {format_time(lk['busy_ns']):>12} {util_text:>8} {lk['messages']:>8} messages"
        )
    return lines


def critical_path_summary(cp: dict[str, Any]) -> list[str]:
    """One line: what the critical path is made of."""
    t = cp["totals"]
    return [
        f"critical path: {len(cp['nodes'])} nodes ending at rank {cp['end']['rank']} node {cp['end']['node_id']}; "
        f"compute {format_time(t['compute_ns'])}, exposed comm {format_time(t['exposed_comm_ns'])}, "
        f"memory {format_time(t['memory_ns'])}, other {format_time(t['other_ns'])}"
    ]


def _node_label(n: dict[str, Any]) -> str:
    where = f"ranks {_ranks(n['ranks'])}" if "ranks" in n else f"rank {n['rank']}"
    name = f" ({n['name']})" if n.get("name") else ""
    what = n["type"]
    if "collective" in n:
        what = f"{n['collective'].lower()} {format_size(n['bytes'])} {n['algorithm']}"
    return f"{where} node {n['node_id']}{name} {what}"


def _ranks(ranks: Sequence[int], limit: int = 6) -> str:
    text = ",".join(map(str, ranks[:limit]))
    return text + (f",… ({len(ranks)})" if len(ranks) > limit else "")


def critical_path_lines(cp: dict[str, Any], limit: int = 40) -> list[str]:
    """The critical path node by node (the first and last *limit* / 2 when longer)."""
    lines = ["critical path, node by node (waited: time the node ran while the path was on a peer):"]
    lines.append(f"  {'from':>12} {'to':>12} {'compute':>11} {'exposed comm':>12} {'other':>10} {'waited':>11}  node")
    held = cp.get("held_back")
    if held is not None:
        through = held["through"]
        how = f", reaching the others through {_node_label(through)}" if through is not None else ""
        share = f"{held['share']:.0%} of the run"
        spent = f"{format_time(held['compute_ns'])} of its compute on the critical path ({share})"
        if held.get("alike"):  # (one of equal ranks: it held no one back)
            head = f"the critical path runs through rank {held['rank']}: {spent}; every rank computes as long"
        else:
            head = f"held back most by rank {held['rank']}: {spent}{how}"
        if held.get("folded"):
            head += " (a folded run: its mirrors' compute adds up on the rank; --no-fold-replicas names the full run's)"
        lines.insert(0, head)
    nodes = cp["nodes"]
    shown = nodes if len(nodes) <= limit else [*nodes[: limit // 2], None, *nodes[-limit // 2 :]]
    for n in shown:
        if n is None:
            lines.append(f"  … {len(nodes) - 2 * (limit // 2)} more nodes (all in the JSON's critical_path)")
            continue
        other = n["memory_ns"] + n["other_ns"]
        lines.append(
            f"  {format_time(n['start_ns']):>12} {format_time(n['end_ns']):>12} {format_time(n['compute_ns']):>11} "
            f"{format_time(n['exposed_comm_ns']):>12} {format_time(other):>10} {format_time(n['wait_ns']):>11}  "
            f"{_node_label(n)}"
        )
    return lines


# -- tables for papers --


def _rank_rows(result: Result) -> list[dict[str, Any]]:
    return [
        {
            "rank": r.rank,
            "finish_ns": r.finish_ns,
            "compute_ns": r.compute_ns,
            "comm_ns": r.comm_ns,
            "exposed_comm_ns": r.exposed_comm_ns,
        }
        for r in result.ranks
    ]


def _summary_rows(result: Result) -> list[dict[str, Any]]:
    ranks = result.ranks
    n = len(ranks) or 1
    row: dict[str, Any] = {
        "finish_ns": result.finish_ns,
        "ranks": len(ranks),
        "compute_ns_mean": sum(r.compute_ns for r in ranks) / n,
        "comm_ns_mean": sum(r.comm_ns for r in ranks) / n,
        "exposed_comm_ns_mean": sum(r.exposed_comm_ns for r in ranks) / n,
        "exposed_comm_ns_max": max((r.exposed_comm_ns for r in ranks), default=0.0),
        "messages": result.network.get("messages"),
        "bytes": result.network.get("bytes"),
    }
    if result.critical_path is not None:
        for key, value in result.critical_path["totals"].items():
            row[f"critical_{key}"] = value
    return [row]


def _link_rows(result: Result) -> list[dict[str, Any]]:
    keys = ("link", "src", "dst", "bytes", "busy_ns", "utilisation", "messages")
    return [{k: lk.get(k) for k in keys} for lk in _busiest(result.links, len(result.links))]


def _path_rows(result: Result) -> list[dict[str, Any]]:
    if result.critical_path is None:
        return []
    keys = ("rank", "node_id", "name", "type", "start_ns", "end_ns", "compute_ns", "exposed_comm_ns", "memory_ns",
            "other_ns", "wait_ns")  # fmt: skip
    return [{k: n.get(k) for k in keys} for n in result.critical_path["nodes"]]


#: Tables ``etsim report --table`` can render, with how to build their rows.
TABLES = {
    "summary": _summary_rows,
    "ranks": _rank_rows,
    "collectives": lambda result: _collective_rows(result.collectives),
    "groups": lambda result: [dict(g) for g in result.groups],
    "links": _link_rows,
    "critical_path": _path_rows,
}


def rows(result: Result, table: str) -> list[dict[str, Any]]:
    """The rows of *table* (a key of :data:`TABLES`) for *result*."""
    return TABLES[table](result)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) >= 1e-3 else f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def render(result: Result, fmt: str, tables: Sequence[str]) -> str:
    """*tables* of *result* as Markdown (each under a heading) or CSV (one table only)."""
    if fmt == "csv":
        (name,) = tables
        data = rows(result, name)
        buf = io.StringIO()
        if data:
            writer = csv.DictWriter(buf, fieldnames=list(data[0]), lineterminator="\n")
            writer.writeheader()
            for row in data:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return buf.getvalue()
    out: list[str] = []
    for name in tables:
        data = rows(result, name)
        if not data:
            continue
        header = list(data[0])
        out.append(f"### {name.replace('_', ' ')}\n")
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---:" if _numeric(data, h) else "---" for h in header) + "|")
        for row in data:
            out.append("| " + " | ".join(_cell(row.get(h)).replace("|", "\\|") for h in header) + " |")
        out.append("")
    return "\n".join(out)


def _numeric(data: list[dict[str, Any]], key: str) -> bool:
    return all(isinstance(r.get(key), int | float) or r.get(key) is None for r in data)
