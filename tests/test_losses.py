"""The shared losses on tiny cases checked by hand."""

from __future__ import annotations

import math

import torch

from adaptemb import info_nce


def test_info_nce_raw_dot_products_with_weighted_anchors() -> None:
    anchors = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    keys = torch.tensor([[1.0, 0.0], [0.0, 3.0]])
    # raw logits (tau = 1): anchor 0 -> [2, 0], anchor 1 -> [0, 3]; the diagonal is positive
    row0, row1 = math.log(math.exp(2) + 1) - 2, math.log(1 + math.exp(3)) - 3
    raw = info_nce(anchors, keys, 1.0, normalize=False)
    assert math.isclose(float(raw), (row0 + row1) / 2, rel_tol=1e-6)
    weighted = info_nce(anchors, keys, 1.0, normalize=False, weights=torch.tensor([3.0, 1.0]))
    assert math.isclose(float(weighted), (3 * row0 + row1) / 4, rel_tol=1e-6)
    # normalised rows: logits are cosines [1, 0] and [0, 1], whatever the scale
    both = math.log(math.e + 1) - 1
    assert math.isclose(float(info_nce(anchors, keys, 1.0)), both, rel_tol=1e-6)


def test_info_nce_weights_skip_anchors_without_positives() -> None:
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positives = torch.tensor([[True, False], [False, False]])  # anchor 1 has none: left out of the weighted mean
    only = info_nce(anchors, anchors, 1.0, positives, normalize=False, weights=torch.tensor([2.0, 5.0]))
    assert math.isclose(float(only), math.log(math.e + 1) - 1, rel_tol=1e-6)
