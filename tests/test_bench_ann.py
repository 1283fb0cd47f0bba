"""``adaptemb bench --scale N --ann``: the approximate indexes' recall / QPS points and the recommendation."""

from __future__ import annotations

import numpy as np
import pytest
from ann_support import data, fitted
from typer.testing import CliRunner

from adaptemb.cli import app
from adaptemb.evaluate.ann_curves import faiss_curves, method_curve, recommend_ann, recommendation_lines


def _point(series: str, recall: float, qps: float, size: float) -> dict:
    return {"series": series, "k": None, "setting": "nprobe=1", "recall_at_10": recall, "qps": qps,
            "bytes_per_vector": size}


def test_the_recommendation_is_the_fastest_point_within_the_bytes_that_reaches_the_recall() -> None:
    points = [_point("a", 0.96, 100.0, 20.0), _point("a", 0.91, 400.0, 20.0), _point("b", 0.97, 300.0, 40.0),
              _point("c", 0.99, 900.0, 1000.0)]
    entries = {(e["budget_bytes"], e["target_recall"]): e for e in recommend_ann(points, [16, 32, 64])}
    assert entries[(16.0, 0.9)]["best"] is None and entries[(16.0, 0.9)]["best_recall_within_bytes"] is None
    assert entries[(32.0, 0.9)]["best"]["qps"] == 400.0 and entries[(32.0, 0.95)]["best"]["qps"] == 100.0
    assert entries[(64.0, 0.95)]["best"]["series"] == "b"
    lines = recommendation_lines(recommend_ann([_point("a", 0.5, 10.0, 20.0)], [32]))
    assert lines == ["32 B, recall@10 >= 0.9: none reaches it (best within the bytes: 0.500)",
                     "32 B, recall@10 >= 0.95: none reaches it (best within the bytes: 0.500)"]


@pytest.mark.slow
def test_points_of_a_method_and_of_faiss_on_real_embeddings() -> None:
    compressor, codes = fitted("svd+binary")
    corpus, queries = data()
    flat = (queries[:200] @ corpus.T).argsort(axis=1)[:, ::-1][:, :10]
    own = compressor.index(codes).search(queries[:200], 10)[1]
    points = method_curve(compressor, None, codes, queries[:200], flat, own, rounds=1)
    assert [p["setting"] for p in points][:3] == ["nprobe=1", "nprobe=2", "nprobe=4"]
    assert points[-1]["setting"] == f"nprobe={points[-1]['cells']}" and points[-1]["recall_vs_exact_codes"] == 1.0
    assert points[-1]["recall_at_10"] == pytest.approx(float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(own, flat)])))
    assert 32 < points[0]["bytes_per_vector"] < 48  # 32 B codes, ids, offsets, centroids at 8,000 rows
    baseline, notes = faiss_curves(corpus, queries[:200], flat, ("ivf-rabitq", "hnsw"), rounds=1, seed=0)
    rabitq = [p for p in baseline if p["series"] == "faiss ivf-rabitq"]
    assert rabitq[0]["bytes_per_vector"] > 384 / 8 + 8 and baseline[-1]["bytes_per_vector"] == 4 * 384 + 256
    assert max(p["recall_at_10"] for p in baseline if p["series"] == "faiss hnsw") > 0.9
    assert len(notes) == 2 and "RaBitQ" in notes[0]


def test_ann_without_a_scale_study_is_one_clear_error() -> None:
    result = CliRunner().invoke(app, ["bench", "--ann", "--methods", "svd"])
    assert result.exit_code != 0 and "--ann sweeps approximate indexes in the scale study: give --scale N" in result.output
