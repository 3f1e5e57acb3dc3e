"""Tuning: pick the fastest algorithm per collective call on the simulated system, and export the choice.

Modules: :mod:`~etsim.tuning.points` (what one measurement runs), :mod:`~etsim.tuning.runner` (the one
function that runs measurements, in parallel), :mod:`~etsim.tuning.table` (winners, merged rules, the
system YAML, CSV and plot), :mod:`~etsim.tuning.export` (NCCL tuner-plugin CSV, MSCCL-IR windows),
:mod:`~etsim.tuning.tune` (the whole ``etsim tune`` run). ``docs/tuning.md`` describes the method and formats.
"""

from etsim.tuning.export import msccl_files, nccl_tuner_csv
from etsim.tuning.points import Point, WorkloadPoint, point_workload
from etsim.tuning.runner import Measurement, Setup, run_points
from etsim.tuning.table import TunedPoint, csv_text, plot, table_rules, table_yaml, winners
from etsim.tuning.tune import TuneRequest, TuneResult, compare_workload, expand_candidates, parse_sizes, tune

__all__ = [
    "Measurement",
    "Point",
    "Setup",
    "TuneRequest",
    "TuneResult",
    "TunedPoint",
    "WorkloadPoint",
    "compare_workload",
    "csv_text",
    "expand_candidates",
    "msccl_files",
    "nccl_tuner_csv",
    "parse_sizes",
    "plot",
    "point_workload",
    "run_points",
    "table_rules",
    "table_yaml",
    "tune",
    "winners",
]
