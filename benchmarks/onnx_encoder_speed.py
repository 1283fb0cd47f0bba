"""Texts per second of an exported ONNX encoder (MiniLM + compressor) under onnxruntime against the torch pipeline.

Usage::

    HF_HUB_OFFLINE=1 python benchmarks/onnx_encoder_speed.py [--method csr] [--k 32] [--corpus 2000] [--queries 400]
                                                             [--threads 1] [--batch-size 32] [--out benchmarks/results]

Texts: a seeded sample of WordNet definitions (the corpus) and example sentences (the queries, each with its
definition as the one relevant row): the ``wordnet-examples`` task the built-in default dataset is cut from
(Debian's ``wordnet-base``). The compressor is fitted on the built-in default dataset's 8,000 MiniLM
embeddings, then exported with the bundled all-MiniLM-L6-v2 twice: float32 and ``quantize="dynamic"``
(both with ``include_embedding`` so queries can be scored by the method's own search).

Three pipelines encode the same texts in the same length-sorted batches: ``torch`` (``TextEncoder.encode``
then ``compressor.encode``), ``onnx-fp32`` and ``onnx-int8`` (tokenised with the exported ``tokenizer.json``,
run by onnxruntime on the CPU). Each record holds texts/s (tokenisation included), the ONNX file sizes,
the code agreement of each ONNX pipeline with torch (``adaptemb.compare_codes``), NDCG@10 of the
method's search with each pipeline's documents and queries, NDCG@10 of the float embeddings, and the machine
with its load average before and after. With CUDA present the torch pipeline also runs on the GPU (and
onnxruntime with its CUDA provider when installed). Results are appended to ``<out>/onnx_encoder_speed.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

import adaptemb
from adaptemb import Codes, compare_codes
from adaptemb.datasets.builtin import load_builtin
from adaptemb.datasets.wordnet import corpus_synsets, example_queries, read_wordnet
from adaptemb.encoders import load_text_encoder
from adaptemb.evaluate.machine import machine_info
from adaptemb.evaluate.metrics import ndcg_at_k

sys.path.insert(0, str(Path(__file__).parent))
from records import append_record  # sibling benchmark modules (benchmarks/ is on sys.path)

PARAMS = {"csr": {"progress": False}, "bsa": {"progress": False}, "mrl": {}, "svd": {}, "int8": {}, "binary": {}}


def wordnet_texts(corpus: int, queries: int) -> tuple[list[str], list[str], sp.csr_matrix]:
    synsets = corpus_synsets(read_wordnet(), limit=corpus, seed=0)
    query_texts, gold = example_queries(synsets, queries, seed=0)
    qrels = sp.csr_matrix((np.ones(len(gold), np.float32), (np.arange(len(gold)), gold)), shape=(len(gold), len(synsets)))
    return [s.definition for s in synsets], query_texts, qrels


def batches(texts: list[str], batch_size: int) -> list[np.ndarray]:
    order = np.argsort([len(text) for text in texts], kind="stable")  # as TextEncoder.encode batches
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def run_onnx(session: Any, tokenizer: Any, texts: list[str], batch_size: int) -> dict[str, np.ndarray]:
    names = [output.name for output in session.get_outputs()]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    order = []
    for rows in batches(texts, batch_size):
        encoded = tokenizer.encode_batch([texts[i] for i in rows])
        feeds = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
        }
        for name, value in zip(names, session.run(names, feeds)):
            parts[name].append(value)
        order.append(rows)
    inverse = np.argsort(np.concatenate(order))
    return {name: np.concatenate(values)[inverse] for name, values in parts.items()}


def gpu_speed(texts: list[str], compressor: Any, k: int | None, batch_size: int, model: Path,
              tokenizer: Any) -> dict[str, Any]:
    """texts/s of the torch pipeline on CUDA, and of the float graph under onnxruntime's CUDA provider."""
    import onnxruntime

    gpu = load_text_encoder(device="cuda")
    gpu.encode(texts[:64], batch_size=batch_size, progress=False)
    _, seconds = timed(lambda: compressor.encode(gpu.encode(texts, batch_size=batch_size, progress=False), k=k))
    found: dict[str, Any] = {"torch_cuda_texts_per_s": round(len(texts) / seconds, 1)}
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        found["onnx-fp32_cuda_texts_per_s"] = None  # onnxruntime without its CUDA provider (pip onnxruntime-gpu)
        return found
    session = onnxruntime.InferenceSession(str(model), providers=["CUDAExecutionProvider"])
    run_onnx(session, tokenizer, texts[:64], batch_size)
    _, seconds = timed(lambda: run_onnx(session, tokenizer, texts, batch_size))
    found["onnx-fp32_cuda_texts_per_s"] = round(len(texts) / seconds, 1)
    return found


def timed(run: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="csr", choices=sorted(PARAMS))
    parser.add_argument("--k", type=int, default=32, help="Budget (ignored by int8 / binary).")
    parser.add_argument("--corpus", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    return parser.parse_args()


def export_both(encoder: Any, compressor: Any, k: int | None, folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    """The float32 and the dynamically quantised export into ``folder``, what each took and gave in ``record``."""
    exports = {}
    for name, quantize in (("onnx-fp32", None), ("onnx-int8", "dynamic")):
        (folder / name).mkdir()
        result, seconds = timed(lambda q=quantize, f=folder / name: adaptemb.export_encoder(
            encoder, compressor, f / "encoder.onnx", k=k, quantize=q, include_embedding=True))
        exports[name] = result
        record[f"{name}_export_seconds"] = round(seconds, 1)
        record[f"{name}_bytes"] = result.size_bytes
        record[f"{name}_export_parity"] = str(result.parity)
    record["tokenizer_json_bytes"] = (folder / "onnx-fp32" / "tokenizer.json").stat().st_size
    quantization = exports["onnx-int8"].quantization
    record["quantize_options"] = quantization.options if quantization else None
    record["export_sample_quantized_speedup"] = round(quantization.speedup, 3) if quantization else None
    return exports


def run_pipelines(args: argparse.Namespace, texts: list[str], encoder: Any, compressor: Any, k: int | None,
                  exports: dict[str, Any], folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    """(embeddings, codes, seconds) of the torch pipeline and of each exported graph on ``texts``; each graph's
    agreement with torch in ``record``."""
    import onnxruntime
    from tokenizers import Tokenizer

    def torch_pipeline() -> tuple[np.ndarray, Codes]:
        embedded = encoder.encode(texts, batch_size=args.batch_size, progress=False)
        return embedded, compressor.encode(embedded, k=k)

    torch_pipeline()  # warm-up (first-call allocations)
    (embedded, torch_codes), seconds = timed(torch_pipeline)
    results = {"torch": (embedded, torch_codes, seconds)}
    head_outputs = tuple(compressor.encoder(compressor.budgets().resolve(k, args.method)).output_names)
    expected = torch_codes.onnx_arrays(head_outputs)
    tokenizer = Tokenizer.from_file(str(folder / "onnx-fp32" / "tokenizer.json"))
    for name, result in exports.items():
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = onnxruntime.InferenceSession(str(result.path), options, providers=["CPUExecutionProvider"])
        run_onnx(session, tokenizer, texts[:64], args.batch_size)  # warm-up
        out, seconds = timed(lambda s=session: run_onnx(s, tokenizer, texts, args.batch_size))
        parity = compare_codes(out, expected)
        record[f"{name}_agreement"] = round(parity.agreement, 5)
        record[f"{name}_max_abs_diff"] = parity.max_abs_diff
        record[f"{name}_embedding_max_abs_diff"] = float(np.abs(out["embedding"] - embedded).max())
        codes = torch_codes.from_onnx_arrays({output: out[output] for output in expected})
        results[name] = (out["embedding"], codes, seconds)
    if torch.cuda.is_available():
        record.update(gpu_speed(texts, compressor, k, args.batch_size, exports["onnx-fp32"].path, tokenizer))
    return results


def score_pipelines(results: dict[str, Any], compressor: Any, k: int | None, n_docs: int, qrels: sp.csr_matrix,
                    record: dict[str, Any]) -> None:
    """texts/s and NDCG@10 (the method's search, and the float embeddings') of each pipeline, and the speedups."""
    n_texts = len(next(iter(results.values()))[0])
    for name, (emb, codes, seconds) in results.items():
        record[f"{name}_texts_per_s"] = round(n_texts / seconds, 1)
        _, ids = compressor.search(emb[n_docs:], codes[:n_docs], top_k=10, k=k)
        record[f"{name}_ndcg10"] = round(float(ndcg_at_k(ids, qrels, 10).mean()), 4)
        float_ids = np.argsort(-(emb[n_docs:] @ emb[:n_docs].T), axis=1)[:, :10]
        record[f"{name}_float_ndcg10"] = round(float(ndcg_at_k(float_ids, qrels, 10).mean()), 4)
    for name in ("onnx-fp32", "onnx-int8"):
        record[f"{name}_speedup_vs_torch"] = round(record[f"{name}_texts_per_s"] / record["torch_texts_per_s"], 3)
    record["int8_speedup_vs_fp32"] = round(record["onnx-int8_texts_per_s"] / record["onnx-fp32_texts_per_s"], 3)


def main() -> None:
    args = arguments()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    adaptemb.set_threads(args.threads)
    torch.set_num_threads(args.threads)
    import onnxruntime

    before = machine_info()
    docs, queries, qrels = wordnet_texts(args.corpus, args.queries)
    texts = docs + queries
    fit_rows = load_builtin("default", progress=False).corpus.astype(np.float32)
    compressor = adaptemb.fit(fit_rows, args.method, **PARAMS[args.method])
    k = None if compressor.budgets().fixed else args.k
    encoder = load_text_encoder(device="cpu")

    record: dict[str, Any] = {
        "benchmark": "onnx_encoder_speed", "model": "all-MiniLM-L6-v2", "method": args.method, "k": k,
        "texts": len(texts), "corpus": len(docs), "queries": len(queries), "batch_size": args.batch_size,
        "threads": args.threads, "onnxruntime": onnxruntime.__version__,
    }
    with tempfile.TemporaryDirectory() as tmp:
        exports = export_both(encoder, compressor, k, Path(tmp), record)
        results = run_pipelines(args, texts, encoder, compressor, k, exports, Path(tmp), record)
    after = machine_info()  # right after the timed runs (searching below may resize torch's thread pool)
    score_pipelines(results, compressor, k, len(docs), qrels, record)
    record["load_average_before"], record["load_average_after"] = before["load_average"], after["load_average"]
    record["machine"] = after
    append_record(args.out / "onnx_encoder_speed.json", record)


if __name__ == "__main__":
    main()
