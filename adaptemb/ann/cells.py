"""Coarse cells: where a code is stored and which cells a query probes.

Routing happens in the query codes' own space, so it serves raw query embeddings and query codes alike: a query is
the dense form of its query code (``ProjectedQueries.values``, a ``DenseCodes`` row), a document the dense form of
its code (a packed sparse code's dequantised values, a sign code's ±1 vector), and a query's score is their inner
product (plus a per-query constant). Both are mapped by one ``basis`` (qdim, r), the top principal directions of
sample queries (the directions queries vary in, so ``<basis.T q, basis.T z>`` keeps ``<q, z>`` where queries
live), and compared with unit centroids (spherical k-means over the documents' mapped rows, faiss). Every document
belongs to the cell of its nearest centroid; a query probes the cells of its ``nprobe`` nearest centroids.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import faiss
import numpy as np
import scipy.linalg
import scipy.sparse as sp
import torch

from adaptemb.codes import Codes
from adaptemb.threads import compute_threads

BLOCK_ROWS = 4096
"""Documents mapped (and assigned) at a time: bounds the (rows, r) float32 temporaries (4 MiB at r = 256). A
row's mapping and cell do not depend on the rows mapped beside it (a cell's float64 sum only up to rounding)."""
Vectors = Callable[[Codes], "np.ndarray | sp.csr_matrix"]
"""Codes -> their rows in the query codes' space (dense or CSR)."""
ROUTE_BLOCK = 4096
"""Queries routed with one matrix product (bounds the (queries, cells) scores)."""
ASSIGN_PROBES = 8
"""Coarse groups of centroids searched when assigning a document (faiss ``IndexIVFFlat`` over the centroids)."""


def dense_rows(codes: Codes) -> np.ndarray | sp.csr_matrix:
    """The rows of ``codes`` as vectors of their code space: a CSR matrix for sparse kinds, else ``to_dense()``."""
    to_csr = getattr(codes, "to_csr", None)
    return to_csr() if callable(to_csr) else np.asarray(codes.to_dense(), dtype=np.float32)


def routing_basis(blocks: Iterable[np.ndarray], rows: int, dims: int, seed: int = 0) -> np.ndarray | None:
    """(qdim, r) orthonormal columns: the ``dims`` strongest directions (uncentred) of ``rows`` sample query rows
    given a block at a time (``blocks``: (m, qdim) each); None when the queries have at most ``dims`` dimensions
    (they are used as they are). Where the queries have at most half as many dimensions as there are rows, the top
    eigenvectors of their Gram matrix (qdim, qdim), summed a block at a time, so that the rows are never held
    together; else the rows stacked, by a randomised SVD (``torch.svd_lowrank``: a range finder with power
    iterations, Halko et al. 2011). Each column's largest entry is positive."""
    blocks = iter(blocks)
    first = next(blocks)
    qdim = first.shape[1]
    if qdim <= dims:
        return None
    if 2 * qdim <= rows:  # the float64 Gram matrix takes no more than the float32 rows
        gram = np.zeros((qdim, qdim), np.float64)
        for block in itertools.chain([first], blocks):
            part = np.asarray(block, dtype=np.float64)
            gram += part.T @ part
        _, vectors = scipy.linalg.eigh(gram, subset_by_index=(qdim - dims, qdim - 1), overwrite_a=True,
                                       check_finite=False, driver="evr")  # the top ``dims`` only (LAPACK dsyevr)
        return _signed(vectors[:, ::-1])
    sample = np.concatenate([first, *blocks]).astype(np.float32, copy=False)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        _, _, right = torch.svd_lowrank(torch.from_numpy(np.ascontiguousarray(sample)), q=min(dims + 8, *sample.shape),
                                        niter=2)
    return _signed(right[:, :dims].numpy())


def _signed(columns: np.ndarray) -> np.ndarray:
    """``columns`` as float32, each flipped so that its entry of largest magnitude is positive."""
    largest = columns[np.argmax(np.abs(columns), axis=0), np.arange(columns.shape[1])]
    return np.ascontiguousarray(columns * np.where(largest < 0, -1.0, 1.0), dtype=np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero), in place; returns ``x``."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    return x


@dataclass(frozen=True)
class Router:
    """The routing space (``basis``) and the ``centroids`` (cells, r) of the cells: each cell's mean row (as mapped,
    not scaled to unit length). A query probes the cells of largest ``<query, centroid>``; a document belongs to the
    cell of the nearest centroid in direction (cosine)."""

    basis: np.ndarray | None
    centroids: np.ndarray

    @property
    def cells(self) -> int:
        return self.centroids.shape[0]

    @property
    def dims(self) -> int:
        return self.centroids.shape[1]

    def map(self, rows: np.ndarray | sp.csr_matrix, *, scaled: bool = True) -> np.ndarray:
        """Code-space rows (n, qdim), dense or CSR, as rows of the routing space (n, r), float32: unit rows, or as
        mapped with ``scaled=False``."""
        mapped = rows if self.basis is None else rows @ self.basis
        if sp.issparse(mapped):
            mapped = mapped.toarray()
        elif mapped is rows:  # the caller's own rows (no basis): copied before ``unit`` scales them in place
            mapped = np.array(mapped, dtype=np.float32)
        mapped = np.ascontiguousarray(mapped, dtype=np.float32)  # a fresh product is used as it is
        return unit(mapped) if scaled else mapped

    def map_codes(self, codes: Codes, vectors: Vectors = dense_rows) -> np.ndarray:
        """``map`` of the ``vectors`` of every row of ``codes``, ``BLOCK_ROWS`` at a time."""
        out = np.empty((len(codes), self.dims), np.float32)
        for start in range(0, len(codes), BLOCK_ROWS):
            out[start : start + BLOCK_ROWS] = self.map(vectors(codes[start : start + BLOCK_ROWS]))
        return out

    def cell_sums(self, codes: Codes, cells: np.ndarray, vectors: Vectors = dense_rows) -> tuple[np.ndarray, np.ndarray]:
        """(the sum of the mapped rows (not scaled) in each cell, float64 (cells, r); the rows in each cell) over
        ``codes`` in cells ``cells``: sums over parts of the rows add up (``with_means``)."""
        sums = np.zeros((self.cells, self.dims), np.float64)
        for start in range(0, len(codes), BLOCK_ROWS):
            block = self.map(vectors(codes[start : start + BLOCK_ROWS]), scaled=False)
            members = cells[start : start + BLOCK_ROWS]
            sums += sp.csr_matrix((np.ones(len(members)), (members, np.arange(len(members)))),
                                  shape=(self.cells, len(members))) @ block
        return sums, np.bincount(cells, minlength=self.cells)

    def with_means(self, sums: np.ndarray, counts: np.ndarray) -> Router:
        """This router with each cell's mean mapped row as its centroid (rounded to float16 as stored): a query's inner
        product with them ranks cells by the scores of their documents (cosines to unit centroids would ignore that
        the documents' lengths differ). An empty cell keeps its current centroid."""
        means = sums / np.maximum(counts, 1)[:, None]
        means = np.where(counts[:, None] > 0, means, self.centroids).astype(np.float32)
        return Router(self.basis, means.astype(np.float16).astype(np.float32))

    def route(self, queries: np.ndarray, nprobe: int) -> np.ndarray:
        """The cells of each query's ``nprobe`` nearest centroids (``queries``: code-space rows), int32 (nq, nprobe):
        in no particular order, or, when every cell is asked for, nearest first. A block of queries is mapped (not
        scaled: a query's length does not change the order of its cells) and scored with matrix products and its
        best cells taken by a partial sort (torch's top-k, faster than numpy's argpartition and than faiss' flat
        search with its heaps), in one torch thread: a block's work is bounded (``ROUTE_BLOCK`` queries), and two
        threads on a shared machine wait for a busy core at every op (see ``adaptemb.threads.small_batch_threads``)."""
        nprobe = min(int(nprobe), self.cells)
        out = np.empty((len(queries), nprobe), np.int32)
        basis = None if self.basis is None else torch.from_numpy(self.basis)
        centroids = torch.from_numpy(self.centroids).T
        with torch.inference_mode(), compute_threads(1):
            for start in range(0, len(queries), ROUTE_BLOCK):
                block = torch.from_numpy(np.ascontiguousarray(queries[start : start + ROUTE_BLOCK], dtype=np.float32))
                scores = (block if basis is None else block @ basis) @ centroids
                if nprobe == self.cells:
                    out[start : start + len(block)] = np.argsort(-scores.numpy(), axis=1, kind="stable")
                else:
                    out[start : start + len(block)] = torch.topk(scores, nprobe, dim=1, sorted=False).indices.numpy()
        return out

    def assign(self, codes: Codes, vectors: Vectors = dense_rows) -> np.ndarray:
        """The cell of each row of ``codes`` (its nearest centroid, searched among the centroids of the
        ``ASSIGN_PROBES`` nearest coarse groups): int32 (n,)."""
        search = self._assigner()
        out = np.empty(len(codes), np.int32)
        for start in range(0, len(codes), BLOCK_ROWS):
            _, found = search.search(self.map(vectors(codes[start : start + BLOCK_ROWS])), 1)
            out[start : start + BLOCK_ROWS] = found[:, 0]
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the stored centroids and basis (float16)."""
        return 2 * (self.centroids.size + (0 if self.basis is None else self.basis.size))

    def _assigner(self) -> faiss.Index:
        centroids = unit(np.array(self.centroids, dtype=np.float32))
        groups = int(np.sqrt(self.cells))
        if groups < 4 * ASSIGN_PROBES:
            flat = faiss.IndexFlatIP(self.dims)
            flat.add(centroids)
            return flat
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(self.dims), self.dims, groups, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.seed = 0
        ivf.cp.min_points_per_centroid = 1  # sqrt(cells) groups of the cells' centroids: few points by design
        ivf.train(centroids)
        ivf.add(centroids)
        ivf.nprobe = ASSIGN_PROBES
        return ivf


COARSE_POINTS = 256
"""Rows per coarse cluster the coarse level of ``train_centroids`` trains on (faiss' own cap,
``max_points_per_centroid``: the rows beyond it would not be used)."""


def train_centroids(rows: Callable[[np.ndarray], np.ndarray], n: int, cells: int, *, seed: int = 0,
                    iterations: int = 10) -> np.ndarray:
    """Unit centroids (cells, r) of ``n`` unit sample rows, read as ``rows(ids)`` (the mapped rows ``ids``, ascending):
    spherical k-means (faiss ``Kmeans``) in two levels, about sqrt(cells) coarse clusters, each split into a share of
    the cells in proportion to its rows (as faiss' contrib ``two_level_clustering`` does, here with ``iterations`` at
    both levels). The sample is never read whole (an index build holds it as codes): the coarse level trains on a
    seeded ``COARSE_POINTS`` rows per cluster, the rows are assigned to the coarse clusters ``BLOCK_ROWS`` at a time,
    and each fine k-means reads its cluster's rows."""
    if cells > n:
        raise ValueError(f"cannot train {cells} cells on {n} sample rows; use at most {n} cells")
    if cells < 64:
        return _kmeans(_float32(rows(np.arange(n))), cells, seed, iterations)
    groups = int(np.sqrt(cells))
    picked = np.arange(n) if n <= groups * COARSE_POINTS else np.sort(
        np.random.default_rng(seed).choice(n, groups * COARSE_POINTS, replace=False))
    coarse = _kmeans(_float32(rows(picked)), groups, seed, iterations)
    flat = faiss.IndexFlatIP(coarse.shape[1])
    flat.add(coarse)
    group = np.concatenate([flat.search(_float32(rows(np.arange(start, min(start + BLOCK_ROWS, n)))), 1)[1][:, 0]
                            for start in range(0, n, BLOCK_ROWS)])
    shares = _shares(np.bincount(group, minlength=len(coarse)), cells)
    parts = [_kmeans(_float32(rows(np.flatnonzero(group == g))), int(share), seed + g, iterations)
             for g, share in enumerate(shares) if share]
    return unit(np.concatenate(parts))


def _float32(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows, dtype=np.float32)


def _kmeans(rows: np.ndarray, k: int, seed: int, iterations: int) -> np.ndarray:
    """``k`` unit centroids of ``rows`` (spherical faiss k-means; the rows themselves when there are at most k)."""
    if k >= len(rows):
        return unit(rows[:k].copy())
    kmeans = faiss.Kmeans(rows.shape[1], k, niter=iterations, seed=seed, spherical=True, min_points_per_centroid=1,
                          max_points_per_centroid=256)
    kmeans.train(rows)
    return unit(kmeans.centroids.copy())


def _shares(sizes: np.ndarray, total: int) -> np.ndarray:
    """``total`` split in proportion to ``sizes`` (largest remainders), no share above its size."""
    exact = sizes * total / sizes.sum()
    shares = np.minimum(np.floor(exact).astype(np.int64), sizes)
    for g in np.argsort(-(exact - shares), kind="stable"):
        if shares.sum() >= total:
            break
        if shares[g] < sizes[g]:
            shares[g] += 1
    while shares.sum() < total:  # rounding left cells over: give them to groups with rows to spare
        spare = np.flatnonzero(shares < sizes)
        shares[spare[: total - shares.sum()]] += 1
    return shares


@dataclass(frozen=True)
class CellLayout:
    """Documents in cell order: cell ``c`` holds rows ``offsets[c]:offsets[c + 1]`` of the stored codes, and
    stored row ``i`` is the caller's document ``ids[i]``."""

    offsets: np.ndarray  # (cells + 1,) int64
    ids: np.ndarray  # (n,) int32 where ids fit, else int64

    @classmethod
    def of(cls, assignment: np.ndarray, cells: int, ids: np.ndarray | None = None) -> tuple[CellLayout, np.ndarray]:
        """The layout of documents assigned to ``assignment`` cells (their ids ``ids``, default 0..n-1), and the
        order that puts the codes in cell order (ascending id within a cell)."""
        ids = np.arange(len(assignment), dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
        order = np.lexsort((ids, assignment))
        counts = np.bincount(assignment, minlength=cells)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(offsets, id_array(ids[order])), order

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)


def id_array(ids: np.ndarray) -> np.ndarray:
    """``ids`` as int32 when every id fits, else int64."""
    fits = not len(ids) or (int(ids.min()) >= 0 and int(ids.max()) < 2**31)
    return np.ascontiguousarray(ids, dtype=np.int32 if fits else np.int64)
