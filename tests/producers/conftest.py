"""Shared by the MSCCL-IR tests: the corpus and the script that regenerates the shipped MSCCL-IR algorithms."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _gen_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_msccl_algorithms", REPO / "scripts" / "gen_msccl_algorithms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _gen_module()
CORPUS = GEN.corpus_dir()
FILES = GEN.corpus_files(CORPUS) if CORPUS.is_dir() else []
needs_corpus = pytest.mark.skipif(not FILES, reason=f"no MSCCL-IR corpus at {CORPUS}")
