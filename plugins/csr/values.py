"""How csr stores its code values, and which (k, value bits) fills a byte budget: measured once, at fit.

After training, ``fit_value_tables`` encodes a sample of the training rows at every k of ``CHOICE_K`` and fits,
for each k, a per-feature codebook of 2, 4, 8 and 16 levels (1-4 bit values: a 1-D k-means of the feature's
values among the top-k) and a per-feature range (8-bit values: 256 even steps). It then scores a held-out slice
of the fit rows, as queries, against the sample's packed codes at every (k, b) and keeps the recall@10 of the
exact float neighbours: the choice table.

A code is named by its k alone (``encode(x, k=...)``), so each k keeps one value width (``ValueTables.bits_by_k``):
the byte budgets are walked from the smallest up, each takes its pick among the codes that fit it and whose k is
still free or already holds that width (``pick``: the most latents within ``VALUE_BITS_MARGIN`` of the best
recall), and the pick fixes its k's width. ``encode(x, bytes=B)`` then takes the pick among the codes that fit B
at their k's width (``ValueTables.budget_for_bytes``).

Everything is saved with the model: ``codebooks`` (K, h, 32) float16 (the 2 + 4 + 8 + 16 codebook entries and
the 8-bit range of each k of the grid) and ``choices`` (m, 4) float32 rows (k, value bits, bytes, recall).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from adaptemb import PackedSparseCodes

CHOICE_K = (*range(1, 33), 36, 40, 48, 56, 64, 80, 96, 128)
"""The k at which codebooks are fitted and the choice measured (a k between two uses the lower one's codebook):
every k up to 32, so that each byte budget up to ~40 B has a code that fills it (with Elias-Fano indices one more
latent costs about a byte)."""
CODEBOOK_BITS = (1, 2, 3, 4)
"""Value bits with a fitted per-feature codebook; 8 bits use the feature's range, 16 bits float16 values."""
MEASURED_BITS = (1, 2, 3, 4)
"""The value widths the choice table measures: a byte budget never took 8-bit or float16 values in the choice
tables of the built-in data and the 768-d stand-in (k up to 128: 1-4 bits, one more latent always worth more), so
measuring them only took a third of the table's time; codes at 8 or 16 bits are still encoded on request."""
RANGE_COLUMNS = slice(30, 32)
CODEBOOK_COLUMNS = {1: slice(0, 2), 2: slice(2, 6), 3: slice(6, 14), 4: slice(14, 30)}
RECALL_TOLERANCE = 0.005
"""A k no budget picks keeps the fewest value bits whose held-out recall@10 is within this of its best (sampling
noise ~0.005)."""
VALUE_BITS_MARGIN = 0.01
"""A budget takes a code with fewer latents (and more bits per value) only where it recalls this much more of the
held-out slice: on the built-in data and the 768-d stand-in, real queries gained nothing from more value bits at a
fixed k (1 bit was best or within 0.003 NDCG@10 at every k to 48) while this proxy credited 2-3 bits with
+0.004-0.015 recall@10 (benchmarks/csr_value_bits.py, docs/methods/csr.md)."""
LLOYD_ITERATIONS = 8


def fit_codebook(values: np.ndarray, features: np.ndarray, dim: int, levels: int) -> np.ndarray:
    """Per-feature 1-D k-means (Lloyd, quantile start) of the positive ``values`` of ``features``: (dim, levels)
    float32, rows ascending; a feature seen fewer than ``levels`` times takes the codebook of all values pooled."""
    return SortedValues(values, features, dim).codebook(levels)


class SortedValues:
    """The positive values of each feature sorted once (``fit_codebook``'s work for every level count): an
    iteration of Lloyd cuts every feature's run at its midpoints (``searchsorted``) and sums the cells from prefix
    sums, O(dim * levels * log n), not O(n * levels)."""

    def __init__(self, values: np.ndarray, features: np.ndarray, dim: int) -> None:
        keep = values > 0
        v, f = values[keep].astype(np.float64), features[keep].astype(np.int64)
        order = np.lexsort((v, f))
        self.v, self.f, self.dim = v[order], f[order], dim
        self.counts = np.bincount(self.f, minlength=dim)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.span = 2.0 * (self.v.max() - self.v.min() + 1.0) if len(v) else 1.0  # f * span + v ascend over the run
        self.keys, self.prefix = self.f * self.span + self.v, np.concatenate([[0.0], np.cumsum(self.v)])

    def codebook(self, levels: int) -> np.ndarray:
        """(dim, levels) float32: each feature's Lloyd codebook, rows ascending (see ``fit_codebook``)."""
        v, dim, counts, starts = self.v, self.dim, self.counts, self.starts
        if not len(v):
            return np.tile(np.linspace(0.0, 1.0, levels, dtype=np.float32), (dim, 1))
        position = np.floor((np.arange(levels) + 0.5) / levels * np.maximum(counts, 1)[:, None]).astype(np.int64)
        books = v[np.minimum(starts[:-1, None] + position, len(v) - 1)]
        for _ in range(LLOYD_ITERATIONS):
            midpoints = (books[:, 1:] + books[:, :-1]) / 2  # a value equal to a midpoint takes the lower level
            cuts = np.searchsorted(self.keys, np.arange(dim)[:, None] * self.span + midpoints, side="right")
            edges = np.concatenate([starts[:-1, None], cuts, starts[1:, None]], axis=1)
            sizes = np.diff(edges, axis=1)
            books = np.where(sizes > 0, (self.prefix[edges[:, 1:]] - self.prefix[edges[:, :-1]]) / np.maximum(sizes, 1),
                             books)
        scarce = counts < levels
        if dim > 1 and scarce.any():
            books[scarce] = self._pooled.codebook(levels)[0]
        return np.sort(books, axis=1).astype(np.float32)

    @cached_property
    def _pooled(self) -> SortedValues:
        """Every value as one feature's (the codebook of features seen too rarely), sorted once for every width."""
        return SortedValues(self.v, np.zeros(len(self.v), np.int64), 1)


def range_codebook(values: np.ndarray, features: np.ndarray, dim: int) -> np.ndarray:
    """(dim, 2) float32: each feature's smallest and largest positive value (all values pooled where it has none)."""
    keep = values > 0
    v, f = values[keep], features[keep]
    low, high = np.full(dim, np.inf), np.full(dim, -np.inf)
    np.minimum.at(low, f, v)
    np.maximum.at(high, f, v)
    missing = ~np.isfinite(low)
    low[missing] = v.min() if len(v) else 0.0
    high[missing] = v.max() if len(v) else 1.0
    return np.stack([low, high], axis=1).astype(np.float32)


def expand_range(bounds: np.ndarray) -> np.ndarray:
    """The 256-level codebook of per-feature (low, high) ``bounds``: even steps from low to high."""
    steps = np.linspace(0.0, 1.0, 256, dtype=np.float32)
    low, high = bounds[:, :1].astype(np.float32), bounds[:, 1:].astype(np.float32)
    return (low + (high - low) * steps).astype(np.float16)


def codebook_of(row: np.ndarray, value_bits: int) -> np.ndarray | None:
    """The float16 (h, 2**b) codebook of ``value_bits`` in one k's (h, 32) ``codebooks`` row (None for float16), in
    the form codes files store (``PackedSparseCodes.storable_codebook``): what the fit measures, encode quantises
    to and scores use."""
    if value_bits == 16:
        return None
    book = expand_range(row[:, RANGE_COLUMNS]) if value_bits == 8 else row[:, CODEBOOK_COLUMNS[value_bits]]
    return PackedSparseCodes.storable_codebook(book, value_bits)


@dataclass(frozen=True)
class ValueTables:
    """The per-k codebooks and the measured choice table (see the module docstring)."""

    codebooks: torch.Tensor  # (K, h, 32) float16
    choices: torch.Tensor  # (m, 4) float32: k, value bits, bytes per vector, held-out recall@10
    trained_k: int = 0
    """The k the model was trained for (0: unknown): ``pick`` prefers more latents only up to it."""

    @property
    def ks(self) -> np.ndarray:
        """The grid of k with codebooks, ascending."""
        return np.unique(self.choices[:, 0].numpy().astype(np.int64))

    def codebook(self, k: int, value_bits: int) -> np.ndarray | None:
        """The float16 (h, 2**b) codebook for codes of k values at ``value_bits`` (None for float16 values)."""
        return codebook_of(self.codebooks[int(np.searchsorted(self.ks, k, side="right")) - 1].numpy(), value_bits)

    def value_bits(self, k: int) -> int:
        """The value bits of codes at k (the grid's k at or below it): see ``bits_by_k``."""
        return self.bits_by_k[int(self.ks[int(np.searchsorted(self.ks, k, side="right")) - 1])]

    @cached_property
    def sized(self) -> np.ndarray:
        """The choice table (m, 4) with each code's bytes as this release packs it (``PackedSparseCodes.row_bytes``
        over the codebooks' h): a file fitted before a smaller packing (Elias-Fano indices) fills its budgets with
        the k that now fit, each with its measured recall."""
        rows = self.choices.numpy().astype(np.float64)
        hidden = int(self.codebooks.shape[1])
        rows[:, 2] = [PackedSparseCodes.row_bytes(int(k), hidden, int(b)) for k, b in rows[:, :2]]
        return rows

    @cached_property
    def bits_by_k(self) -> dict[int, int]:
        """Per grid k, its one value width: the byte budgets, smallest first, each fix the width of their ``pick``
        among the codes that fit and whose k is free or holds that width; a k no budget picks keeps the fewest bits
        within ``RECALL_TOLERANCE`` of its best."""
        rows = self.sized
        bits: dict[int, int] = {}
        for nbytes in range(int(rows[:, 2].min()), int(rows[:, 2].max()) + 1):
            open_rows = [row for row in rows if row[2] <= nbytes and bits.get(int(row[0]), int(row[1])) == int(row[1])]
            k, b = pick(open_rows, self.trained_k)[:2]
            bits.setdefault(int(k), int(b))
        for k in self.ks:
            if int(k) not in bits:
                own = rows[rows[:, 0] == k]
                bits[int(k)] = int(own[own[:, 3] >= own[:, 3].max() - RECALL_TOLERANCE, 1].min())
        return bits

    def budget_for_bytes(self, nbytes: float, keep: Callable[[int], bool] | None = None) -> int | None:
        """The grid k of the ``pick`` among the codes (at their k's ``value_bits``) that fit ``nbytes``, among the k
        that ``keep`` accepts (default: all); None if none fits."""
        rows = self._within(nbytes, keep)
        return None if not rows else int(pick(rows, self.trained_k)[0])

    def recall_within(self, nbytes: float, keep: Callable[[int], bool] | None = None) -> float:
        """The held-out recall@10 of the code ``budget_for_bytes`` picks (among the k ``keep`` accepts); -1 if none."""
        rows = self._within(nbytes, keep)
        return -1.0 if not rows else float(pick(rows, self.trained_k)[3])

    def _within(self, nbytes: float, keep: Callable[[int], bool] | None) -> list[list[float]]:
        return [row for row in self.sized.tolist() if row[1] == self.bits_by_k[int(row[0])] and row[2] <= nbytes
                and (keep is None or keep(int(row[0])))]

    def rows(self) -> list[dict[str, float]]:
        """The choice table as rows (k, value_bits, bytes, recall@10, chosen: the k's own value bits)."""
        return [{"k": int(k), "value_bits": int(b), "bytes": int(n), "recall@10": round(float(r), 4),
                 "chosen": int(b) == self.value_bits(int(k))} for k, b, n, r in self.sized.tolist()]


def pick(rows: Sequence[Sequence[float]], trained_k: int = 0) -> Sequence[float]:
    """The code a byte budget takes among ``rows`` (k, value bits, bytes, recall) that fit it: the most latents, up to
    ``trained_k`` (0: no limit), whose recall is within ``VALUE_BITS_MARGIN`` of the best, the better recall (then
    fewer bits) on a tie; the best recall where no code up to ``trained_k`` is that close. Above the trained k real
    queries lose with more latents (768-d stand-in, 1 bit: 0.191 NDCG@10 at k = 28, 0.183 at 48) while the held-out
    recall still rises, so the preference stops there."""
    best = max(row[3] for row in rows)
    near = [row for row in rows if row[3] >= best - VALUE_BITS_MARGIN and (not trained_k or row[0] <= trained_k)]
    if not near:
        return max(rows, key=lambda row: (row[3], -row[1]))
    return max(near, key=lambda row: (row[0], row[3], -row[1]))


def fit_value_tables(slots: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]],
                     project: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                     as_scored: Callable[[torch.Tensor], torch.Tensor], docs: torch.Tensor, queries: torch.Tensor,
                     hidden: int) -> ValueTables:
    """Codebooks from ``docs`` (training rows) and the choice table measured with the held-out ``queries``:
    ``slots(rows, k)`` gives (values, indices) of the top-k, ``project(rows)`` the asymmetric query (values, offset)
    of rows ``as_scored`` (e.g. unit rows), which also give the exact float neighbours."""
    ks = [k for k in CHOICE_K if k <= hidden]
    values, indices = (t.numpy() for t in slots(docs, ks[-1]))
    queries = as_scored(queries)
    truth = torch.topk(queries @ as_scored(docs).T, min(10, len(docs)), dim=1).indices.numpy()
    weights, offset = (t.numpy() for t in project(queries))
    weights = torch.from_numpy(np.ascontiguousarray(weights.T))  # (h, queries): the rows embedding_bag sums
    books, table = [], []
    for k in ks:
        row = np.zeros((hidden, 32), np.float32)
        v, f = values[:, :k], indices[:, :k]
        sorted_values = SortedValues(v.ravel(), f.ravel(), hidden)  # sorted once for the four widths
        for bits in CODEBOOK_BITS:
            row[:, CODEBOOK_COLUMNS[bits]] = sorted_values.codebook(2**bits)
        row[:, RANGE_COLUMNS] = range_codebook(v.ravel(), f.ravel(), hidden)
        books.append(row.astype(np.float16))
        slots = torch.from_numpy(np.ascontiguousarray(f))
        for bits in MEASURED_BITS:
            stored = _stored_values(v, f, bits, codebook_of(books[-1], bits))
            table.append([k, bits, PackedSparseCodes.row_bytes(k, hidden, bits), _recall(weights, offset, slots, stored, truth)])
    return ValueTables(torch.from_numpy(np.stack(books)), torch.tensor(table, dtype=torch.float32))


def _stored_values(values: np.ndarray, indices: np.ndarray, bits: int, codebook: np.ndarray | None) -> np.ndarray:
    """The values packed codes of ``bits`` store for these slots: the nearest entry of the feature's codebook (a
    value on a float32 midpoint takes the lower), as ``PackedSparseCodes.packer`` quantises, found by one
    ``searchsorted`` over every feature's midpoints (keys ``feature * span + value``)."""
    if codebook is None:
        return values.astype(np.float16).astype(np.float32)
    entries = codebook.astype(np.float32)
    midpoints = ((entries[:, 1:] + entries[:, :-1]) / 2).astype(np.float64)
    span = 2.0 * (max(float(np.abs(entries).max()), float(np.abs(values).max())) + 1.0)
    features = np.arange(len(entries))[:, None]
    below = np.searchsorted((features * span + midpoints).ravel(), indices * span + values.astype(np.float64), side="left")
    levels = below - indices * midpoints.shape[1]
    return np.where(values == 0, 0.0, entries[indices, levels]).astype(np.float32)


def _recall(weights: torch.Tensor, offset: np.ndarray, slots: torch.Tensor, stored: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each query's exact top-10 among its top-10 by ``<weights, doc> + offset``, each document its
    ``slots`` (features) holding ``stored`` values; ``weights`` are the queries' (h, queries). One ``embedding_bag``
    sums each document's slots' weight rows (1.6x faster than scipy's sparse product and its transposed copy)."""
    docs = torch.nn.functional.embedding_bag(slots, weights, per_sample_weights=torch.from_numpy(stored), mode="sum")
    scores = docs.T.contiguous() + torch.from_numpy(offset)[:, None]  # (queries, docs): top-k along contiguous rows
    found = torch.topk(scores, truth.shape[1], dim=1).indices.numpy()
    return float((found[:, :, None] == truth[:, None, :]).any(axis=2).mean())
