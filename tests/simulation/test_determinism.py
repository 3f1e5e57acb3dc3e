"""Same inputs give byte-identical results, also across fresh processes (hash seeds, import order)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(args: list[str], hash_seed: str, cwd: Path) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-m", "etsim", *args, "--json", "-"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=True,
    ).stdout
    data = json.loads(out)
    data["sim"].pop("wall_s")  # the only wall-clock field
    return data


@pytest.mark.parametrize(
    "args",
    [
        ["workloads/dp_8npus_4layers", "--topology", "topologies/switch8.yaml", "--model", "link", "--chunks", "3"],
        ["workloads/allreduce_8npus_1MiB", "--algo", "algorithms/msccl_hier_allreduce_8npus", "--model", "link"],
    ],
    ids=["dp-link-chunks", "msccl-family"],
)
def test_two_fresh_processes_agree_byte_for_byte(repo: Path, args: list[str]) -> None:
    first = _run(args, "1", repo)
    second = _run(args, "12345", repo)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert first["finish_ns"] > 0 and first["links"]
