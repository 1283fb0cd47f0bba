"""All-zero rows are data (issue 30): what the contract suite cannot say for every method.

Fits leave them out of methods that encode directions with their labels and the pairs that hold one, counted and
warned about once; encode gives them the empty code in memory, in streaming encode (local and Ray) and in the
exported graphs (``export_onnx`` and the storage head of ``export_encoder``). The per-method contract
(``adaptemb.testing.CompressorContract``, run over every registered method) holds the rest.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import adaptemb
from adaptemb.testing import assert_same_codes, clustered_embeddings, with_zero_rows

CSR = {"hidden": 64, "k": 4, "epochs": 2, "batch_size": 64, "k_aux": 16, "progress": False}
BSA = {"h": 64, "k": 8, "epochs": 2, "batch_size": 64, "progress": False}


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTEMB_NUM_THREADS", "1")  # fits compared bit for bit


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return clustered_embeddings(n=300)


def _fit(x: Any, method: str, **params: Any) -> tuple[adaptemb.Compressor, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = adaptemb.fit(x, method, **params)
    return fitted, [str(w.message) for w in caught if issubclass(w.category, adaptemb.ZeroRowsWarning)]


# -- the core mechanism ------------------------------------------------------------------------------


def test_unit_rows_and_has_direction_keep_zero_rows_zero() -> None:
    x = torch.tensor([[3.0, -4.0], [0.0, 0.0], [1e-30, 0.0]])
    np.testing.assert_allclose(adaptemb.unit_rows(x).numpy(), [[0.6, -0.8], [0.0, 0.0], [1.0, 0.0]])
    assert adaptemb.has_direction(x)[:, 0].tolist() == [True, False, True]
    assert adaptemb.has_direction(torch.zeros(2, 3, 4)).shape == (2, 3, 1)


# -- fit: labels follow their rows, pairs holding a zero row are dropped --------------------------------


@pytest.mark.slow
def test_labels_follow_their_rows(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, labels = data
    rows, zero = with_zero_rows(x)
    fitted, warned = _fit(rows, "csr", labels=labels, **CSR)
    alone, _ = _fit(rows[~zero], "csr", labels=labels[~zero], **CSR)
    assert len(warned) == 1 and fitted.fit_report["zero_rows_skipped"] == int(zero.sum())
    assert_same_codes(fitted.encode(x), alone.encode(x))


@pytest.mark.slow
def test_pairs_with_a_zero_query_or_document_are_dropped(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = data
    rows, zero = with_zero_rows(x)
    queries, documents = x[:60].copy(), x[60:120].copy()
    queries[[3, 7]] = 0
    documents[[7, 20, 41]] = 0  # pair 7 is zero on both sides: four pairs go
    dropped = np.zeros(60, dtype=bool)
    dropped[[3, 7, 20, 41]] = True
    fitted, warned = _fit(rows, "csr", pairs=(queries, documents), **CSR)
    assert fitted.fit_report["zero_rows_skipped"] == int(zero.sum()) and fitted.fit_report["zero_pairs_skipped"] == 4
    assert warned == [(f"csr: {int(zero.sum())} of {len(x)} rows are all zero and 4 of 60 pairs have an all-zero query "
                       "or document; they were left out of the fit (csr encodes each row's direction and a zero row has "
                       "none; such a row still encodes, to the empty code). Counted in "
                       "fit_report['zero_rows_skipped'] and ['zero_pairs_skipped']")]
    alone, none = _fit(rows[~zero], "csr", pairs=(queries[~dropped], documents[~dropped]), **CSR)
    assert not none and alone.fit_report["zero_pairs_skipped"] == 0
    assert_same_codes(fitted.encode(x), alone.encode(x))
    # pairs alone can have zero rows too; a method that does not encode directions keeps every pair
    _, warned = _fit(x, "csr", pairs=(queries, documents), **CSR)
    assert len(warned) == 1 and "4 of 60 pairs" in warned[0] and "rows are all zero" not in warned[0]
    cllr, warned = _fit(x, "cllr", pairs=(queries, documents), rank=16, steps=5, batch_size=64, progress=False)
    assert not warned and "zero_pairs_skipped" not in cllr.fit_report


def test_pairs_that_are_all_zero_are_refused(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = data
    with pytest.raises(ValueError, match="every one of the 5 pairs has an all-zero anchor or positive"):
        adaptemb.fit(x, "csr", pairs=(np.zeros((5, 32), np.float32), x[:5]), **CSR)


@pytest.mark.slow
def test_a_stream_with_zero_rows_and_pairs_reports_both(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    x, _ = data
    rows, zero = with_zero_rows(x, every=7)
    np.save(tmp_path / "rows.npy", rows)
    queries, documents = x[:40].copy(), x[40:80].copy()
    documents[5] = 0
    fitted, warned = _fit(tmp_path / "rows.npy", "csr", pairs=(queries, documents), **CSR)
    report = fitted.fit_report
    assert report["stream"]["rows"] == len(x) and report["stream"]["trained_on"] == "every row"
    assert report["zero_rows_skipped"] == int(zero.sum()) and report["zero_pairs_skipped"] == 1 and len(warned) == 1
    # Python batches: the count comes from the passes, a batch that is all zero is fine
    batches = [rows[:100], np.zeros((50, 32), np.float32), rows[100:]]
    fitted, warned = _fit(batches, "mrl", adapter="linear", epochs=1, progress=False)
    assert fitted.fit_report["zero_rows_skipped"] == int(zero.sum()) + 50 and len(warned) == 1
    assert fitted.fit_report["stream"]["rows"] == len(x) + 50


def test_a_refit_does_not_keep_the_last_report(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = data
    rows, _ = with_zero_rows(x)
    compressor = adaptemb.get_compressor("mrl")
    with pytest.warns(adaptemb.ZeroRowsWarning):
        compressor.fit(rows)
    assert compressor.fit(x).fit_report == {"zero_rows_skipped": 0}


# -- search: an empty code tells nothing about the budget ----------------------------------------------


def test_queries_take_the_budget_of_the_documents_that_have_codes(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, _ = data
    rows, _ = with_zero_rows(x)
    bsa = adaptemb.fit(x, "bsa", scoring="dot", **BSA)
    docs = bsa.encode(rows, k=5)
    assert sorted(set(docs.active_counts().tolist())) == [0, 5]
    index = bsa.index(docs)
    assert index.budget == 5
    scores, _ = index.search(np.zeros((1, 32), np.float32), 3)
    assert not scores.any()


# -- the exported graphs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_bsa_packed_head_gives_a_zero_row_empty_slots(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    """bsa's fixed-mode graph emits packed rows when they are smaller than a bitmap: a zero row's empty set is k
    empty slots (the value h), which ``export_onnx`` checks against ``encode`` through ``encoder_arrays``, and which
    the storage head of ``export_encoder`` turns into an all-zero bit row."""
    for module in ("onnx", "onnxruntime", "onnxscript"):
        pytest.importorskip(module)
    from adaptemb.onnx.parity import export_checked
    from adaptemb.onnx.sessions import run_onnx
    from adaptemb.onnx.storage import StorageHead, storage_arrays

    x, _ = data
    bsa = adaptemb.fit(x, "bsa", **BSA)
    rows, zero = with_zero_rows(x[:40], every=3)
    k = 3
    assert bsa.encoder(k).output_names == ("packed",)
    bsa.export_onnx(tmp_path / "bsa.onnx", k=k, sample=rows)
    got = run_onnx(tmp_path / "bsa.onnx", rows, ["packed"])["packed"]
    codes = bsa.encode(rows, k=k)
    np.testing.assert_array_equal(got, bsa.encoder_arrays(codes, k)["packed"])
    counts = adaptemb.BinarySparseCodes.from_arrays({"packed": got, "layout": codes.to_arrays()["layout"]}, 64).active_counts()
    assert (counts[zero] == 0).all() and (counts[~zero] == k).all()
    head = StorageHead(bsa.encoder(k), "binary_sparse", codes.dim)
    bits = head(torch.from_numpy(rows))[0].numpy()
    np.testing.assert_array_equal(bits, storage_arrays(codes, head.head.output_names)["bits"])
    assert not bits[zero].any()
    export_checked(head, torch.from_numpy(rows), tmp_path / "storage.onnx",
                   storage_arrays(bsa.encode(rows, k=k), head.head.output_names))


# -- streaming encode ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_engine_encodes_zero_rows_like_encode(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    """The Ray engine (whose probe encodes the first row: zero here) writes the codes of in-memory encode."""
    pytest.importorskip("ray")
    x, _ = data
    rows, _ = with_zero_rows(x, every=4)
    np.save(tmp_path / "rows.npy", rows)
    for method, params, k in (("csr", CSR, None), ("bsa", BSA, 3), ("bsa", BSA, None), ("mrl", {}, 8)):
        compressor = adaptemb.fit(x, method, **params)
        out = tmp_path / f"{method}-{k}"
        adaptemb.encode_files(tmp_path / "rows.npy", compressor, out, k=k, shard_rows=100, engine="ray")
        got, want = adaptemb.read_code_shards(out), compressor.encode(rows, k=k)
        assert got.kind == want.kind
        np.testing.assert_allclose(got.to_dense(), want.to_dense(), rtol=1e-3, atol=1e-3)
        assert not got.to_dense()[::4].any()
