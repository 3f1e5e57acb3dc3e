"""The ecosystem corpus: its tests run where it is, skip with the reason in a plain clone, fail under CI's setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_the_corpus_holds_chakra_traces_and_msccl_ir(corpus: Path) -> None:
    assert any(corpus.rglob("*.xml")), f"no MSCCL-IR file under {corpus}"
    assert any(corpus.rglob("*.et")), f"no Chakra trace under {corpus}"


def _run_this_test(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """This module's corpus test, run by pytest in a child process with *env* (a missing corpus)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("ETSIM_CORPUS", "ETSIM_REQUIRE_CORPUS")}
    environ.update(env)
    test = f"{Path(__file__).relative_to(REPO)}::test_the_corpus_holds_chakra_traces_and_msccl_ir"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("required", [False, True])
def test_a_missing_corpus_skips_in_a_plain_clone_and_fails_under_ci(tmp_path: Path, required: bool) -> None:
    missing = tmp_path / "nowhere"
    env = {"ETSIM_CORPUS": str(missing)}
    if required:
        env["ETSIM_REQUIRE_CORPUS"] = "1"  # what .ci/run sets
    done = _run_this_test(tmp_path, **env)
    out = done.stdout + done.stderr
    assert f"the ecosystem corpus is not at {missing}" in out
    if required:
        assert done.returncode == 1 and "1 error" in out, out  # (the corpus fixture fails the test's setup)
    else:
        assert done.returncode == 0 and "1 skipped" in out, out
