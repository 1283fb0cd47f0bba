"""Codes in Milvus and Qdrant under the engines' own indexes: recall@10 and QPS of each index setting next to
adaptemb's exact index over the same codes (issue 45, "beyond one machine").

Usage::

    python benchmarks/engine_ann.py [--milvus-uri PATH.db | http://host:19530] [--qdrant-url FOLDER | http://host:6333]
                                    [--queries 200] [--out benchmarks/results/engine_ann_default.json]

Defaults: ``$ADAPTEMB_MILVUS_URI`` / ``$ADAPTEMB_QDRANT_URL`` when set, else a Milvus Lite file and a Qdrant local
folder in a temporary directory. On the built-in data (``load_dataset("default")``): csr fitted for 16 B and
svd+binary fitted for 32 B, every corpus row encoded at that budget (``encode(C, bytes=B)``), exported with
``adaptemb.export_codes(..., index=...)`` per engine index setting and searched with raw float queries through the
compressor (``search_milvus`` / ``search_qdrant(..., compressor=comp, k=...)``), one query per request as an
application sends them (Milvus: batches of 100); Qdrant's local mode, which scores every point in Python, gets
the first ``--local-qdrant-queries`` (20) only. Each row: recall@10 against adaptemb's exact index over the same
codes (``comp.index(codes).search``) and against the exact float top-10 (inner product of the embeddings), QPS (the
queries over the wall time of their searches), and export seconds. A setting the location cannot build (a server-only
index on Milvus Lite, a search parameter Lite refuses) is recorded as skipped with the reason. Local modes are marked ``local``: Qdrant's local
mode searches every point exactly whatever its HNSW settings, Milvus Lite scores sparse fields exactly, so their
numbers are no server's approximate index. The record holds the machine, the load before and after, and the engines'
versions.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import adaptemb
from adaptemb.datasets import Dataset, load_dataset
from adaptemb.evaluate.machine import machine_info

sys.path.insert(0, str(Path(__file__).parent))
from records import write_record

K = 10
SETTINGS: dict[str, dict[str, list[tuple[Any, dict[str, Any] | None]]]] = {
    "csr": {
        "milvus": [(None, None), ("SPARSE_INVERTED_INDEX", {"drop_ratio_search": 0.0}),
                   ("SPARSE_INVERTED_INDEX", {"drop_ratio_search": 0.2}), ("SPARSE_WAND", {"drop_ratio_search": 0.2})],
        "qdrant": [("SPARSE_INVERTED", None)],
    },
    "svd+binary": {
        "milvus": [(None, None), ("BIN_IVF_FLAT", {"nprobe": 8}), ("BIN_IVF_FLAT", {"nprobe": 32}),
                   ("HNSW", {"ef": 16}), ("HNSW", {"ef": 100}), ("IVF_FLAT", {"nprobe": 4}), ("IVF_FLAT", {"nprobe": 16})],
        "qdrant": [(None, None), ("HNSW", {"hnsw_ef": 16}), ("HNSW", {"hnsw_ef": 128}),
                   ("HNSW", {"hnsw_ef": 128, "oversampling": 8.0})],
    },
}
"""Per method and engine: (index type for ``export_codes(index=...)``, None: the export's default; search params)."""
BUDGETS = {"svd+binary": 32, "csr": 16}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--milvus-uri", default=os.environ.get("ADAPTEMB_MILVUS_URI"),
                        help="Milvus server URI or Milvus Lite .db file (default: $ADAPTEMB_MILVUS_URI, else a Lite file)")
    parser.add_argument("--qdrant-url", default=os.environ.get("ADAPTEMB_QDRANT_URL"),
                        help="Qdrant server URL or local folder (default: $ADAPTEMB_QDRANT_URL, else a local folder)")
    parser.add_argument("--queries", type=int, default=200, help="queries searched (the first N of the data's)")
    parser.add_argument("--local-qdrant-queries", type=int, default=20,
                        help="queries searched in Qdrant's local mode (it scores every point in Python: slow)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "engine_ann_default.json")
    return parser.parse_args()


def is_server(location: str) -> bool:
    return location.startswith(("http://", "https://", "tcp://"))


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a[a >= 0]) & set(b)) / K for a, b in zip(found, truth, strict=True)]))


def fitted(method: str, data: Dataset) -> tuple[adaptemb.Compressor, adaptemb.Codes, float]:
    start = time.perf_counter()
    if method == "csr":
        comp = adaptemb.fit(data.corpus, "csr", bytes=[BUDGETS[method]], progress=False)
    else:
        comp = adaptemb.fit(data.corpus, method, byte_budgets=[BUDGETS[method]])
    return comp, comp.encode(data.corpus, bytes=BUDGETS[method]), time.perf_counter() - start


def client_for(engine: str, location: str) -> Any:
    return adaptemb.milvus_client(location) if engine == "milvus" else adaptemb.qdrant_client(location)


def close(engine: str, client: Any, location: str) -> None:
    client.close()
    if engine == "milvus" and not is_server(location):
        adaptemb.release_milvus_lite(location)


def measure(engine: str, location: str, comp: adaptemb.Compressor, codes: adaptemb.Codes, queries: np.ndarray,
            k: int, setting: tuple[Any, dict[str, Any] | None], truths: dict[str, np.ndarray]) -> dict[str, Any]:
    """One engine index setting: export, search every query, recall against each truth and QPS."""
    index, params = setting
    row: dict[str, Any] = {"engine": engine, "index": index or "default", "search_params": params or {},
                           "local": not is_server(location)}
    collection = f"engine_ann_{(index or 'default').lower()}"
    client = client_for(engine, location)
    try:
        start = time.perf_counter()
        try:
            row["stored"] = adaptemb.export_codes(codes, to=engine, location=client, collection=collection, recreate=True,
                                                  index=index).vector
        except ValueError as error:  # an index this location does not build
            return {**row, "skipped": str(error)}
        row["export_s"] = round(time.perf_counter() - start, 2)
        search = adaptemb.search_milvus if engine == "milvus" else adaptemb.search_qdrant
        try:  # warm up (load, the score check); a search parameter this location refuses is recorded, not run
            search(client, collection, queries[:2], K, compressor=comp, k=k, search_params=params)
        except Exception as error:  # noqa: BLE001  the engine's own refusal, e.g. Milvus Lite's drop_ratio_search
            return {**row, "skipped": f"search refused: {str(error).splitlines()[0]}"}
        start = time.perf_counter()
        _, ids = search(client, collection, queries, K, compressor=comp, k=k, search_params=params)
        elapsed = time.perf_counter() - start
    finally:
        close(engine, client, location)
    row.update({f"recall@10_vs_{name}": round(recall(ids, truth), 4) for name, truth in truths.items()})
    row["qps"] = round(len(queries) / elapsed, 1)
    return row


def method_rows(method: str, data: Dataset, queries: np.ndarray, locations: dict[str, str],
                local_qdrant_queries: int) -> dict[str, Any]:
    comp, codes, fit_s = fitted(method, data)
    k = int(getattr(codes, "k", codes.dim))  # the budget the documents were encoded at
    float_truth = np.argsort(-(queries @ data.corpus.T), axis=1)[:, :K]
    exact = comp.index(codes)
    start = time.perf_counter()
    _, ours = exact.search(queries, K)
    ours_s = time.perf_counter() - start
    truths = {"exact_index": ours, "float": float_truth}
    rows = [{"engine": "adaptemb", "index": "exact (comp.index(codes), all queries in one batch)",
             "recall@10_vs_exact_index": 1.0, "recall@10_vs_float": round(recall(ours, float_truth), 4),
             "qps": round(len(queries) / ours_s, 1), "local": True}]
    for engine, location in locations.items():
        n = local_qdrant_queries if engine == "qdrant" and not is_server(location) else len(queries)
        for setting in SETTINGS[method][engine]:
            rows.append({**measure(engine, location, comp, codes, queries[:n], k, setting,
                                   {name: truth[:n] for name, truth in truths.items()}), "queries": n})
            print(method, rows[-1], flush=True)
    return {"method": method, "bytes": BUDGETS[method], "bytes_per_vector": codes.bytes_per_vector,
            "codes": type(codes).__name__, "fit_s": round(fit_s, 1), "rows": rows}


def versions(locations: dict[str, str]) -> dict[str, str]:
    found = {name: importlib.metadata.version(name) for name in ("pymilvus", "milvus-lite", "qdrant-client")}
    client = adaptemb.milvus_client(locations["milvus"])
    try:
        found["milvus_server"] = str(client.get_server_version())
    finally:
        close("milvus", client, locations["milvus"])
    return found


def main() -> None:
    args = parse_args()
    data = load_dataset("default")
    queries = np.ascontiguousarray(data.queries[: args.queries], dtype=np.float32)
    with tempfile.TemporaryDirectory() as scratch:
        locations = {"milvus": args.milvus_uri or str(Path(scratch) / "milvus.db"),
                     "qdrant": args.qdrant_url or str(Path(scratch) / "qdrant")}
        modes = {engine: "server" if is_server(where) else "local" for engine, where in locations.items()}
        load_before = list(os.getloadavg())
        engine_versions = versions(locations)
        results = [method_rows(method, data, queries, locations, args.local_qdrant_queries) for method in BUDGETS]
        record = {
            "benchmark": "engine_ann", "dataset": data.name, "docs": len(data.corpus), "queries": len(queries),
            "dim": data.dim, "modes": modes,
            "locations": {engine: where if modes[engine] == "server" else f"{modes[engine]} (temporary)"
                          for engine, where in locations.items()},
            "local_note": ("local mode numbers are no server's approximate index: Qdrant's local mode searches every "
                           "point exactly whatever its HNSW settings; Milvus Lite builds HNSW / IVF_FLAT with faiss but "
                           "scores sparse fields exactly and holds no BINARY_VECTOR (BIN_* skipped)"),
            "versions": engine_versions, "methods": results, "load_before": load_before,
            "load_after": list(os.getloadavg()), "machine": machine_info(),
        }
    write_record(args.out, record)


if __name__ == "__main__":
    main()
