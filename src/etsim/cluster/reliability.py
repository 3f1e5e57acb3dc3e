"""Goodput over a long run: failures at random (MTBF per component), checkpoints, restarts.

A cluster run measures one step of each job; training runs for days. This model takes each job's simulated step
time and plays a period (``hours``) out analytically, step by step never simulated again:

- the job fails at rate ``λ = Σ count_c / MTBF_c`` over its components (its GPUs, the nodes it uses, the links
  its traffic crossed); failures arrive as a Poisson process (exponential gaps), at any moment, during
  checkpoints and restarts too (Daly's model);
- it works ``checkpoint_every`` (τ) and then writes a checkpoint (``checkpoint_time``, δ); a failure loses the work
  since the last completed checkpoint (the segment being written too), then costs ``restart_time`` (R) before
  work resumes from that checkpoint;
- ``goodput`` is the useful (kept) work over the period; ``steps`` is that work over the step time.

Two answers, which a test holds together: a seeded draw of the period (``numpy.random.default_rng(seed)``: how many
failures this day had, what they cost), and the expectation in closed form (Daly 2006, exact for this model):
``wall time per unit of work = M·e^{R/M}·(e^{(τ+δ)/M} − 1)/τ`` with ``M = 1/λ``, so the expected goodput is its
inverse; with no failures it is ``τ/(τ+δ)``. Young's interval ``√(2δM)`` is reported as the checkpoint interval
that would lose the least.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from etsim.errors import ConfigError
from etsim.options import Integer, Number, Time, option

__all__ = ["MAX_EVENTS", "Reliability", "expected_goodput", "failure_rate", "play"]

_HOUR_NS = 3600e9
#: The most checkpoint intervals or failures one period may play (each costs a few microseconds).
MAX_EVENTS = 10_000_000


@dataclass(frozen=True, kw_only=True)
class Reliability:
    """The ``reliability:`` keys of a cluster file."""

    hours: float = option(24.0, "the period played out", Number(1e-6, 1e6))
    gpu_mtbf: float | None = option(None, "mean time between failures of one GPU (e.g. '50000 h')", Time())
    node_mtbf: float | None = option(None, "of one node (its host, NICs, power)", Time())
    link_mtbf: float | None = option(None, "of one link the job's traffic crosses", Time())
    checkpoint_every: float = option(help="work between two checkpoints (e.g. '30 min')", parse=Time())
    checkpoint_time: float = option(0.0, "time to write one checkpoint (the job pauses)", Time())
    restart_time: float = option(0.0, "after a failure: detection, rescheduling, reloading the checkpoint", Time())
    seed: int = option(0, "seed of the failures drawn", Integer(0))


def failure_rate(reliability: Reliability, gpus: int, nodes: int, links: int) -> float:
    """Failures per ns of a job on *gpus* GPUs in *nodes* nodes whose traffic crossed *links* links."""
    rate = 0.0
    for name, count in (("gpu", gpus), ("node", nodes), ("link", links)):
        mtbf = getattr(reliability, f"{name}_mtbf")
        if mtbf is not None:
            if mtbf <= 0:
                raise ConfigError(f"reliability.{name}_mtbf: a mean time between failures must be longer than 0")
            rate += count / mtbf
    return rate


def expected_goodput(rate: float, every: float, write: float, restart: float) -> float:
    """Daly's expectation: useful work over wall time, failures at *rate* per ns (see the module docstring)."""
    if rate == 0:
        return every / (every + write)
    mean = 1 / rate
    return every / (mean * math.exp(restart / mean) * math.expm1((every + write) / mean))


def play(reliability: Reliability, rate: float, step_ns: float, stream: int = 0) -> dict[str, Any]:
    """One seeded draw of the period for a job failing at *rate* per ns: what it kept, lost and spent.

    The draw is ``numpy.random.default_rng([seed, stream])`` (a cluster's job *i* plays stream *i*). Work not yet
    checkpointed when the period ends counts as lost.
    """
    import numpy as np

    rng = np.random.default_rng([reliability.seed, stream])
    horizon = reliability.hours * _HOUR_NS
    every, write, restart = reliability.checkpoint_every, reliability.checkpoint_time, reliability.restart_time
    if not every > 0:
        raise ConfigError("reliability.checkpoint_every: expected a time longer than 0")
    segments, failures_expected = horizon / (every + write), horizon * rate
    if max(segments, failures_expected) > MAX_EVENTS:
        raise ConfigError(
            f"reliability: {reliability.hours:g} h would play {segments:.3g} checkpoint intervals and "
            f"{failures_expected:.3g} failures, more than {MAX_EVENTS:,}: a shorter period or longer intervals"
        )
    now = kept = lost = restarting = writing = 0.0
    failures = 0
    next_failure = rng.exponential(1 / rate) if rate > 0 else math.inf
    while now < horizon:
        segment = min(every + write, horizon - now)  # work, then the checkpoint
        if next_failure >= now + segment:
            now += segment
            work = min(segment, every)
            if segment >= every + write:
                kept += work
                writing += write
            else:
                lost += segment  # the period ended before the checkpoint was written: not kept
            continue
        failures += 1
        lost += next_failure - now
        now = next_failure
        while True:  # the restart; a failure during it starts it again
            gap = rng.exponential(1 / rate)  # to the next failure, from the restart's start
            if gap >= restart or now + gap >= horizon:
                spent = min(restart, horizon - now)
                restarting += spent
                now += spent
                next_failure = now + (gap - restart)  # (exponential gaps are memoryless)
                break
            failures += 1
            restarting += gap
            now += gap
    return {
        "failures": failures,
        "goodput": kept / horizon,
        "expected_goodput": expected_goodput(rate, every, write, restart),
        "steps": int(kept // step_ns) if step_ns > 0 else 0,
        "kept_h": kept / _HOUR_NS,
        "lost_h": lost / _HOUR_NS,
        "checkpointing_h": writing / _HOUR_NS,
        "restarting_h": restarting / _HOUR_NS,
        "mtbf_h": (1 / rate) / _HOUR_NS if rate > 0 else None,
        "young_checkpoint_every_s": math.sqrt(2 * write / rate) / 1e9 if rate > 0 and write > 0 else None,
    }
