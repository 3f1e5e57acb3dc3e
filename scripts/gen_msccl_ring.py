"""Write MSCCLang's one-channel ring all-reduce and ring all-gather as MSCCL-IR XML for any GPU count.

    python scripts/gen_msccl_ring.py                 # algorithms/msccl_ring_{allreduce,allgather}_{16,64}npus.xml
    python scripts/gen_msccl_ring.py --check         # exit 1 if a shipped file differs from a fresh one

The experiments (``experiments/seed_fig4.yaml`` …) need 64-GPU ring programs; the shared corpus has
them for 8 GPUs only. This script writes the XML that MSCCLang's ring programs compile to, in the
exact dialect of the corpus: for 8 GPUs its all-reduce output is byte-identical to
``generated/allreduce_ring_n8_c1_i1_LL128.xml`` (``tests/experiment/test_shipped_experiments.py``
checks that when the corpus is present). Per GPU r of n, one thread block sends to r+1 and
receives from r-1 on channel 0:

- all-reduce (in place, n chunks): ``s`` chunk r; ``rrs`` chunks r-1 … r-n+2 (receive, reduce,
  send on); ``rrcs`` chunk r+1 (the fully reduced chunk, kept); ``rcs`` chunks r … r+3 (forward the
  reduced chunks); ``r`` chunk r+2. 2n-1 steps, 2(n-1) messages of one chunk each;
- all-gather (in place in the output buffer, n chunks): ``s`` chunk r; ``rcs`` chunks r-1 …
  r-n+2; ``r`` chunk r+1. n steps, n-1 messages.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIZES = (16, 64)
STEP = (
    '      <step s="{s}" type="{t}" srcbuf="{b}" srcoff="{o}" dstbuf="{b}" dstoff="{o}" cnt="1" '
    'depid="-1" deps="-1" hasdep="0"/>'
)


def _tb(r: int, n: int, steps: list[tuple[str, int]], buf: str) -> list[str]:
    lines = [f'    <tb id="0" send="{(r + 1) % n}" recv="{(r - 1) % n}" chan="0">']
    lines += [STEP.format(s=s, t=t, b=buf, o=o) for s, (t, o) in enumerate(steps)]
    lines.append("    </tb>")
    return lines


def allreduce_ring(n: int) -> str:
    """MSCCL-IR of MSCCLang's ring all-reduce on *n* GPUs (one channel, LL128, fused steps)."""
    lines = [
        f'<algo name="allreduce_ring_1channelsperring" proto="LL128" nchannels="1" nchunksperloop="{n}" '
        f'ngpus="{n}" coll="allreduce" inplace="1">'
    ]
    for r in range(n):
        steps = [("s", r)]
        steps += [("rrs", (r - s) % n) for s in range(1, n - 1)]
        steps.append(("rrcs", (r + 1) % n))
        steps += [("rcs", (r - k) % n) for k in range(n - 2)]
        steps.append(("r", (r - (n - 2)) % n))
        lines.append(f'  <gpu id="{r}" i_chunks="{n}" o_chunks="0" s_chunks="0">')
        lines += _tb(r, n, steps, "i")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def allgather_ring(n: int) -> str:
    """MSCCL-IR of MSCCLang's ring all-gather on *n* GPUs (one channel, in place in the output buffer)."""
    lines = [
        f'<algo name="allgather_ring_1channelsperring" proto="Simple" nchannels="1" nchunksperloop="{n}" '
        f'ngpus="{n}" coll="allgather" inplace="1">'
    ]
    for r in range(n):
        steps = [("s", r)]
        steps += [("rcs", (r - s) % n) for s in range(1, n - 1)]
        steps.append(("r", (r + 1) % n))
        lines.append(f'  <gpu id="{r}" i_chunks="0" o_chunks="{n}" s_chunks="0">')
        lines += _tb(r, n, steps, "o")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


def files() -> dict[str, str]:
    """Shipped file name → content."""
    out = {}
    for n in SIZES:
        out[f"msccl_ring_allreduce_{n}npus.xml"] = allreduce_ring(n)
        out[f"msccl_ring_allgather_{n}npus.xml"] = allgather_ring(n)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "algorithms"), help="directory (default: algorithms/)")
    parser.add_argument("--check", action="store_true", help="compare with the shipped files instead of writing")
    args = parser.parse_args()
    out = Path(args.out)
    stale = []
    for name, text in files().items():
        path = out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python scripts/gen_msccl_ring.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
