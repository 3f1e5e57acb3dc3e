"""Shared fixtures: the corpus beside the repository and small in-code traces."""

from __future__ import annotations

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
