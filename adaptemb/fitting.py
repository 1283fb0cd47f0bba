"""Fitting a compressor: from an array or from a stream, the supervision it is given, the all-zero rows left out.

``Compressor.fit`` calls ``fit_compressor``, which validates what it was given and calls the method's own
hooks: ``_fit`` (validated float32 rows), ``_fit_stream`` (a ``RowStream``) or ``_fit_passthrough`` (integer
embeddings of a kind the method keeps as its codes). A method that encodes directions (``normalizes_rows``)
learns from the rows that have one: all-zero rows (with their labels, and pairs holding one) are left out,
counted in ``fit_report["zero_rows_skipped"]`` / ``["zero_pairs_skipped"]``, with one ``ZeroRowsWarning``.

``queries``: an unlabelled sample of real queries (m, d) for the methods that make fit-time choices by them
(``"queries"`` in their ``fit_inputs``: csr, compositions before a sign-bit quantiser): each choice is judged by
how much of each sample query's exact float top-10 among the fit rows the candidate finds. A method without such
a choice refuses the sample (``QUERY_USERS``), as it refuses pairs or labels it does not learn from.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from adaptemb.errors import InvalidConfigError, ZeroRowsWarning
from adaptemb.inputs import InputSpec, IntegerEmbeddings, ReadRows
from adaptemb.rows import RowStream
from adaptemb.threads import compute_threads
from adaptemb.validation import all_zero_error, as_matrix, as_vector, zero_rows


class Learner(Protocol):
    """What fitting needs of a compressor (``adaptemb.Compressor`` provides it)."""

    name: str
    dim: int | None
    fit_report: dict[str, Any] | None
    fit_inputs: frozenset[str]
    accepts_input_kinds: tuple[str, ...]
    stream_sample_rows: int

    @property
    def normalizes_rows(self) -> bool: ...

    @property
    def trains_on_stream(self) -> bool: ...

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None: ...

    def _fit_stream(self, stream: RowStream, **supervision: Any) -> None: ...

    def _fit_passthrough(self, given: IntegerEmbeddings, **supervision: Any) -> None: ...


QUERY_USERS = ("csr (its k and value bits per byte budget, and its heads)",
               "compositions before a sign-bit quantiser, e.g. svd+binary (each width's rotation and bits per dimension)")
"""What a query sample judges, named in the error a method without such a choice gives."""


def fit_compressor(learner: Learner, x: Any, *, pairs: Any = None, labels: Any = None, queries: Any = None,
                   key: str | None = None, spec: InputSpec | None = None) -> None:
    """Fit ``learner`` on ``x``: an array (read as ``spec`` says), rows read already (``ReadRows``), or files /
    batches / a ``RowStream``; ``queries`` a sample of real queries (see the module docstring)."""
    spec = spec or InputSpec()
    if queries is not None:
        require_queries(learner)
    stream = None if isinstance(x, ReadRows) else RowStream.of(x, key=key, nonzero_rows=learner.normalizes_rows)
    if stream is None:
        if key is not None:
            raise TypeError("key names a column or tensor of a file; pass it with a path, not an array")
        _fit_rows(learner, x if isinstance(x, ReadRows) else spec.read_rows(x), pairs=pairs, labels=labels,
                  queries=queries, spec=spec)
        return
    if not spec.is_float:
        raise InvalidConfigError(f"input_kind={spec.kind!r} applies to an array in memory; files, batches and "
                                 "streams are read as float embeddings")
    if labels is not None:
        raise ValueError("labels must line up with rows held in memory: fit on an array to use labels "
                         "(a stream's rows are read in shuffled chunks); pairs work with streams")
    _fit_from_stream(learner, stream, pairs, queries)


def _fit_rows(learner: Learner, read: ReadRows, *, pairs: Any, labels: Any, queries: Any, spec: InputSpec) -> None:
    given = read.given
    passthrough = given is not None and given.kind in learner.accepts_input_kinds
    matrix = None if passthrough else read.floats()
    n, dim = (len(given), given.dim) if given is not None else matrix.shape  # type: ignore[union-attr]
    zero = zero_rows(matrix) if matrix is not None and learner.normalizes_rows else torch.zeros(n, dtype=torch.bool)
    if bool(zero.all()):
        raise all_zero_error("embeddings", n, learner.name)
    supervision: dict[str, Any] = {}
    pairs_skipped = None
    if pairs is not None:
        supervision["pairs"], pairs_skipped = check_pairs(learner, pairs, dim, spec)
    if labels is not None:
        require_fit_input(learner, "labels")
        supervision["labels"] = torch.from_numpy(as_vector(labels, name="labels", length=n, integer=True).astype(np.int64))
    if queries is not None:
        supervision["queries"] = check_queries(learner, queries, dim)
    if matrix is not None and bool(zero.any()):  # rows without a direction: left out, their labels with them
        matrix = matrix[~zero]
        if "labels" in supervision:
            supervision["labels"] = supervision["labels"][~zero]
    with compute_threads():  # sized to the free cores of the machine (see adaptemb.threads)
        if matrix is None:
            assert given is not None
            learner._fit_passthrough(given, **supervision)
        else:
            learner._fit(matrix, **supervision)
    learner.dim = dim
    report_zero_rows(learner, int(zero.sum()), n, pairs_skipped, None if pairs is None else len(pairs[0]))


def _fit_from_stream(learner: Learner, stream: RowStream, pairs: Any, queries: Any) -> None:
    supervision: dict[str, Any] = {}
    with compute_threads():
        pairs_skipped = None
        if pairs is not None:  # a first pass may be needed for the width of Python batches
            require_fit_input(learner, "pairs")
            supervision["pairs"], pairs_skipped = check_pairs(learner, pairs, stream.dim or _first_width(stream))
        if queries is not None:
            supervision["queries"] = check_queries(learner, queries, stream.dim or _first_width(stream))
        learner._fit_stream(stream, **supervision)
    assert stream.dim is not None and stream.rows is not None
    learner.dim = stream.dim
    sampled = not learner.trains_on_stream and stream.kept_rows > learner.stream_sample_rows
    learner.fit_report = {**(learner.fit_report or {}), "stream": {
        "source": stream.name, "rows": stream.rows,
        "trained_on": f"a uniform sample of {learner.stream_sample_rows} rows" if sampled else "every row"}}
    report_zero_rows(learner, stream.skipped_rows, stream.rows, pairs_skipped, None if pairs is None else len(pairs[0]))


def _first_width(stream: RowStream) -> int:
    _, rows = next(stream.chunks())
    return rows.shape[1]


def require_fit_input(learner: Learner, kind: str) -> None:
    """``InvalidConfigError`` unless the method learns from ``kind`` (``"pairs"``, ``"labels"``: its ``fit_inputs``)."""
    if kind not in learner.fit_inputs:
        accepted = ", ".join(sorted(learner.fit_inputs)) or "only the embeddings"
        raise InvalidConfigError(f"{learner.name} does not learn from {kind}; it accepts {accepted}")


def require_queries(learner: Learner) -> None:
    """``InvalidConfigError`` unless the method makes a fit-time choice a query sample judges (``fit_inputs``)."""
    if "queries" not in learner.fit_inputs:
        raise InvalidConfigError(f"{learner.name} makes no fit-time choice that a sample of queries could judge, so it "
                                 f"does not take queries=...; the methods that do: {'; '.join(QUERY_USERS)}",
                                 parameter="queries")


def check_queries(learner: Learner, queries: Any, dim: int) -> torch.Tensor:
    """The validated query sample (m, d) float32: finite, not empty, of the fit rows' dimension; for a method that
    encodes directions, its all-zero rows left out (``ValueError`` when every row is)."""
    require_queries(learner)
    if isinstance(queries, (np.ndarray, torch.Tensor)) and queries.ndim == 2 and queries.shape[1] != dim:
        raise ValueError(f"queries have dimension {queries.shape[1]}, but the embeddings being fitted have {dim}; "
                         "pass a sample of real queries embedded by the same model")
    sample = as_matrix(queries, name="queries", dim=dim)
    if learner.normalizes_rows:
        zero = zero_rows(sample)
        if bool(zero.all()):
            raise all_zero_error("queries", len(sample), learner.name)
        sample = sample[~zero]
    return sample


def check_pairs(learner: Learner, pairs: Any, dim: int,
                spec: InputSpec | None = None) -> tuple[tuple[torch.Tensor, torch.Tensor], int | None]:
    """The validated (anchors, positives), and for a method that encodes directions how many pairs with an
    all-zero anchor or positive were left out (None for other methods: they keep every pair)."""
    require_fit_input(learner, "pairs")
    if not isinstance(pairs, (tuple, list)) or len(pairs) != 2:
        raise TypeError("pairs must be a tuple (anchors, positives) of two (m, d) arrays")
    spec = spec or InputSpec()

    def read(x: Any, name: str) -> torch.Tensor:
        given = spec.read(x, name=name, dim=dim)
        rows = x if given is None else torch.from_numpy(given.to_float())
        return as_matrix(rows, name=name, dim=dim)

    anchors, positives = read(pairs[0], "pair anchors"), read(pairs[1], "pair positives")
    if anchors.shape != positives.shape:
        raise ValueError(f"pair anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} differ in shape")
    if not learner.normalizes_rows:
        return (anchors, positives), None
    zero = zero_rows(anchors) | zero_rows(positives)
    if bool(zero.all()):
        raise ValueError(f"pairs: every one of the {len(zero):,} pairs has an all-zero anchor or positive, so none "
                         f"can be learned from: {learner.name} encodes each row's direction and a zero row has none")
    if bool(zero.any()):
        anchors, positives = anchors[~zero], positives[~zero]
    return (anchors, positives), int(zero.sum())


def report_zero_rows(learner: Learner, skipped: int, rows: int, pairs_skipped: int | None, pairs: int | None) -> None:
    """Record the all-zero rows (and pairs) a direction method left out in ``fit_report``; warn once."""
    if not learner.normalizes_rows:
        return
    report: dict[str, Any] = {"zero_rows_skipped": skipped}
    if pairs_skipped is not None:
        report["zero_pairs_skipped"] = pairs_skipped
    learner.fit_report = {**(learner.fit_report or {}), **report}
    if not skipped and not pairs_skipped:
        return
    parts = []
    if skipped:
        parts.append(f"{skipped:,} of {rows:,} rows are all zero")
    if pairs_skipped:
        parts.append(f"{pairs_skipped:,} of {pairs:,} pairs have an all-zero query or document")
    name = learner.name
    warnings.warn(
        f"{name}: {' and '.join(parts)}; they were left out of the fit ({name} encodes each row's "
        "direction and a zero row has none; such a row still encodes, to the empty code). Counted in "
        "fit_report['zero_rows_skipped']" + (" and ['zero_pairs_skipped']" if pairs_skipped is not None else ""),
        ZeroRowsWarning, stacklevel=caller_outside_adaptemb())


def caller_outside_adaptemb() -> int:
    """The ``stacklevel`` that points a warning issued here at the first caller outside the adaptemb package."""
    package = Path(__file__).parent
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and Path(frame.f_code.co_filename).is_relative_to(package):
        frame, level = frame.f_back, level + 1
    return level
