"""``etsim topology``: inspect topology files.

``etsim topology show FILE [--json]`` prints the NPUs, switches, links, bisection bandwidth and
diameter of a topology YAML (etsim's format or a registered foreign one) and the network model it selects.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from etsim.network import NetworkConfig, load_network
from etsim.units import format_bandwidth, format_time

__all__ = ["describe", "register"]


def describe(config: NetworkConfig) -> dict[str, Any]:
    """Summarise a loaded network as a JSON-ready mapping (bandwidths in B/ns, times in ns)."""
    topo = config.topology
    bisection, method = topo.bisection_bandwidth()
    bws = topo.bandwidths or [0.0]
    lats = topo.latencies or [0.0]
    return {
        "name": topo.name,
        "source": topo.source,
        "kind": topo.kind,
        "npus": topo.npus,
        "live_npus": len(topo.live_npus),
        "switches": len(topo.switches),
        "links": len(topo.links),
        "dims": [
            {"kind": d.kind, "npus": d.npus, "bandwidth_bytes_per_ns": d.bandwidth, "latency_ns": d.latency}
            for d in topo.dims
        ],
        "bandwidth_bytes_per_ns": {"min": min(bws), "max": max(bws)},
        "latency_ns": {"min": min(lats), "max": max(lats)},
        "bisection_bandwidth_bytes_per_ns": bisection,
        "bisection_method": method,
        "diameter_hops": topo.diameter(),
        "failed_npus": sorted(topo.failed_npus),
        "failed_links": [list(link) for link in topo.failed_links],
        "model": config.model,
        "model_options": dict(config.options),
    }


def _range(bounds: dict[str, float], fmt: Any) -> str:
    low, high = bounds["min"], bounds["max"]
    return fmt(low) if low == high else f"{fmt(low)} .. {fmt(high)}"


def _show(args: argparse.Namespace) -> int:
    info = describe(load_network(args.file))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    rows = [
        ("name", info["name"]),
        ("source", info["source"]),
        ("kind", info["kind"]),
    ]
    for i, d in enumerate(info["dims"]):
        bandwidth, latency = format_bandwidth(d["bandwidth_bytes_per_ns"]), format_time(d["latency_ns"])
        rows.append((f"dim {i}", f"{d['kind']} x{d['npus']}, {bandwidth}, {latency}"))
    npus = str(info["npus"])
    if info["failed_npus"]:
        npus += f" ({info['live_npus']} live; failed: {', '.join(map(str, info['failed_npus']))})"
    rows += [
        ("NPUs", npus),
        ("switches", str(info["switches"])),
        ("links", f"{info['links']} directed"),
        ("link bandwidth", _range(info["bandwidth_bytes_per_ns"], format_bandwidth)),
        ("link latency", _range(info["latency_ns"], format_time)),
        ("bisection", f"{format_bandwidth(info['bisection_bandwidth_bytes_per_ns'])} ({info['bisection_method']})"),
        ("diameter", f"{info['diameter_hops']} hops"),
    ]
    if info["failed_links"]:
        rows.append(("failed links", ", ".join(f"{u}->{v}" for u, v in info["failed_links"])))
    options = ", ".join(f"{k}={v}" for k, v in info["model_options"].items())
    rows.append(("model", f"{info['model']}" + (f" ({options})" if options else "")))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``etsim topology`` and its sub-commands."""
    parser = subparsers.add_parser("topology", help="inspect network topology files")
    sub = parser.add_subparsers(dest="topology_command", metavar="SUBCOMMAND")
    sub.required = True
    show = sub.add_parser("show", help="print NPUs, switches, links, bisection bandwidth and diameter")
    show.add_argument("file", metavar="FILE", help="topology YAML (etsim format or a registered foreign one)")
    show.add_argument("--json", action="store_true", help="print machine-readable JSON")
    show.set_defaults(handler=_show)
