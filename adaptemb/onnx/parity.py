"""Parity: does an ONNX graph reproduce what the torch code gives? One comparison, one export-and-check path.

``compare_codes`` holds a graph's outputs against the arrays ``encode`` gave for the same inputs, to one of
two bars: the float bar (``MIN_AGREEMENT`` of the integer entries identical, float values within ``ATOL``:
the same codes) or, for a graph with a quantised backbone, the quantised bar (``QUANTIZED_MIN_AGREEMENT``
of the active indices / bits, or a code cosine of ``QUANTIZED_MIN_COSINE``: close codes). ``ParityCheck``
runs a graph under onnxruntime on sample inputs and compares; ``export_checked`` exports a head module
(``Compressor.export_onnx``) and writes it only when it passes. ``adaptemb.export_encoder`` checks the
graph it composes with the same ``ParityCheck``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from adaptemb.codes import Codes
from adaptemb.onnx.compose import HEAD_INPUT, export_module
from adaptemb.onnx.sessions import require_onnx, run
from adaptemb.serialization import atomic_write

MIN_AGREEMENT = 0.999
"""Fraction of integer code entries (indices, bits, int8 codes) the ONNX graph must reproduce exactly."""
ATOL = 1e-4
"""Largest difference allowed between float code values of the ONNX graph and the torch pipeline (plus
one unit in the last place for float16 values)."""
QUANTIZED_MIN_AGREEMENT = 0.85
"""The bar of a quantised graph (``quantize="dynamic"``) for codes made of indices or bits: the fraction of
the torch code's active entries it must reproduce (each row's index set for sparse codes, its set bits for
``binary_sparse``, every sign bit for ``binary``). Measured on all-MiniLM-L6-v2 (24 sample texts and 600
WordNet definitions): per-channel int8 weights (``QUANTIZE_OPTIONS``) keep 90-94 % for csr (k=16, 32) and
bsa, 96 % for binary, and their csr search loses nothing (NDCG@10 0.2784 vs 0.2786); per-tensor weights
keep 77-81 % for csr and bsa (NDCG@10 0.2705), 90-91 % for binary. 0.85 lies between; it says "close",
not "identical" (``MIN_AGREEMENT``)."""
QUANTIZED_MIN_COSINE = 0.98
"""The bar of a quantised graph for codes made of numbers (``int8``, dequantised; dense codes): the mean
cosine between each row's code from the graph and from the torch pipeline. Measured on MiniLM: 0.991-0.995
with per-channel weights (int8, svd and mrl at k=64), 0.956-0.971 per tensor."""
_TRACE_ROWS = 8


@dataclass(frozen=True)
class EncoderParity:
    """How closely an ONNX encoder reproduced the torch pipeline on the sample inputs, and whether that met
    its bar: the float bar (``MIN_AGREEMENT``, ``ATOL``: the same codes) or, for a quantised graph, the
    quantised bar (``QUANTIZED_MIN_AGREEMENT`` / ``QUANTIZED_MIN_COSINE``: close codes)."""

    rows: int
    agreement: float
    """Fraction of identical integer entries: indices (compared as each row's set), bits, int8 codes."""
    max_abs_diff: float
    """Largest difference of float code values (sparse values compared by rank, largest first)."""
    integer_entries: int
    float_entries: int
    passed: bool
    """Whether the graph met ``bar``."""
    active_agreement: float = 1.0
    """Fraction of the torch code's active entries the graph reproduces: each row's index set (sparse codes),
    its set bits (``binary_sparse``), every bit (``binary`` and other bit codes); 1.0 without such entries."""
    active_entries: int = 0
    cosine: float = 1.0
    """Mean cosine between each row's code from the graph and from the torch pipeline, as vectors (sparse
    values at their indices, bits as 0/1 or ±1, int8 codes dequantised, dense values)."""
    quantized: bool = False
    """Measured on a graph with a quantised backbone (held to the quantised bar)."""
    bar: str = ""
    """The bar ``passed`` refers to, in words."""

    def __str__(self) -> str:
        parts = [f"{self.rows} inputs"]
        if self.quantized:
            if self.active_entries:
                parts.append(f"{self.active_agreement:.2%} of {self.active_entries} active indices/bits identical")
            parts.append(f"code cosine {self.cosine:.4f}")
            if self.integer_entries and (self.integer_entries, self.agreement) != (self.active_entries, self.active_agreement):
                parts.append(f"{self.agreement:.2%} of all {self.integer_entries} index/bit/code entries identical")
            if self.float_entries:
                parts.append(f"values within {self.max_abs_diff:.2e}")
            return ", ".join(parts) + f": {'passed' if self.passed else 'FAILED'} the int8 bar ({self.bar})"
        if self.integer_entries:
            parts.append(f"{self.agreement:.4%} of {self.integer_entries} index/bit/code entries identical")
        if self.float_entries:
            parts.append(f"values within {self.max_abs_diff:.2e}")
        return ", ".join(parts)


@dataclass(frozen=True)
class OnnxParity:
    """How closely onnxruntime reproduced ``encode`` on the sample rows (``Compressor.export_onnx``)."""

    rows: int
    max_abs_diff: float
    integer_mismatch: float

    @classmethod
    def of(cls, parity: EncoderParity) -> OnnxParity:
        return cls(parity.rows, parity.max_abs_diff, 1.0 - parity.agreement if parity.integer_entries else 0.0)

    def __str__(self) -> str:
        return (
            f"onnxruntime parity on {self.rows} rows: max |diff| {self.max_abs_diff:.2e}, "
            f"integer mismatches {self.integer_mismatch:.4%}"
        )


@dataclass(frozen=True)
class ParityCheck:
    """Sample inputs of a graph (``feeds``, by input name) and the arrays it must give for them (``expected``,
    by output name; ``reference``: the codes they came from, which tell their kind)."""

    feeds: Mapping[str, np.ndarray]
    expected: Mapping[str, np.ndarray]
    reference: Codes | None = None
    threads: int = 0

    def measure(self, model_path: Path, *, quantized: bool = False) -> EncoderParity:
        """Run the graph at ``model_path`` under onnxruntime and compare (the quantised bar with ``quantized``)."""
        outputs = run(model_path, self.feeds, list(self.expected), self.threads)
        return compare_codes(outputs, self.expected, reference=self.reference, quantized=quantized)

    def require(self, model_path: Path, failure: str) -> EncoderParity:
        """``measure`` at the float bar; ``ValueError`` starting with ``failure`` when the graph misses it."""
        parity = self.measure(model_path)
        if not parity.passed:
            raise ValueError(f"{failure}: {parity} (the bar: {parity.bar}); nothing was written")
        return parity


def export_checked(module: torch.nn.Module, rows: torch.Tensor, path: str | Path,
                   expected: Mapping[str, np.ndarray]) -> OnnxParity:
    """Export a head ``module`` (float32 rows (n, d) in, named ``output_names`` out) to ``path`` (atomically,
    missing folders created) and check it under onnxruntime on ``rows`` against ``expected`` at the float bar;
    nothing is written unless it passes. ``expected`` may hold more arrays (shared tables such as int8 scales):
    the graph's outputs are compared."""
    require_onnx()
    trace = rows[:_TRACE_ROWS] if len(rows) > 1 else rows.repeat(2, 1)  # a batch of 1 would be static
    names = list(module.output_names)
    check = ParityCheck({HEAD_INPUT: rows.numpy()}, {name: expected[name] for name in names})  # shared tables left out
    parity: list[EncoderParity] = []

    def export_and_check(tmp: Path) -> None:
        export_module(module.eval(), (trace,), tmp, [HEAD_INPUT], names)
        parity.append(check.require(tmp, "exported ONNX encoder does not match encode()"))

    atomic_write(path, export_and_check)
    return OnnxParity.of(parity[0])


# -- the comparison ------------------------------------------------------------------------------


@dataclass
class _Agreement:
    """Entries compared so far, and how many of them were identical."""

    same: int = 0
    total: int = 0

    def add(self, same: int, total: int) -> None:
        self.same, self.total = self.same + same, self.total + total

    @property
    def share(self) -> float:
        """The identical share (1.0 when nothing was compared)."""
        return self.same / self.total if self.total else 1.0


@dataclass
class _Tally:
    """What the comparison counted so far, output by output: every integer entry and the active ones (indices, set
    bits), the float entries, and the code as vectors (one block per output) for the cosine."""

    rows: int = 0
    entries: _Agreement = field(default_factory=_Agreement)
    active: _Agreement = field(default_factory=_Agreement)
    floats: int = 0
    max_diff: float = 0.0
    within: bool = True
    got_rows: list[Any] = field(default_factory=list)
    want_rows: list[Any] = field(default_factory=list)

    def integers(self, same: int, total: int, *, active: bool) -> None:
        self.entries.add(same, total)
        if active:
            self.active.add(same, total)

    def vectors(self, got: Any, want: Any) -> None:
        self.got_rows.append(got)
        self.want_rows.append(want)


def compare_codes(outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], *,
                  reference: Codes | None = None, quantized: bool = False) -> EncoderParity:
    """Parity of an ONNX graph's ``outputs`` with the arrays ``expected`` (see ``EncoderParity``).

    ``reference`` (the torch pipeline's codes) tells how its kind reads its outputs (``Codes.parity_set_bits``: the
    set bits are the active entries, as binary sparse codes'; ``Codes.parity_vectors``: int8 codes dequantised for
    the cosine). ``quantized`` holds the outputs
    to the quantised bar instead of the float bar. ``indices`` are compared as each row's set; -1 marks an
    empty slot (a head's fixed layout of a row with fewer active features)."""
    if reference is not None:  # the kind's comparable form (packed codes: their indices and values)
        outputs, expected = reference.parity_arrays(dict(outputs)), reference.parity_arrays(dict(expected))
    tally = _Tally()
    for name, want in expected.items():
        got = outputs[name]
        tally.rows = len(want)
        if got.shape != want.shape:
            raise ValueError(f"ONNX output {name!r} has shape {got.shape}, the torch pipeline gives {want.shape}")
        if np.issubdtype(want.dtype, np.floating):
            _floats(tally, got, want, with_indices=name == "values" and "indices" in expected)
        elif name == "bits":
            _bits(tally, got, want, set_bits=reference is not None and reference.parity_set_bits)
        elif name == "indices" and want.ndim == 2:
            _indices(tally, got, want, outputs.get("values"), expected.get("values"))
        else:
            _integers(tally, name, got, want, reference)
    return _verdict(tally, quantized)


def _floats(tally: _Tally, got: np.ndarray, want: np.ndarray, *, with_indices: bool) -> None:
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    allowed = ATOL + (np.finfo(want.dtype).eps * np.abs(want.astype(np.float64)) if want.dtype == np.float16 else 0)
    tally.within = tally.within and bool((diff <= allowed).all())
    tally.max_diff = max(tally.max_diff, float(diff.max(initial=0.0)))
    tally.floats += want.size
    if not with_indices:  # sparse values go with their indices
        tally.vectors(got.reshape(tally.rows, -1).astype(np.float64), want.reshape(tally.rows, -1).astype(np.float64))


def _bits(tally: _Tally, got: np.ndarray, want: np.ndarray, *, set_bits: bool) -> None:
    got_bits = np.unpackbits(got.astype(np.uint8), axis=1)
    want_bits = np.unpackbits(want.astype(np.uint8), axis=1)
    equal = got_bits == want_bits
    tally.integers(int(equal.sum()), equal.size, active=not set_bits)  # every bit is a sign ...
    if set_bits:  # ... unless the active features are the set bits
        tally.active.add(int((got_bits & want_bits).sum()), int(want_bits.sum()))
        tally.vectors(got_bits.astype(np.float64), want_bits.astype(np.float64))
    else:
        tally.vectors(2.0 * got_bits - 1.0, 2.0 * want_bits - 1.0)


def _indices(tally: _Tally, got: np.ndarray, want: np.ndarray, got_values: np.ndarray | None,
             want_values: np.ndarray | None) -> None:
    """A row's active set; order within a row may differ at ties."""
    got64, want64 = got.astype(np.int64), want.astype(np.int64)
    overlap = sum(
        len(np.intersect1d(g[g >= 0], w[w >= 0])) + min(int((g < 0).sum()), int((w < 0).sum()))
        for g, w in zip(got64, want64)
    )
    tally.integers(overlap, want.size, active=True)
    width = int(max(got64.max(initial=0), want64.max(initial=0))) + 1
    tally.vectors(_sparse_rows(got64, got_values, width), _sparse_rows(want64, want_values, width))


def _integers(tally: _Tally, name: str, got: np.ndarray, want: np.ndarray, reference: Codes | None) -> None:
    tally.integers(int((got.astype(np.int64) == want.astype(np.int64)).sum()), want.size, active=False)
    if reference is None:
        tally.vectors(got.reshape(tally.rows, -1).astype(np.float64), want.reshape(tally.rows, -1).astype(np.float64))
    else:  # as the kind reads them (int8 codes: dequantised)
        tally.vectors(reference.parity_vectors(name, got), reference.parity_vectors(name, want))


def _verdict(tally: _Tally, quantized: bool) -> EncoderParity:
    agreement, active_agreement = tally.entries.share, tally.active.share
    cosine = _mean_row_cosine(tally.got_rows, tally.want_rows)
    if not quantized:
        bar = f"at least {MIN_AGREEMENT:.1%} of index/bit/code entries identical and values within {ATOL}"
        passed = agreement >= MIN_AGREEMENT and tally.within
    elif tally.active.total:
        bar = f"at least {QUANTIZED_MIN_AGREEMENT:.0%} of the active indices/bits identical"
        passed = active_agreement >= QUANTIZED_MIN_AGREEMENT
    else:
        bar = f"code cosine at least {QUANTIZED_MIN_COSINE}"
        passed = cosine >= QUANTIZED_MIN_COSINE
    return EncoderParity(tally.rows, agreement, tally.max_diff, tally.entries.total, tally.floats, passed,
                         active_agreement, tally.active.total, cosine, quantized, bar)


def _sparse_rows(indices: np.ndarray, values: np.ndarray | None, width: int) -> sp.csr_matrix:
    """(n, k) indices (and their values; ones without) as an (n, width) sparse matrix; -1 slots hold nothing."""
    n, k = indices.shape
    empty = indices.ravel() < 0
    data = np.ones(n * k) if values is None else values.astype(np.float64).ravel()
    data = np.where(empty, 0.0, data)
    columns = np.where(empty, 0, indices.ravel())
    matrix = sp.csr_matrix((data, columns, np.arange(0, n * k + 1, k)), shape=(n, width))
    matrix.eliminate_zeros()
    return matrix


def _mean_row_cosine(got: list[Any], want: list[Any]) -> float:
    """Mean over rows of the cosine between the concatenated blocks of ``got`` and ``want`` (two all-zero
    rows count as identical)."""
    if not got:
        return 1.0
    got_matrix = sp.hstack([sp.csr_matrix(block) for block in got]).tocsr()
    want_matrix = sp.hstack([sp.csr_matrix(block) for block in want]).tocsr()
    dot = np.asarray(got_matrix.multiply(want_matrix).sum(axis=1)).ravel()
    norms = np.sqrt(np.asarray(got_matrix.multiply(got_matrix).sum(axis=1)).ravel()
                    * np.asarray(want_matrix.multiply(want_matrix).sum(axis=1)).ravel())
    cosine = np.where(norms > 0, dot / np.maximum(norms, np.finfo(np.float64).tiny),
                      (got_matrix != want_matrix).getnnz(axis=1) == 0)
    return float(cosine.mean()) if len(cosine) else 1.0
