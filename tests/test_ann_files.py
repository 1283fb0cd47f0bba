"""Approximate indexes on disk (one safetensors file, opened memory-mapped) and the rerank funnel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ann_support import data, fitted, recall

import adaptemb
from adaptemb import AnnConfig, AnnIndex, CorruptFileError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=("csr", "svd+binary"))
def built(request: pytest.FixtureRequest) -> tuple:
    compressor, codes = fitted(request.param)
    return compressor, codes, compressor.index(codes, ann=AnnConfig(cells=64))


def _mapped(array: np.ndarray) -> bool:
    while array is not None and not isinstance(array, np.memmap):
        array = array.base
    return isinstance(array, np.memmap)


def test_save_then_load_gives_the_same_answers_memory_mapped(built: tuple, tmp_path: Path) -> None:
    _, _, ann = built
    _, queries = data()
    path = ann.save(tmp_path / "ann.safetensors")
    loaded = adaptemb.load_index(path)
    assert isinstance(loaded, AnnIndex) and len(loaded) == len(ann) and loaded.cells == ann.cells
    assert _mapped(loaded.store.main.ids) and _mapped(loaded.store.main.codes.to_arrays()[next(iter(
        loaded.store.main.codes.to_arrays()))])
    for kwargs in ({"nprobe": 6}, {"recall": 0.9}):
        expected, got = ann.search(queries, 10, **kwargs), loaded.search(queries, 10, **kwargs)
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[0], expected[0])
    assert loaded.calibration.summary() == ann.calibration.summary()
    assert loaded.bytes_per_vector == pytest.approx(ann.bytes_per_vector)


def test_tune_on_a_mapped_index_scans_a_window_at_a_time_with_the_same_result(built: tuple, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The calibration's exact scan of an index opened from its file reads a window of cells at a time and releases
    its pages: many windows give the calibration and the answers that one window gives."""
    import adaptemb.ann.index as ann_index

    _, _, ann = built
    _, queries = data()
    loaded = adaptemb.load_index(ann.save(tmp_path / "ann.safetensors"))
    whole = loaded.tune(queries[:300]).recall.copy()
    windows: list[int] = []
    release = loaded.store.release_pages
    monkeypatch.setattr(loaded.store, "release_pages", lambda: (windows.append(1), release()))
    monkeypatch.setattr(ann_index, "EXACT_WINDOW_BYTES", loaded.store.main.codes.row_nbytes // 10)
    np.testing.assert_array_equal(loaded.tune(queries[:300]).recall, whole)
    assert 10 <= len(windows) <= 11
    np.testing.assert_array_equal(loaded.search(queries, 10, nprobe=6)[1], ann.search(queries, 10, nprobe=6)[1])


def test_a_changed_index_saves_its_live_rows(built: tuple, tmp_path: Path) -> None:
    compressor, codes, _ = built
    _, queries = data()
    ann = compressor.index(codes[:5000], ann=AnnConfig(cells=32, calibration_queries=0))
    ann.add(codes[5000:6000])
    ann.remove(np.arange(0, 6000, 5))
    loaded = adaptemb.load_index(ann.save(tmp_path / "changed.safetensors"))
    assert len(loaded) == len(ann) == 4800 and loaded.calibration is None
    np.testing.assert_array_equal(loaded.search(queries[:100], 10, nprobe=5)[1], ann.search(queries[:100], 10, nprobe=5)[1])
    loaded.add(codes[6000:6010])  # a loaded (memory-mapped) index still takes rows
    assert len(loaded) == 4810


def test_damaged_and_foreign_files_are_refused(built: tuple, tmp_path: Path) -> None:
    compressor, _, ann = built
    path = ann.save(tmp_path / "ann.safetensors")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CorruptFileError, match="does not fit the file"):
        adaptemb.load_index(cut)
    other = compressor.save(tmp_path / "compressor.safetensors")
    with pytest.raises(CorruptFileError, match="not an adaptemb index"):
        adaptemb.load_index(other)


def test_rerank_with_float_vectors_from_a_memory_mapped_file(tmp_path: Path) -> None:
    compressor, codes = fitted("csr")
    corpus, queries = data()
    np.save(tmp_path / "vectors.npy", corpus.astype(np.float16))
    plain = compressor.index(codes, ann=AnnConfig(cells=64, calibration_queries=0))
    funnel = compressor.index(codes, ann=AnnConfig(cells=64, calibration_queries=0, rerank=tmp_path / "vectors.npy",
                                                   shortlist=50))
    assert funnel.backend.endswith("+rerank") and _mapped(funnel.rerank.store)
    truth = np.argsort(-(queries @ corpus.T), axis=1)[:, :10]
    scores, ids = funnel.search(queries, 10, nprobe=16)
    floats = np.einsum("qd,qkd->qk", queries, corpus.astype(np.float16).astype(np.float32)[ids])
    np.testing.assert_allclose(scores, floats, rtol=1e-3, atol=1e-3)
    assert recall(ids, truth) > recall(plain.search(queries, 10, nprobe=16)[1], truth) + 0.1
    with pytest.raises(ValueError, match="pass query embeddings, not query codes"):
        funnel.search(funnel.encode_queries(queries[:2]), 10, nprobe=2)
    loaded = adaptemb.load_index(funnel.save(tmp_path / "funnel.safetensors"))
    np.testing.assert_array_equal(loaded.search(queries[:50], 10, nprobe=16)[1], ids[:50])


def test_rerank_with_a_larger_code_of_the_same_compressor() -> None:
    compressor, codes = fitted("csr")
    corpus, queries = data()
    larger = compressor.encode(corpus, bytes=64)
    funnel = compressor.index(codes, ann=AnnConfig(cells=64, calibration_queries=0, rerank=larger, shortlist=50))
    exact_large = compressor.index(larger, device="cpu").search(queries, 10)[1]
    _, ids = funnel.search(queries, 10, nprobe=16)
    plain = compressor.index(codes, ann=AnnConfig(cells=64, calibration_queries=0)).search(queries, 10, nprobe=16)[1]
    assert recall(ids, exact_large) > recall(plain, exact_large)
