"""Results of simulations: per-rank times, collectives, network totals; tables and JSON."""

from etsim.report.result import CollectiveRecord, RankResult, Result

__all__ = ["CollectiveRecord", "RankResult", "Result"]
