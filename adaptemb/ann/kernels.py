"""What the compiled cell scanners share: compiling a generated kernel, the running top-k they offer documents to,
and merging the workers' lists into each query's answer.

A scan keeps, per worker and per query, the ``k`` best (score, stored position) pairs seen so far (``best_s``,
``best_p``; an empty entry has position -1 and score -inf) and the entry a better document displaces next
(``worst``: the lowest score, then the highest caller id, so that ties go to the lower id as in the exact index).
A kernel compares a score with the query's threshold (``best_s[q, worst[q]]``) and calls ``offer`` only when it
reaches it, which is rare once the lists fill.

numba is used (as in ``adaptemb.index.postings``) because the scan, the decoding of the packed rows and the top-k
must run in one pass over cache-resident data; the kernels' bodies are generated for one code layout (bit offsets
and widths become constants) and query group width, and compiled once per layout (then cached on disk by numba).
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

import numpy as np

from adaptemb.ranking import TopK

_COMPILED: dict[str, Any] = {}
_LOCK = threading.Lock()

OFFER_SOURCE = '''
def later(a, b, ids):
    """Whether stored position a ranks after b at equal score: an empty entry (-1) after any document, else the
    higher caller id."""
    if a < 0:
        return b >= 0
    return b >= 0 and ids[np.uint64(a)] > ids[np.uint64(b)]


def offer(best_s, best_p, worst, ids, q, s, pos):
    """Put stored position pos (score s, at least the threshold) into query q's list unless it ties the weakest
    entry with a higher id; returns the new threshold. Inlined into the kernels (a call passing the arrays cost
    about 4 % of a csr scan)."""
    w = worst[q]
    if s == best_s[q, w] and not later(best_p[q, w], pos, ids):
        return best_s[q, w]
    best_s[q, w] = s
    best_p[q, w] = pos
    lo = 0
    for u in range(1, best_s.shape[1]):
        if best_s[q, u] < best_s[q, lo] or (best_s[q, u] == best_s[q, lo] and later(best_p[q, u], best_p[q, lo], ids)):
            lo = u
    worst[q] = lo
    return best_s[q, lo]
'''


def compile_kernel(source: str, name: str, filename: str) -> Any:
    """The numba kernel ``name`` defined by the generated ``source`` (which may call ``offer``), compiled with SLP
    vectorisation and FMA contraction on first call and cached on disk (keyed by ``filename`` and a checksum of the
    source carried in the kernel's name)."""
    tagged = f"{name}_{zlib.crc32((OFFER_SOURCE + source).encode()):08x}"
    with _LOCK:
        if tagged not in _COMPILED:
            import numba
            from numba.cpython.unsafe.numbers import leading_zeros

            namespace: dict[str, Any] = {"np": np, "numba": numba, "leading_zeros": leading_zeros, "__name__": __name__}
            text = OFFER_SOURCE + source.replace(f"def {name}(", f"def {tagged}(")
            exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - our own template
            for helper in ("later", "offer"):
                namespace[helper] = numba.njit(inline="always")(namespace[helper])
            _COMPILED[tagged] = _SlpKernel(numba.njit(parallel=True, cache=True, fastmath={"contract"})(namespace[tagged]))
        return _COMPILED[tagged]


class _SlpKernel:
    """A numba dispatcher whose compilations (on the first call with new argument types) run with LLVM's SLP
    vectoriser on: numba keeps it off by default, and the generated accumulators rely on it."""

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher

    def __call__(self, *args: Any) -> Any:
        from numba.core import config
        from numba.core.compiler_lock import global_compiler_lock

        with global_compiler_lock:
            saved, config.SLP_VECTORIZE = config.SLP_VECTORIZE, 1
            try:
                self.dispatcher.compile(tuple(self.dispatcher.typeof_pyval(a) for a in args))
            finally:
                config.SLP_VECTORIZE = saved
        return self.dispatcher(*args)


def empty_lists(parts: int, queries: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The workers' running lists, all empty: scores (parts, queries, k) -inf and positions -1."""
    return np.full((parts, queries, k), -np.inf, np.float32), np.full((parts, queries, k), -1, np.int64)


def merge_lists(best_s: np.ndarray, best_p: np.ndarray, ids: np.ndarray, k: int) -> TopK:
    """Each query's ``k`` best of the workers' lists (parts, queries, width) as (scores, caller ids), score
    descending then id ascending; an empty entry is (-inf, -1) and sorts last."""
    scores = np.concatenate(list(best_s), axis=1)
    positions = np.concatenate(list(best_p), axis=1)
    found = positions >= 0
    caller = np.where(found, np.asarray(ids)[np.maximum(positions, 0)], -1).astype(np.int64)
    order = np.lexsort((np.where(found, caller, np.iinfo(np.int64).max), -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(caller, order, axis=1)
