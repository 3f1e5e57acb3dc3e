"""Selection tables in forms real runtimes load: NCCL's tuner-plugin CSV and MSCCL-IR files with size windows.

``docs/tuning.md`` documents both formats and the references they follow. In short:

- **NCCL tuner CSV** (the example tuner plugin of NCCL, ``ext-tuner/example``; ``plugins/tuner/example`` from
  2.29.7, read from ``NCCL_TUNER_CONFIG_FILE``): one line per rule, ``collective,min_bytes,max_bytes,algorithm,protocol,
  channels,nNodes,nRanks`` — collectives ``allreduce allgather reducescatter broadcast reduce``, algorithms
  ``ring``/``tree`` (the natives etsim and NCCL share, protocol ``simple``) and the ``nccl`` algorithm's forced
  choices (``nccl:Ring/LL128/8``: ``ring,ll128,8``; one that leaves the protocol open is skipped), ``-1`` for
  "NCCL decides"/"any" (noted: the example plugin runs 1 channel for a ``-1``).
  Bytes are NCCL's ``nBytes``: the larger buffer (an all-gather's output, a reduce-scatter's input), both
  bounds inclusive; the first matching line wins, as in etsim.
- **MSCCL-IR**: a copy of each chosen XML with ``minBytes``/``maxBytes`` on ``<algo>`` set from its rule (buffer
  bytes, inclusive; ``maxBytes="0"`` for no upper bound, the MSCCL executor's convention); every other byte
  of the file is kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from lxml import etree

from etsim.chakra.graph import collective_buffer_bytes
from etsim.errors import ConfigError
from etsim.files import read_text, write_bytes
from etsim.system.rules import SelectionRule

__all__ = ["NCCL_ALGORITHMS", "NCCL_COLLECTIVES", "SIZE_MAX", "msccl_files", "nccl_tuner_csv"]

#: etsim collective → NCCL tuner-plugin collective name.
NCCL_COLLECTIVES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
}
#: etsim algorithms NCCL has (the native ring and double binary tree).
NCCL_ALGORITHMS = {"ring": "ring", "tree": "tree"}
#: "No upper bound" in the CSV: the largest size_t on 64-bit machines.
SIZE_MAX = 2**64 - 1


#: NCCL's algorithm and protocol names (``NCCL_ALGO``, ``NCCL_PROTO``) → the tuner plugin's.
_PLUGIN_NAMES = {"Tree": "tree", "Ring": "ring", "CollNetDirect": "collnet_direct", "CollNetChain": "collnet_chain",
                 "NVLS": "nvls", "NVLSTree": "nvls_tree", "PAT": "pat", "LL": "ll", "LL128": "ll128",
                 "Simple": "simple"}  # fmt: skip


def _nccl_choice(spec: str) -> tuple[str | None, str, str]:
    """``(algorithm, protocol, channels)`` of a rule's algorithm in the plugin's names (None: NCCL has none).

    etsim's ``ring`` and ``tree`` are NCCL's with the Simple protocol; ``nccl:Ring/LL128/8`` is what it forces
    (``-1``, "NCCL decides", for what it leaves open). The ``nccl`` algorithm itself (NCCL's own choice) has no
    line.
    """
    if spec in NCCL_ALGORITHMS:
        return NCCL_ALGORITHMS[spec], "simple", "-1"
    if not spec.startswith("nccl:"):
        return None, "", ""
    parts = spec.partition(":")[2].split("/")
    names = {k.lower(): v for k, v in _PLUGIN_NAMES.items()}
    algorithm = names.get(parts[0].lower())
    if algorithm is None or "," in parts[0] or parts[0].startswith("^"):
        return None, "", ""
    protocol = names.get(parts[1].lower(), "-1") if len(parts) > 1 else "-1"
    channels = parts[2] if len(parts) > 2 else "-1"
    return algorithm, protocol, channels


def _buffer(collective: str, size: int, n: int) -> int:
    """NCCL's nBytes for a call of comm_size *size* over *n* ranks (an all-gather's is its output)."""
    return int(collective_buffer_bytes(collective, size, n))


def nccl_tuner_csv(rules: Sequence[SelectionRule], header: Sequence[str] = ()) -> tuple[str, list[str]]:
    """The NCCL tuner-plugin CSV of *rules* and the notes on what was skipped or broadened.

    Rules whose algorithm or collective NCCL does not have, default rules (NCCL keeps its own choice for
    calls no line matches) and group-size ranges (not a key of the CSV) are skipped with a note; a
    ``pg_name`` or ``dimension`` key, which NCCL cannot express, is dropped with a note.
    """
    lines = [f"# {h}" for h in header]
    lines.append("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks")
    notes: list[str] = []
    open_channels = False
    for rule in rules:
        what = f"{rule.origin} {rule.describe()}"
        if rule.is_default:
            notes.append(f"{what}: not exported (a default rule; NCCL keeps its own choice where no line matches)")
            continue
        collective = NCCL_COLLECTIVES.get(rule.collective or "")
        if collective is None:
            notes.append(f"{what}: skipped (NCCL's tuner has no {rule.collective or 'any-collective'} rules)")
            continue
        algorithm, protocol, channels = _nccl_choice(rule.algorithm)
        if algorithm is None:
            notes.append(
                f"{what}: skipped (NCCL has no algorithm {rule.algorithm!r}; it has ring and tree, and the "
                "nccl algorithm's forced choices nccl:ALGO[/PROTO[/CHANNELS]])"
            )
            continue
        if protocol == "-1":  # the plugin would read it as simple: not the protocol NCCL chose in the tuned run
            notes.append(
                f"{what}: skipped (a line forces a protocol, and NCCL's example plugin reads an open one as simple; "
                f"tune {rule.algorithm}/LL, /LL128 and /Simple as candidates)"
            )
            continue
        if channels == "-1" and not open_channels:
            open_channels = True
            notes.append(
                "channels -1: NCCL's README keeps its own count; its example plugin (2.28-2.29 plugin.c) runs 1 "
                "channel for it: tune nccl:ALGO/PROTO/N candidates to pin the count"
            )
        sizes: list[int | None]
        if rule.group_sizes is None:
            sizes = [None]
        elif all(lo == hi for lo, hi in rule.group_sizes):
            sizes = [lo for lo, _ in rule.group_sizes]
        else:
            notes.append(f"{what}: skipped (a group-size range; the CSV matches one nRanks per line)")
            continue
        if rule.collective == "all_gather" and None in sizes and (rule.min_bytes or rule.max_bytes is not None):
            notes.append(f"{what}: skipped (an all-gather's NCCL size needs the group size, and the rule has none)")
            continue
        for key in ("pg_name", "dimension"):
            if getattr(rule, "pg_names" if key == "pg_name" else key) is not None:
                notes.append(f"{what}: {key} is not a key of NCCL's tuner; the line matches every communicator size")
        assert rule.collective is not None
        for n in sizes:
            low = _buffer(rule.collective, rule.min_bytes or 0, n or 1)
            high = SIZE_MAX if rule.max_bytes is None else _buffer(rule.collective, rule.max_bytes, n or 1)
            lines.append(f"{collective},{low},{high},{algorithm},{protocol},{channels},-1,{-1 if n is None else n}")
    return "\n".join(lines) + "\n", notes


_ALGO_TAG = re.compile(rb"<algo\b[^>]*>", re.S)


def _set_attribute(tag: bytes, name: str, value: str) -> bytes:
    attr = re.compile(rb"(\s" + name.encode() + rb'\s*=\s*)(["\'])(.*?)\2', re.S)
    if attr.search(tag):
        return attr.sub(lambda m: m.group(1) + m.group(2) + value.encode() + m.group(2), tag, count=1)
    end = -2 if tag.endswith(b"/>") else -1
    return tag[:end] + f' {name}="{value}"'.encode() + tag[end:]


def msccl_files(
    rules: Sequence[SelectionRule], out_dir: str | os.PathLike[str], base_dir: str = "."
) -> tuple[list[Path], list[str]]:
    """Write a copy of each MSCCL-IR file a rule chose, its ``minBytes``/``maxBytes`` set from the rule.

    Files are named ``STEM.rI.xml`` (I: the rule's index). Returns the paths and notes.

    Raises:
        ConfigError: an XML cannot be read or has no ``<algo>`` element (named).
    """
    out = Path(out_dir)
    paths: list[Path] = []
    notes: list[str] = []
    others = 0
    for i, rule in enumerate(rules):
        if not rule.algorithm.endswith(".xml"):
            others += 1
            continue
        src = Path(rule.algorithm if os.path.isabs(rule.algorithm) else os.path.join(base_dir, rule.algorithm))
        data = read_text(src, "MSCCL-IR file").encode()  # a missing or unreadable file is one error line naming it
        try:
            root = etree.fromstring(data)
        except etree.XMLSyntaxError as exc:
            raise ConfigError(f"{src}: not valid XML: {exc}") from None
        if root.tag != "algo":
            raise ConfigError(f"{src}: the root element is <{root.tag}>, not <algo>")
        ngpus = int(root.get("ngpus", "0") or 0)
        collective = rule.collective or ""
        n = ngpus or 1
        low = _buffer(collective, rule.min_bytes or 0, n)
        high = 0 if rule.max_bytes is None else _buffer(collective, rule.max_bytes, n)
        m = _ALGO_TAG.search(data)
        assert m is not None
        tag = _set_attribute(_set_attribute(m.group(0), "minBytes", str(low)), "maxBytes", str(high))
        text = data[: m.start()] + tag + data[m.end() :]
        check = etree.fromstring(text)
        assert check.get("minBytes") == str(low) and check.get("maxBytes") == str(high)
        path = out / f"{src.stem}.r{i}.xml"
        write_bytes(path, text)
        paths.append(path)
    if others:
        notes.append(f"{others} rule(s) chose no MSCCL-IR file and have nothing to export as MSCCL-IR")
    return paths, notes
