"""Assertions on codes and search results that the contract suite and adaptemb's tests share."""

from __future__ import annotations

import numpy as np

from adaptemb.codes import Codes
from adaptemb.method import Compressor
from adaptemb.ranking import top_k


def code_arrays(codes: Codes) -> dict[str, np.ndarray]:
    """The arrays behind codes, for exact comparisons."""
    return codes.to_arrays()


def assert_same_codes(left: Codes, right: Codes) -> None:
    """Codes of the same kind with bit-identical arrays."""
    assert type(left) is type(right) and left.dim == right.dim
    a, b = code_arrays(left), code_arrays(right)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def assert_top_k_matches(got: tuple[np.ndarray, np.ndarray], scores: np.ndarray, k: int, *, tol: float = 1e-4) -> None:
    """``got`` (scores, ids) is the top-``k`` of the (n_queries, n_docs) ``scores`` matrix, ties aside.

    The returned scores equal the ``k`` best of each row (within ``tol``, relative to the row's scale),
    every returned id really has the score returned for it, ids are distinct, and any id that differs
    from the brute-force top-k has a score tied (within ``tol``) with the k-th best.
    """
    got_scores, got_ids = got
    k = min(k, scores.shape[1])
    want_scores, want_ids = top_k(np.asarray(scores, dtype=np.float32), k)
    assert got_ids.shape == (scores.shape[0], k) and got_scores.shape == got_ids.shape
    atol = tol * max(1.0, float(np.abs(want_scores).max(initial=0.0)))
    np.testing.assert_allclose(got_scores, want_scores, rtol=tol, atol=atol)
    np.testing.assert_allclose(np.take_along_axis(scores, got_ids, axis=1), got_scores, rtol=tol, atol=atol)
    for row, (ids, expected) in enumerate(zip(got_ids, want_ids)):
        assert len(set(ids.tolist())) == k, f"query {row}: repeated ids {ids}"
        kth = want_scores[row, -1]
        for doc in set(ids.tolist()) ^ set(expected.tolist()):
            assert abs(scores[row, doc] - kth) <= atol + tol * abs(kth), f"query {row}: doc {doc} is not tied at the cut"


MIN_FLIPS_ALLOWED = 4


def assert_close_codes(left: Codes, right: Codes, *, rtol: float = 1e-3, max_flips: float = 1e-3) -> None:
    """Codes that stand for the same vectors up to float rounding: ``to_dense()`` values agree within
    ``rtol`` except for at most a ``max_flips`` fraction of entries (ties that last-bit float
    differences can tip, e.g. a top-k boundary or an int8 rounding step), and never fewer than
    ``MIN_FLIPS_ALLOWED`` entries: on a small matrix a fraction allows less than one tie (mrl+sq's
    240 x 8 codes of the contract data showed 2 flipped rounding steps for one thread count)."""
    assert type(left) is type(right) and left.dim == right.dim and len(left) == len(right)
    a, b = left.to_dense(), right.to_dense()
    flips = int((~np.isclose(a, b, rtol=rtol, atol=rtol)).sum())
    assert flips <= max(max_flips * a.size, MIN_FLIPS_ALLOWED), f"{flips} of {a.size} entries differ"


def assert_finite_codes(codes: Codes) -> None:
    """Every float array behind ``codes`` holds only finite values."""
    for name, array in codes.to_arrays().items():
        assert array.dtype.kind != "f" or np.isfinite(array).all(), f"{name} holds NaN or infinite values"


def budgets_to_check(compressor: Compressor) -> list[int | None]:
    """The budgets a contract test encodes at: the default (None), the lowest, a middle one and the highest."""
    budgets = compressor.budgets()
    middle = (budgets.low + budgets.high) // 2 if budgets.values is None else budgets.values[len(budgets.values) // 2]
    chosen = [None, budgets.low, middle, budgets.high]
    return list(dict.fromkeys(chosen))
