"""The files a point reads, stamped by size and modification time.

A resumed sweep (``experiment run --resume``) or search (``optimise``) keeps a finished result only while its
configuration *and* the files it names are unchanged: a topology edited in place, or a workload regenerated at the
same path, runs again instead of leaving the old numbers beside files that no longer give them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

__all__ = ["input_stamp"]


def input_stamp(values: Any, base: str | os.PathLike[str] | None = None) -> str:
    """A stamp of every file *values* names (strings in nested mappings and lists; relative ones from *base*).

    A string names a file if it is one, a workload family if ``NAME.0.et`` sits beside it (every ``NAME.*`` file
    counts), or a plug-in module if it is ``FILE:Class``. The stamp is empty when nothing names a file.
    """
    root = Path(base) if base is not None else Path.cwd()
    entries: set[str] = set()
    _visit(values, root, entries)
    if not entries:
        return ""
    return hashlib.sha1("\n".join(sorted(entries)).encode()).hexdigest()[:16]


def _visit(value: Any, root: Path, entries: set[str]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _visit(item, root, entries)
    elif isinstance(value, list | tuple):
        for item in value:
            _visit(item, root, entries)
    elif isinstance(value, str) and 0 < len(value) < 4096 and "\n" not in value:
        for path in _files(root / value):
            try:
                st = path.stat()
            except OSError:
                continue
            entries.add(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}")  # (one file however it is reached)


def _files(path: Path) -> list[Path]:
    try:
        if path.is_file():
            return [path]
        head, sep, _ = str(path).rpartition(":")
        if sep and Path(head).is_file():  # module.py:Class
            return [Path(head)]
        if path.name and Path(f"{path}.0.et").is_file():  # a family: its traces, groups file and the rest
            return sorted(path.parent.glob(f"{_escaped(path.name)}.*"))
    except (OSError, ValueError):
        pass
    return []


def _escaped(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)
