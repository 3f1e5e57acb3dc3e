"""Regenerate the shipped algorithm families in ``algorithms/`` (deterministic: same bytes every time).

Usage: ``python scripts/gen_algorithms.py [OUTDIR]`` (default: the repository's algorithms/).
Each family is a native algorithm exported exactly as ``etsim algo export`` does; the README in
algorithms/ lists them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from etsim.chakra import CollectiveType
from etsim.cli.algo import export_algorithm, make_algorithm

#: family prefix -> (algorithm, collective, group size)
FAMILIES: dict[str, tuple[str, CollectiveType, int]] = {
    # The 64-rank ring all-reduce the project's example command runs (--algo algorithms/ring.et).
    "ring": ("ring", CollectiveType.ALL_REDUCE, 64),
}
for _algo in ("ring", "direct", "halving_doubling", "tree"):
    for _npus in (8, 16, 64):
        FAMILIES[f"{_algo}_allreduce_{_npus}npus"] = (_algo, CollectiveType.ALL_REDUCE, _npus)


def generate(out: Path) -> dict[str, list[Path]]:
    """Write every family under *out*; return the paths written per family."""
    written = {}
    for prefix, (name, collective, npus) in FAMILIES.items():
        written[prefix] = export_algorithm(make_algorithm(name), collective, npus, out / prefix)
    return written


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "algorithms"
    for prefix, paths in generate(out).items():
        print(f"{prefix}: {len(paths)} ranks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
