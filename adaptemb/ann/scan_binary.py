"""The cell scanner of sign codes searched with dense float queries (``dense`` → ``binary``: svd+binary, the
compositions ending in 1-bit codes).

A document stands for a ±1 vector and its score is ``<q, ±1>``. Each byte of a packed row holds two nibbles of 4
sign bits, so a query's score is the sum of 2 x bytes lookups in its nibble table ``table[p, v]``: the sum of
``±q`` over the 4 dimensions of nibble ``p`` for the bit pattern ``v`` (most significant bit first, as
``np.packbits`` packs; padding bits meet zero query values). A task is one probed cell and the queries that probe
it: the cell's nibbles are read once into table offsets, then for each group of ``GROUP`` queries their tables are
interleaved into one block (nibble, pattern, query), and each row is scored for the whole group at once, four
partial sums of ``GROUP`` accumulators each (vector registers, LLVM's SLP vectoriser). Scores equal
``FloatBinaryIndex``'s up to float rounding (the sums are taken in another order).
"""

from __future__ import annotations

import numpy as np

from adaptemb.ann.kernels import compile_kernel, empty_lists, merge_lists
from adaptemb.ann.plan import ProbePlan
from adaptemb.codes import BinaryCodes, DenseCodes
from adaptemb.ranking import TopK

GROUP = 16
"""Queries scored together against a row (16 float32 accumulators per partial sum)."""
PARTIALS = 4
"""Independent partial sums per row, so that the additions of one row do not wait on each other."""

_PATTERNS = (((np.arange(16)[:, None] >> np.arange(3, -1, -1)[None, :]) & 1) * 2 - 1).astype(np.float32)
"""(16, 4): the ±1 signs each nibble value stands for, most significant bit first."""

_TEMPLATE = """
def scan_binary(packed, offsets, cells, qptr, qlist, shares, tables, keep, ids, k, parts, best_s, best_p, worst,
                max_rows):
    width = packed.shape[1]
    nibbles = tables.shape[1] // 16
    width16 = tables.shape[1]
    flat = tables.reshape(-1)
    for part in numba.prange(parts):
        bs = best_s[part]
        bp = best_p[part]
        wst = worst[part]
        at = np.empty(max_rows * nibbles, np.int64)
        block = np.zeros(nibbles * 16 * GROUP, np.float32)
        thr = np.empty(GROUP, np.float32)
        lanes = np.empty(GROUP, np.float32)
        rows_of = np.zeros(GROUP, np.int64)
        base = np.zeros(GROUP, np.int64)
        pad_row = tables.shape[0] - 1
        for task in range(shares[part], shares[part + 1]):
            cell = cells[task]
            start = offsets[cell]
            rows = offsets[cell + 1] - start
            for r in range(rows):
                row = packed[np.uint64(start + r)]
                for i in range(width):
                    b = np.int64(row[np.uint64(i)])
                    at[np.uint64(r * nibbles + 2 * i)] = ((2 * i) * 16 + (b >> 4)) * GROUP
                    at[np.uint64(r * nibbles + 2 * i + 1)] = ((2 * i + 1) * 16 + (b & 15)) * GROUP
                for p in range(2 * width, nibbles):
                    at[np.uint64(r * nibbles + p)] = p * 16 * GROUP
            for g0 in range(qptr[task], qptr[task + 1], GROUP):
                members = min(GROUP, qptr[task + 1] - g0)
                for t in range(GROUP):
                    if t < members:
                        q = qlist[g0 + t]
                        rows_of[t] = q
                        thr[t] = bs[q, wst[q]]
                    else:
                        rows_of[t] = pad_row
                        thr[t] = np.inf
                for t in range(GROUP):
                    base[t] = rows_of[t] * width16
                for e in range(width16):  # lanes past the members keep stale tables: their threshold is +inf
                    for t in range(members):
                        block[np.uint64(e * GROUP + t)] = flat[np.uint64(base[t] + e)]
                for r in range(rows):
{init}
                    for p in range(0, nibbles, PARTIALS):
{accumulate}
{combine}
                    if {any_hit}:
{store}
                        for t in range(members):
                            s = lanes[t]
                            if s >= thr[t] and (len(keep) == 0 or keep[np.uint64(start + r)]):
                                thr[t] = offer(bs, bp, wst, ids, qlist[g0 + t], s, start + r)
"""


def kernel_source() -> str:
    """The scan kernel's source (one for every width: the nibble count is read from the rows)."""
    pad = " " * 20
    lanes = range(GROUP)
    parts = range(PARTIALS)
    init = "\n".join(f"{pad}a{c}_{t} = np.float32(0.0)" for c in parts for t in lanes)
    accumulate = []
    for c in parts:
        accumulate.append(f"{pad}    o{c} = np.uint64(at[np.uint64(r * nibbles + p + {c})])")
        accumulate += [f"{pad}    a{c}_{t} += block[o{c} + np.uint64({t})]" for t in lanes]
    combine = "\n".join(f"{pad}s{t} = (a0_{t} + a1_{t}) + (a2_{t} + a3_{t})" for t in lanes)
    return (_TEMPLATE.replace("GROUP", str(GROUP)).replace("PARTIALS", str(PARTIALS))
            .format(init=init, accumulate="\n".join(accumulate), combine=combine,
                    any_hit=" | ".join(f"(s{t} >= thr[{t}])" for t in lanes),
                    store="\n".join(f"{pad}    lanes[{t}] = s{t}" for t in lanes)))


def nibble_tables(queries: DenseCodes, width: int) -> np.ndarray:
    """(n + 1, nibbles * 16) float32: each query's nibble table ``table[p, v]`` (row-major) over the ``2 * width``
    nibbles of a row, padded with zero tables to a multiple of ``PARTIALS``, and a zero row last (the table of an
    unused lane)."""
    nibbles = -(-2 * width // PARTIALS) * PARTIALS
    values = np.zeros((len(queries) + 1, 4 * nibbles), np.float32)
    values[: len(queries), : queries.dim] = queries.values
    nibbles = values.reshape(len(values), nibbles, 4)
    return np.ascontiguousarray((nibbles @ _PATTERNS.T).reshape(len(values), -1))


def scan_binary(codes: BinaryCodes, ids: np.ndarray, offsets: np.ndarray, queries: DenseCodes, plan: ProbePlan,
                k: int, *, keep: np.ndarray | None, parts: int) -> TopK:
    """Top-``k`` (scores, caller ids) of each query over the rows of the cells ``plan`` gives it."""
    kernel = compile_kernel(kernel_source(), "scan_binary", __file__)
    best_s, best_p = empty_lists(parts, len(queries), k)
    worst = np.zeros((parts, len(queries)), np.int64)
    kernel(np.ascontiguousarray(codes.packed), offsets, plan.cells, plan.qptr, plan.queries, plan.shares(offsets, parts),
           nibble_tables(queries, codes.packed.shape[1]), np.zeros(0, np.uint8) if keep is None else keep, ids, k,
           parts, best_s, best_p, worst, max(plan.max_rows(offsets), 1))
    return merge_lists(best_s, best_p, ids, k)
