"""The trust model: a data file names plug-ins, but importing one (running its code) needs the user's say.

Every test plants an ``evil`` module that leaves a marker file when imported: the marker is the proof that code
ran. A refusal must leave no marker, exit 1 with one line naming the file and key and saying how to opt in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from etsim.chakra import CollectiveType, Workload, write_workload
from etsim.errors import RegistryError
from etsim.network import NETWORK_MODELS
from etsim.producers import collective_workload
from etsim.registry import PLUGINS_ENV, allowing_plugins, plugins_allowed

EVIL = """
import pathlib
pathlib.Path(__file__).with_name("ran").write_text("imported")
from etsim.network.models.link import LinkNetwork
class M(LinkNetwork):
    pass
"""

RING4 = "kind: ring\nnpus: 4\nbandwidth: 50 GB/s\nlatency: 500 ns\n"


def _etsim(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m etsim ARGS`` in *cwd* (``-m`` puts *cwd* on ``sys.path``: the attack on ``evil:M``)."""
    env = {k: v for k, v in os.environ.items() if k != PLUGINS_ENV}
    return subprocess.run(
        [sys.executable, "-m", "etsim", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A directory holding ``evil.py``, a 4-NPU all-reduce workload ``wl`` and ``ring4.yaml``."""
    (tmp_path / "evil.py").write_text(EVIL)
    write_workload(Workload(collective_workload(CollectiveType.ALL_REDUCE, 1 << 20, 4)), tmp_path / "wl")
    (tmp_path / "ring4.yaml").write_text(RING4)
    return tmp_path


def _refused(proc: subprocess.CompletedProcess[str], planted: Path, *where: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert not (planted / "ran").exists(), "the plug-in's code ran"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("etsim: error: "), proc.stderr
    assert "--allow-plugins" in lines[0] and "Traceback" not in proc.stderr
    for text in where:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("model", ["evil.py:M", "evil:M"])
def test_a_topology_file_cannot_import_its_model(planted: Path, model: str) -> None:
    (planted / "net.yaml").write_text(RING4 + f"network: {{model: {model!r}}}\n")
    _refused(_etsim(planted, "run", "wl", "--topology", "net.yaml"), planted, "net.yaml", "network.model")
    allowed = _etsim(planted, "run", "wl", "--topology", "net.yaml", "--allow-plugins")
    assert allowed.returncode == 0, allowed.stderr
    assert (planted / "ran").exists()


def test_a_system_file_cannot_import_an_algorithm(planted: Path) -> None:
    (planted / "sys.yaml").write_text("algorithms: {default: 'evil.py:M'}\n")
    _refused(_etsim(planted, "run", "wl", "--topology", "ring4.yaml", "--system", "sys.yaml"), planted, "sys.yaml")


def test_a_topology_kind_cannot_be_imported(planted: Path) -> None:
    (planted / "net.yaml").write_text("kind: 'evil.py:M'\nnpus: 4\n")
    _refused(_etsim(planted, "run", "wl", "--topology", "net.yaml"), planted, "net.yaml")


def test_an_experiment_file_cannot_import_a_model_or_a_generator(planted: Path) -> None:
    (planted / "exp.yaml").write_text("workload: wl\ntopology: ring4.yaml\nmodel: evil.py:M\n")
    _refused(_etsim(planted, "experiment", "run", "exp.yaml", "--out", "out"), planted, "exp.yaml", "model")
    (planted / "exp3.yaml").write_text("workload: {generate: 'evil.py:M', npus: 4}\ntopology: ring4.yaml\n")
    _refused(_etsim(planted, "experiment", "run", "exp3.yaml", "--out", "out3"), planted, "exp3.yaml")


def test_an_optimise_job_cannot_import_its_model(planted: Path) -> None:
    (planted / "job.yaml").write_text("workload: wl\ntopology: ring4.yaml\nmodel: evil.py:M\n")
    _refused(_etsim(planted, "optimise", "job.yaml", "-o", "out"), planted, "job.yaml")


def test_a_plugin_named_on_the_command_line_is_the_users_choice(planted: Path) -> None:
    proc = _etsim(planted, "run", "wl", "--topology", "ring4.yaml", "--model", "evil.py:M")
    assert proc.returncode == 0, proc.stderr
    assert (planted / "ran").exists()


def test_the_python_api_needs_the_same_say(planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    name = f"{planted / 'evil.py'}:M"
    with pytest.raises(RegistryError, match="is a plug-in: importing it runs its code"):
        NETWORK_MODELS.get(name)
    assert not (planted / "ran").exists()
    with allowing_plugins([name]):
        assert plugins_allowed(name) and not plugins_allowed("other:M")
        assert NETWORK_MODELS.get(name).__name__ == "M"
    assert (planted / "ran").exists()
    assert PLUGINS_ENV not in os.environ  # restored
    # etsim's own modules are installed code, not a file's: they need no say.
    assert plugins_allowed("etsim.network.models.link:LinkNetwork")


def test_allowing_one_plugin_by_a_string_allows_it_and_a_bad_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A string was taken letter by letter, so nothing was allowed, and the refusal then told the caller to use
    # allowing_plugins; a name without a colon was dropped in silence.
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    with allowing_plugins("my_models.fast:Model"):
        assert plugins_allowed("my_models.fast:Model")
    for bad in ("my_models.fast.Model", 5, ["a:b;c:d"]):
        with pytest.raises(RegistryError, match=r"allowing_plugins: .* is not a plug-in name"), allowing_plugins(bad):  # type: ignore[arg-type]
            pass
    assert PLUGINS_ENV not in os.environ
