"""Cluster files: placements, and bad files refused in one line that names the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from etsim.cli import main
from etsim.cluster import load_cluster
from etsim.cluster.placement import place
from etsim.errors import ConfigError
from etsim.network import load_network

#: Two nodes of four GPUs.
CLUSTER8 = {"kind": "gpu_cluster", "preset": "dgx-a100", "gpus": 16, "gpus_per_node": 4}


def _job(name: str, npus: int = 4, placement: Any = "packed", **more: Any) -> dict[str, Any]:
    workload = {"generate": "collective", "type": "all_reduce", "npus": npus, "size": "1 MiB"}
    return {"name": name, "workload": workload, "placement": placement, **more}


def _file(tmp_path: Path, **keys: Any) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"topology": CLUSTER8, **keys}, sort_keys=False))
    return path


def test_placements_packed_spread_random_and_lists() -> None:
    topo = load_network(CLUSTER8).topology  # 4 nodes of 4 GPUs
    packed, spread, listed = place(["packed", "spread", (15, 14)], [6, 4, 2], topo, "c.yaml")
    assert listed == (15, 14)  # lists first, as written
    assert packed == (0, 1, 2, 3, 4, 5)
    assert spread == (6, 7, 8, 12)  # the first free GPU of nodes 1, 2, 3, then the second of node 1
    drawn = place([("random", 7)], [5], topo, "c.yaml")[0]
    assert drawn == place([("random", 7)], [5], topo, "c.yaml")[0]  # seeded
    assert len(set(drawn)) == 5 and list(drawn) == sorted(drawn)
    assert drawn != place([("random", 8)], [5], topo, "c.yaml")[0]


def test_packed_takes_whole_free_nodes_for_a_job_of_a_node_or_more() -> None:
    """Beside a job on GPUs 0 and 1, a 4-GPU job took GPUs 2..5 (two nodes) where node 1 was free; a 2-GPU job
    still packs into the first node with room."""
    topo = load_network(CLUSTER8).topology  # 4 nodes of 4 GPUs
    _, four, two = place([(0, 1), "packed", "packed"], [2, 4, 2], topo, "c.yaml")
    assert four == (4, 5, 6, 7) and two == (2, 3)
    _, six = place([(0, 1), "packed"], [2, 6], topo, "c.yaml")
    assert six == (2, 3, 4, 5, 6, 7)  # (a whole node, then the lowest free GPUs)
    _, three = place([(0, 1), "packed"], [2, 3], topo, "c.yaml")
    assert three == (4, 5, 6)  # (the first node with room for it: node 0 has two GPUs left)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"jobs": [_job("a", placement=[0, 1, 2, 3]), _job("b", placement=[3, 4, 5, 6])]},
         r"c\.yaml: jobs\[1\]\.placement: GPU 3 is also jobs\[0\]'s"),
        ({"jobs": [_job("a", placement=[0, 1, 2, 99])]},
         r"jobs\[0\]\.placement: GPU 99 is not one of the cluster's GPUs 0\.\.15"),
        ({"jobs": [_job("a", placement=[0, 1])]}, r"jobs\[0\]\.placement: 2 GPUs for a job of 4 ranks"),
        ({"jobs": [_job("a", 8), _job("b", 16)]},
         r"jobs\[1\]\.placement: the job has 16 ranks but only 8 of the cluster's 16 GPUs are free"),
        ({"jobs": [_job("a")], "faults": [{"link": [0, 9]}]}, r"faults\[0\]\.link: .*0.*9"),
        ({"jobs": [_job("a")], "faults": [{"link": [0, 1], "at": "1 ms"}]},
         r"faults\[0\]\.link: link \[0, 1\]: gpu_cluster has no link from 0 to 1"),
        ({"jobs": [_job("a")], "faults": [{"link": [0, 1], "bandwidth": "150%"}]},
         r"faults\[0\]\.bandwidth: expected a share of the bandwidth from 0% \(failed\) to 100%"),
        ({"jobs": [_job("a")], "stragglers": [{"gpus": [16], "slowdown": 2}]},
         r"stragglers\[0\]\.gpus: GPU 16 is not one of 0\.\.15"),
        ({"jobs": [_job("a")], "stragglers": [{"gpus": [1], "slowdown": 2, "from": "2 ms", "until": "1 ms"}]},
         r"stragglers\[0\]\.until: until must come after start"),
        ({"jobs": [_job("a")], "stragglers": [{"gpus": [1], "slowdown": 0}]}, r"stragglers\[0\]\.slowdown: expected"),
        # (a GPU twice took its factor twice; an entry of neither changed nothing, in silence)
        ({"jobs": [_job("a")], "stragglers": [{"gpus": [0, 0], "slowdown": 2}]},
         r"stragglers\[0\]\.gpus: GPU 0 is listed twice"),
        ({"jobs": [_job("a")], "stragglers": [{"gpus": [1], "from": "1 ms"}]},
         r"stragglers\[0\]: neither slowdown nor delay"),
        ({"jobs": [_job("a")], "faults": [{"gpu": 1, "at": "1 ms", "bandwidth": "50%"}]},
         r"faults\[0\]\.bandwidth: a GPU fault"),
        ({"jobs": [_job("a")], "reliability": {"gpu_mtbf": "0 h", "checkpoint_every": "1 h"}},
         r"c\.yaml: reliability\.gpu_mtbf: a mean time between failures must be longer than 0"),
        ({"jobs": [_job("a")], "model": "link", "faults": [{"link": [0, 4], "at": "1 ms", "bandwidth": "50%"}]},
         r"c\.yaml: faults\[0\]\.at: network model 'link' does not model links changing during a run"),
        ({"jobs": [_job("a"), _job("a")]}, r"jobs\[1\]\.name: 'a' names two jobs"),
        ({"jobs": [_job("a")], "faults": [{"at": "1 ms"}]}, r"faults\[0\]: give a link: \[U, V\], a nic: G or a gpu"),
        ({"jobs": [_job("a")], "faults": [{"gpu": 3}]}, r"faults\[0\]\.at: a GPU that fails at 0 runs nothing"),
        ({"jobs": [_job("a")], "stragglers": [{"gpus": [1], "delay": "1 us", "until": "1 ms"}]},
         r"stragglers\[0\]\.delay: a delay holds for the whole run"),
        ({"jobs": [_job("a", system={"chunks": 2}), _job("b", system={"chunks": 4})]},
         r"jobs\[1\]\.system\.chunks: differs from jobs\[0\]'s"),
        ({"jobs": [_job("a", placement="tight")]}, r"jobs\[0\]\.placement: expected packed, spread, \{random: SEED\}"),
        ({"jobs": [{"name": "a"}]}, r"jobs\[0\]\.workload: missing"),
        ({"jobs": [_job("a")], "job": []}, r"c\.yaml: job: unknown key; valid keys: name, topology"),
    ],
)  # fmt: skip
def test_a_bad_cluster_file_is_one_line_naming_the_key(tmp_path, capsys, keys, message) -> None:
    path = _file(tmp_path, **keys)
    assert main(["cluster", "run", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("etsim: error: ") and err.count("\n") == 1, err
    import re

    assert re.search(message, err), err


def test_a_cluster_file_without_topology_or_jobs_is_refused(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: x\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: topology: missing"):
        load_cluster(path)
    path.write_text(yaml.safe_dump({"topology": CLUSTER8}))
    with pytest.raises(ConfigError, match=r"c\.yaml: jobs: missing"):
        load_cluster(path)
