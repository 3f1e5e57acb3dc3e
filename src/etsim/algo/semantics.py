"""What each collective means: its buffers, its end state, and the bytes any algorithm for it must move.

:data:`LAYOUTS` is the single definition of every collective that :mod:`etsim.algo.verify` checks against
(the table is in that module's docstring); :func:`minimum_bytes` gives the lower bounds on traffic that follow
from where the data starts. Buffers are :func:`~etsim.chakra.graph.collective_buffer_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from etsim.chakra.graph import CollectiveType, algorithm_collective

__all__ = ["LAYOUTS", "CollectiveLayout", "minimum_bytes"]

C = CollectiveType


@dataclass(frozen=True)
class CollectiveLayout:
    """A collective's buffers and end state (one row of the module table).

    Attributes:
        piece_input: the input holds ``k = T/n`` chunks (else ``T``).
        piece_output: the output holds ``k`` chunks (else ``T``).
        alias: in place, ``same`` (input chunk j is output chunk j), ``input_in_output`` (input is
            output chunks ``r·k …``) or ``output_in_input`` (output is input chunks ``r·k …``).
        root_only: only the root's output is defined.
        expect: ``(r, x, k) -> (input chunk, origin rank or None for the sum over all ranks)``.
    """

    piece_input: bool
    piece_output: bool
    alias: str
    root_only: bool
    expect: Callable[[int, int, int], tuple[int, int | None]]

    @property
    def needs_pieces(self) -> bool:
        """The layout splits the buffer into one piece per rank (T must be a multiple of n)."""
        return self.piece_input or self.piece_output or self.alias != "same" or self.expect is _all_to_all


def _all_reduce(r: int, x: int, k: int) -> tuple[int, int | None]:
    return x, None


def _broadcast(r: int, x: int, k: int) -> tuple[int, int | None]:
    return x, 0


def _gather(r: int, x: int, k: int) -> tuple[int, int | None]:
    return x % k, x // k


def _reduce_scatter(r: int, x: int, k: int) -> tuple[int, int | None]:
    return r * k + x, None


def _scatter(r: int, x: int, k: int) -> tuple[int, int | None]:
    return r * k + x, 0


def _all_to_all(r: int, x: int, k: int) -> tuple[int, int | None]:
    return r * k + x % k, x // k


#: The definition of every collective the verifier checks (barrier is checked without data).
LAYOUTS: dict[CollectiveType, CollectiveLayout] = {
    C.ALL_REDUCE: CollectiveLayout(False, False, "same", False, _all_reduce),
    C.REDUCE: CollectiveLayout(False, False, "same", True, _all_reduce),
    C.BROADCAST: CollectiveLayout(False, False, "same", False, _broadcast),
    C.ALL_GATHER: CollectiveLayout(True, False, "input_in_output", False, _gather),
    C.GATHER: CollectiveLayout(True, False, "input_in_output", True, _gather),
    C.REDUCE_SCATTER: CollectiveLayout(False, True, "output_in_input", False, _reduce_scatter),
    C.REDUCE_SCATTER_BLOCK: CollectiveLayout(False, True, "output_in_input", False, _reduce_scatter),
    C.SCATTER: CollectiveLayout(False, True, "output_in_input", False, _scatter),
    C.ALL_TO_ALL: CollectiveLayout(False, False, "same", False, _all_to_all),
}


def minimum_bytes(collective: CollectiveType, n: int, buffer: float, *, in_network: bool = False) -> dict[str, float]:
    """Bytes any correct algorithm must move, for a collective buffer of *buffer* bytes over *n* ranks.

    *buffer* is :func:`~etsim.chakra.graph.collective_buffer_bytes` (the all-gather output, the
    reduce-scatter input, …). Returns ``sent_per_rank`` (every rank, or the root / every non-root
    as noted), ``received_per_rank`` and ``total`` (sum over ranks). The bounds follow from where the
    data starts (a chunk can leave its rank only in a message that rank sends, and a reduction adds
    only chunks of the same index), in the chunk model the verifier uses:

    - all-gather, gather: every (receiving) rank needs the n−1 pieces of buffer/n it lacks
      (received ≥ (n−1)/n·buffer; total ≥ (n−1)·buffer, gather (n−1)/n·buffer); Chan et al.,
      *Collective communication: theory, practice, and experience* (2007), Table 1; an all-gather's every rank
      sends its own piece at least once (sent ≥ buffer/n).
    - reduce-scatter: every rank's contribution to the n−1 pieces other ranks own must leave it
      (sent ≥ (n−1)/n·buffer; total ≥ (n−1)·buffer), and the others' contributions to its own piece must reach
      it (received ≥ buffer/n, unless switches reduce).
    - all-to-all: every rank sends and receives n−1 pieces (≥ (n−1)/n·buffer each way).
    - all-reduce: every rank's contribution to every chunk must leave it and the others' must reach
      it (sent ≥ buffer and received ≥ buffer per rank); summed over ranks, every chunk must travel
      in at least 2(n−1) messages — a correct all-reduce schedule is a one-way gossip schedule,
      which needs 2n−2 calls (Harary and Schwenk, *The communication problem on graphs and
      digraphs*, 1974) — so total ≥ 2(n−1)·buffer, i.e. 2(n−1)/n·buffer per rank on average
      (Patarasuk and Yuan, *Bandwidth optimal all-reduce algorithms*, 2009).
    - broadcast: every non-root receives the buffer (total ≥ (n−1)·buffer); reduce: every non-root
      sends it (total ≥ (n−1)·buffer); scatter: the root sends (n−1)/n·buffer.

    With one rank every bound is 0. *in_network*: switches reduce (NVLink SHARP, SHARP), so an all-reduce needs
    only that every rank's contribution to the pieces it does not own leaves it and the others' reduced pieces
    reach it ((n−1)/n·buffer each way, total ≥ (n−1)·buffer); the other collectives' bounds do not depend on who
    reduces.
    """
    if n <= 1:
        return {"sent_per_rank": 0.0, "received_per_rank": 0.0, "total": 0.0}
    piece = buffer * (n - 1) / n
    c = algorithm_collective(collective)
    own = buffer / n  # (a rank's own piece must leave it: its shard, or the sums of its piece must reach it)
    table = {
        C.ALL_GATHER: (own, piece, (n - 1) * buffer),
        C.GATHER: (0.0, 0.0, piece),
        C.REDUCE_SCATTER: (piece, 0.0 if in_network else own, (n - 1) * buffer),
        C.SCATTER: (0.0, 0.0, piece),
        C.ALL_TO_ALL: (piece, piece, (n - 1) * buffer),
        C.ALL_REDUCE: (buffer, buffer, 2 * (n - 1) * buffer),
        C.BROADCAST: (0.0, 0.0, (n - 1) * buffer),
        C.REDUCE: (0.0, 0.0, (n - 1) * buffer),
    }
    if in_network:
        table[C.ALL_REDUCE] = (piece, piece, (n - 1) * buffer)
    sent, received, total = table.get(c, (0.0, 0.0, 0.0))
    return {"sent_per_rank": sent, "received_per_rank": received, "total": total}
