"""The stamp of the files a configuration names (resumed sweeps and searches rerun what changed)."""

from __future__ import annotations

import os
from pathlib import Path

from etsim.stamp import input_stamp


def test_the_stamp_covers_files_families_and_plugins_and_changes_with_them(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text("kind: ring\n")
    for name in ("w.0.et", "w.1.et", "w.comm_groups.json", "model.py"):
        (tmp_path / name).write_text("x")
    values = {"topology": "topo.yaml", "workload": "w", "model": "model.py:Model", "algo": ["ring"], "n": 4}
    stamp = input_stamp(values, tmp_path)
    assert stamp and input_stamp({"algo": "ring", "size": "1 MiB"}, tmp_path) == ""
    # the same files however they are reached
    assert input_stamp({**values, "topology": str(tmp_path / "topo.yaml")}, tmp_path) == stamp
    for name in ("topo.yaml", "w.1.et", "w.comm_groups.json", "model.py"):
        path = tmp_path / name
        before = path.stat()
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
        changed = input_stamp(values, tmp_path)
        assert changed != stamp, name
        stamp = changed
