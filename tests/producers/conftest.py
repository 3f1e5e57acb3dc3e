"""Shared by the MSCCL-IR tests: the corpus and the script that regenerates the shipped MSCCL-IR algorithms."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _gen_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_msccl_algorithms", REPO / "scripts" / "gen_msccl_algorithms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _gen_module()
# The MSCCL-IR part of the ecosystem corpus ($ETSIM_CORPUS, or ../shared/corpus). The modules reading it are marked
# `corpus`: without it they skip (a plain clone), or fail where it is required (CI: tests/conftest.py).
CORPUS = Path(os.environ["ETSIM_CORPUS"]) / "msccl" if os.environ.get("ETSIM_CORPUS") else GEN.corpus_dir()
FILES = GEN.corpus_files(CORPUS) if CORPUS.is_dir() else []
