"""The ``values`` storage option of the dense methods (svd, mrl): float16 and int8 codes, their bytes, their
quality, and the contract's save/load, index and codes-file checks on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import adaptemb
from adaptemb.testing import assert_same_codes, assert_top_k_matches, clustered_embeddings


@pytest.mark.parametrize(("method", "values"), [("svd", "int8"), ("svd", "float16"), ("mrl", "int8"), ("mrl", "float16")])
def test_stored_values_keep_the_contract(method: str, values: str, tmp_path: Path) -> None:
    """Save/load gives identical codes, the index returns the top-10 of score(), the codes file round-trips."""
    x, _ = clustered_embeddings()
    model = adaptemb.fit(x, method, values=values)
    for k in (1, 16, 32):
        codes = model.encode(x, k=k)
        assert codes.bytes_per_vector == k * {"int8": 1, "float16": 2}[values]
        assert_same_codes(codes, adaptemb.load(model.save(tmp_path / "m.safetensors")).encode(x, k=k))
        index = model.index(codes, device="cpu")
        assert not index.brute_force and index.budget == k
        assert_top_k_matches(index.search(x[:30], 10), model.score(model.encode_queries(x[:30], k=k), codes), 10)
    adaptemb.save_codes(codes, tmp_path / "codes.npz")
    assert_same_codes(codes, adaptemb.load_codes(tmp_path / "codes.npz"))


@pytest.mark.parametrize("method", ["svd", "mrl"])
def test_values_cost_four_two_one_bytes_and_keep_the_ranking(method: str) -> None:
    from adaptemb.datasets import load_dataset

    data = load_dataset("default", progress=False)
    docs = np.ascontiguousarray(data.corpus[:2000], dtype=np.float32)
    queries = np.ascontiguousarray(data.queries[:200], dtype=np.float32)
    top = {}
    for values, nbytes in (("float32", 4), ("float16", 2), ("int8", 1)):
        model = adaptemb.fit(docs, method, values=values)
        codes = model.encode(docs, k=64)
        assert codes.bytes_per_vector == 64 * nbytes and codes.kind == ("int8" if values == "int8" else "dense")
        assert model.budget_for_bytes(64) == 64 // nbytes
        top[values] = model.index(codes, device="cpu").search(queries, 10)[1]
    for values in ("float16", "int8"):  # the same neighbours, up to rounding
        overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top["float32"], top[values])])
        assert overlap > (0.99 if values == "float16" else 0.9), (values, overlap)


def test_a_wrong_state_for_the_values_option_is_refused() -> None:
    x = np.random.default_rng(0).standard_normal((50, 16)).astype(np.float32)
    state = adaptemb.fit(x, "svd").state_tensors()
    with pytest.raises(ValueError, match="value_scale"):
        adaptemb.get_compressor("svd", values="int8").restore(16, state)
