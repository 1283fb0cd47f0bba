"""The evaluator: metrics, the latency protocol, bench orchestration (and, in ``report``, its outputs).

``adaptemb.evaluate.report`` (table, JSON, CSV, plots, Markdown) is imported on its own, since it
loads matplotlib.
"""

from adaptemb.evaluate.latency import LatencyStats, time_rounds, time_search
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import (
    RankingMetrics,
    evaluate_ranking,
    mrr_at_k,
    ndcg_at_k,
    one_nn_accuracy,
    recall_at_k,
)
from adaptemb.evaluate.runner import BenchConfig, BenchResult, run_bench
from adaptemb.evaluate.scale import ScaleConfig, run_scale, scaled_corpus
from adaptemb.evaluate.steps import fits_by_method
from adaptemb.ranking import neighbour_recall_at_k

__all__ = [
    "BenchConfig",
    "BenchResult",
    "LatencyStats",
    "RankingMetrics",
    "ScaleConfig",
    "evaluate_ranking",
    "fits_by_method",
    "machine_info",
    "mrr_at_k",
    "ndcg_at_k",
    "neighbour_recall_at_k",
    "one_nn_accuracy",
    "recall_at_k",
    "run_bench",
    "run_scale",
    "scaled_corpus",
    "time_rounds",
    "time_search",
]
