"""Shared fixtures: the corpus beside the repository and small in-code traces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Where the ecosystem corpus (real Chakra traces, MSCCL-IR files) is: $ETSIM_CORPUS, or ../shared/corpus.
CORPUS_ENV = "ETSIM_CORPUS"
#: Set to 1 (CI does, in ``.ci/run``) to make a missing corpus an error instead of a skip.
REQUIRE_ENV = "ETSIM_REQUIRE_CORPUS"
CORPUS = Path(os.environ.get(CORPUS_ENV) or REPO.parent / "shared" / "corpus")
CORPUS_FOUND = CORPUS.is_dir()
CORPUS_REQUIRED = os.environ.get(REQUIRE_ENV, "") not in ("", "0")
_MISSING = f"the ecosystem corpus is not at {CORPUS} (put ../shared beside the clone, or set {CORPUS_ENV})"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "corpus: reads the ecosystem corpus (skipped without it, an error under CI)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``corpus`` run where the corpus is found; elsewhere they skip, or fail when it is required."""
    if item.get_closest_marker("corpus") is not None:
        require_corpus()


def require_corpus() -> Path:
    """The corpus directory; a skip naming why when it is missing, a failure when CI requires it."""
    if not CORPUS_FOUND:
        if CORPUS_REQUIRED:
            pytest.fail(f"{_MISSING}; {REQUIRE_ENV} is set, so the corpus tests must run", pytrace=False)
        pytest.skip(_MISSING)
    return CORPUS


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The ecosystem corpus (:data:`CORPUS`); tests using it skip without it (fail when it is required)."""
    return require_corpus()


@pytest.fixture
def plugins_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plug-ins named by files import during the test, as under ``--allow-plugins``."""
    from etsim.registry import PLUGINS_ENV

    monkeypatch.setenv(PLUGINS_ENV, "1")


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository root."""
    return REPO


def _signal_command(
    args: Sequence[str], sig: int, wait: float | Callable[[], bool], *, group: bool = False
) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "etsim", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if callable(wait):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not wait():
            time.sleep(0.01)
    else:
        time.sleep(wait)
    (os.killpg if group else os.kill)(proc.pid, sig)
    try:
        # Returns once every process holding stderr is gone: the command's workers too.
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"etsim {' '.join(args)}: processes still running 30 s after signal {sig}: {err.decode()!r}")
    return proc.returncode, err.decode()


@pytest.fixture
def signal_command() -> Callable[..., tuple[int, str]]:
    """signal_command(args, sig, wait, *, group=False) -> (exit status, stderr) of ``etsim ARGS``.

    The command starts in a session of its own; after *wait* (seconds, or a test polled until true) it gets
    *sig*: the whole process group's, as a terminal's Ctrl-C or ``kill -- -PGID`` sends it, with *group*;
    otherwise its main process's. The test fails if anything of it still runs 30 s later.
    """
    return _signal_command
