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
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """``../shared/corpus`` (CI clones the repository with shared/ beside it)."""
    assert CORPUS.is_dir(), f"the shared corpus is expected at {CORPUS}"
    return CORPUS


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
