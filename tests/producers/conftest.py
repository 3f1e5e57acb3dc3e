"""Shared by the MSCCL-IR tests: the corpus and the script that regenerates the shipped MSCCL-IR algorithms."""

from __future__ import annotations

import importlib.util
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
CORPUS = GEN.corpus_dir()
# The corpus is required (CI has ../shared beside the clone): a missing one fails these tests, never skips them.
assert CORPUS.is_dir(), f"the MSCCL-IR corpus is expected at {CORPUS} (../shared/corpus/msccl beside the repository)"
FILES = GEN.corpus_files(CORPUS)
assert FILES, f"no MSCCL-IR files found in {CORPUS}"
