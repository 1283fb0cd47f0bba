"""Checks every public entry point applies to user arrays, with errors that say what is valid."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

FLOAT_DTYPES = "float16, bfloat16, float32 or float64"
_TORCH_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def as_matrix(x: Any, *, name: str = "embeddings", dim: int | None = None, nonzero_rows: bool = False) -> torch.Tensor:
    """Validate an (n, d) float array (numpy or torch) and return it as a float32 CPU tensor.

    Raises TypeError for a wrong container or dtype and ValueError for a wrong shape, an empty
    array, non-finite values, float64 values beyond float32's range, a dimension other than ``dim``
    or (with ``nonzero_rows``, for callers that need a direction in every row) an all-zero row. All-zero
    rows are valid data otherwise: ``Compressor.fit`` leaves them out of methods that encode directions
    (``zero_rows`` finds them) and ``encode`` gives them the empty code. Computation happens in float32;
    float64 inputs are rounded to float32, integer inputs are rejected rather than cast.
    """
    tensor = _to_tensor(x, name)
    if tensor.ndim != 2:
        hint = " (for one vector use x[None, :])" if tensor.ndim == 1 else ""
        raise ValueError(f"{name} must be 2-D with shape (n, d); got shape {tuple(tensor.shape)}{hint}")
    n, d = tensor.shape
    if n == 0 or d == 0:
        raise ValueError(f"{name} is empty: shape {tuple(tensor.shape)}; need at least one row and one column")
    if dim is not None:
        check_dim(d, dim, name)
    source = tensor.detach()
    tensor = source.to(device="cpu", dtype=torch.float32).contiguous()
    if not _sum_is_finite(tensor):  # NaN or inf somewhere, or a finite sum past float32's range: look closer
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            _raise_not_finite(source, finite, name)
    if nonzero_rows:
        zero = zero_rows(tensor)
        if bool(zero.any()):
            rows = torch.nonzero(zero).flatten()
            raise ValueError(
                f"{name} has all-zero rows ({rows.numel()} of {n}, first at row {int(rows[0])}); this method "
                "encodes each row's direction (rows are L2-normalised), and a zero row has none"
            )
    return tensor


def _sum_is_finite(x: torch.Tensor) -> bool:
    """True when the sum of ``x`` is finite, which proves every value finite (a NaN or an infinity carries into the
    sum); one pass without a boolean mask, several times faster than ``isfinite(x).all()``. False may also mean a
    finite sum beyond float32's range, so the caller checks element-wise then."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(x.numpy().sum()))


def check_dim(d: int, dim: int, name: str = "embeddings") -> None:
    """``ValueError`` unless rows of dimension ``d`` are of the fitted dimension ``dim``."""
    if d != dim:
        raise ValueError(f"{name} has dimension {d}, but this compressor was fitted on dimension {dim}")


def zero_rows(x: torch.Tensor) -> torch.Tensor:
    """A boolean (n,) mask of the all-zero rows of a validated (n, d) matrix: rows without a direction."""
    return ~x.ne(0).any(dim=1)


def all_zero_error(name: str, n: int, method: str) -> ValueError:
    """The error for input whose every row is all zero, given to a method that encodes directions."""
    return ValueError(
        f"{name}: all {n:,} rows are all zero, so there is nothing to learn: {method} encodes each row's direction "
        "(rows are L2-normalised) and a zero row has none. Zero rows among others are left out of the fit "
        "(and encode to the empty code); fit on rows that are not all zero"
    )


def _raise_not_finite(source: torch.Tensor, finite32: torch.Tensor, name: str) -> None:
    """A ValueError for rows that are not finite in float32: NaN/inf in the input, or float64 beyond float32."""
    bad_rows = torch.nonzero(~finite32.all(dim=1)).flatten()
    where = f"in {bad_rows.numel()} of {len(source)} rows (first at row {int(bad_rows[0])})"
    if bool(torch.isfinite(source).all()):  # finite in its own dtype: too large for float32
        peak = float(source.abs().max())
        raise ValueError(
            f"{name} overflows float32 {where}: largest magnitude {peak:.3g} > {torch.finfo(torch.float32).max:.3g}; "
            "computation is in float32, so rescale the rows (their direction is what most methods encode)"
        )
    raise ValueError(f"{name} contains NaN or infinite values {where}; all values must be finite")


def as_vector(x: Any, *, name: str, length: int, integer: bool = False) -> np.ndarray:
    """Validate a 1-D array of ``length`` entries (integer labels or ids when ``integer``)."""
    array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or torch tensor; got {type(x).__name__}")
    if array.ndim != 1 or array.shape[0] != length:
        raise ValueError(f"{name} must have shape ({length},); got {array.shape}")
    if integer and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integers; got dtype {array.dtype}")
    return array


def check_budget(k: Any, *, low: int, high: int, method: str) -> int:
    """Return ``k`` as an int after checking ``low <= k <= high``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer between {low} and {high} for {method}; got {k!r}")
    if not low <= int(k) <= high:
        raise ValueError(f"k={int(k)} is out of range for {method}: valid budgets are {low} <= k <= {high}")
    return int(k)


def _to_tensor(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        if x.dtype not in _TORCH_FLOATS:
            raise TypeError(f"{name} must have a floating dtype ({FLOAT_DTYPES}); got {x.dtype}")
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.kind != "f":
            raise TypeError(f"{name} must have a floating dtype ({FLOAT_DTYPES}); got {x.dtype}")
        array = np.ascontiguousarray(x)
        if array.flags.writeable:
            return torch.from_numpy(array)
        with warnings.catch_warnings():  # read-only input (a memory map, arrow buffers): adaptemb only reads it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(array)
    raise TypeError(
        f"{name} must be a numpy array or torch tensor of shape (n, d); got {type(x).__name__}. "
        "Load files with adaptemb.load_embeddings(path)."
    )
