"""Stand-in queries for a composition's sign codes (``Compressor.stand_in_queries``): each sign bit read as the mean
float query value the fit rows had with that bit.

A document's code keeps the signs of its centred, rotated projection; a query is the rotated projection itself, in
floats. An approximate index makes its routing basis and its calibration queries from documents' codes, and a
document's ±1 vector is a poor stand-in for a query near it: every dimension weighs the same, where real queries'
leading dimensions are far larger (``itq-tail`` leaves them unrotated). Measured at 32 B, recall 0.95 against
exact (static-256 at 250k rows / MiniLM at 198k): the calibration asked for 162 / 134 probes from the ±1 vectors and
141 / 115 from these, where real queries need 116 / 84; held-out queries searched with ``recall=0.95`` then found
0.959 / 0.965 of the exact top-10 (0.966 / 0.970 with the ±1 vectors).
"""

from __future__ import annotations

import numpy as np
import torch

from adaptemb.codes import Codes, DenseCodes

BLOCK_ROWS = 16384
"""Fit rows summed at a time (bounds the temporaries to a block)."""


def sign_query_means(codes: Codes, queries: torch.Tensor) -> torch.Tensor:
    """(2, r) float32: per dimension, the mean of ``queries`` (n, r) over the rows whose sign in ``codes`` (their ±1
    ``to_dense`` form) is negative (row 0) and positive (row 1); 0 for a sign no row has."""
    total = torch.zeros(queries.shape[1], dtype=torch.float64)
    on_sum = torch.zeros(queries.shape[1], dtype=torch.float64)
    on_count = torch.zeros(queries.shape[1], dtype=torch.float64)
    for start in range(0, len(queries), BLOCK_ROWS):
        positive = torch.from_numpy(np.asarray(codes[start : start + BLOCK_ROWS].to_dense()) > 0)
        values = queries[start : start + BLOCK_ROWS].float()
        total += values.sum(dim=0, dtype=torch.float64)
        on_sum += (values * positive).sum(dim=0, dtype=torch.float64)
        on_count += positive.sum(dim=0)
    off_count = len(queries) - on_count
    means = torch.stack([(total - on_sum) / off_count.clamp(min=1), on_sum / on_count.clamp(min=1)])
    return means.float()


def sign_stand_ins(codes: Codes, means: torch.Tensor) -> DenseCodes:
    """Float query codes for sign ``codes``: each dimension the mean query value of its sign (``sign_query_means``)."""
    positive = np.asarray(codes.to_dense()) > 0
    values = means.numpy()
    return DenseCodes(np.ascontiguousarray(np.where(positive, values[1], values[0]), dtype=np.float32))
