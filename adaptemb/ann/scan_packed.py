"""The cell scanner of csr's packed sparse codes searched with projected queries (``projected`` → ``packed_sparse``).

A task is one probed cell and the queries of the batch that probe it. The cell's rows are decoded once, straight
from their packed bits (Elias-Fano or fixed-width indices, then the value levels; the bit offsets are constants
of the generated kernel), into (feature, value) entries, the value read from the codes' codebook
(``table[feature, level]``, or the float16 value itself). The features the cell uses are numbered locally in
ascending order, and for each group of ``GROUP`` queries their weights on those features are gathered into a small
block (``gathered``, features x GROUP, in L1); in ascending order the gather reads each query's weights forward
(a sixth less CPU for the whole scan than in the order the rows first use them, with the same results). The
gather costs about as much as the scoring (a cell of 500 rows of 14 entries uses some 760 of 1,024 features),
which is why cells stay large (``adaptemb.ann.config``). Each row is then scored for the whole group at once: per
entry one broadcast value times one row of the block into ``GROUP`` accumulators that LLVM's SLP vectoriser packs
into vector registers, so every decoded entry is read once per group, not once per query. A score is
``<values, dequantised doc> + offset``, summed in entry order with fused multiply-adds as ``adaptemb.index.packed``
sums it, so the scores of the documents both find are the exact index's, bit for bit.
"""

from __future__ import annotations

import numpy as np

from adaptemb.ann.kernels import compile_kernel, empty_lists, merge_lists
from adaptemb.ann.plan import ProbePlan
from adaptemb.codes import PackedSparseCodes, ProjectedQueries
from adaptemb.ranking import TopK

GROUP = 16
"""Queries scored together against a decoded row (16 float32 accumulators: two 256-bit registers)."""
WORD_BITS = 64

_TEMPLATE = """
def scan_packed(packed, offsets, cells, qptr, qlist, shares, weights, offset, table, keep, ids, k, parts, best_s,
                best_p, worst, max_rows):
    dim = table.shape[0] - 1
    n_tasks = len(cells)
    for part in numba.prange(parts):
        bs = best_s[part]
        bp = best_p[part]
        wst = worst[part]
        local = np.full(dim + 1, -1, np.int64)
        features = np.empty(dim + 1, np.int64)
        entry_at = np.empty(max_rows * SLOTS, np.int64)
        entry_v = np.empty(max_rows * SLOTS, np.float32)
        slots = np.zeros(SLOTS, np.int64)
        levels = np.zeros(SLOTS, np.int64)
        gathered = np.zeros((dim + 1) * GROUP, np.float32)
        thr = np.empty(GROUP, np.float32)
        off = np.empty(GROUP, np.float32)
        lanes = np.empty(GROUP, np.float32)
        rows_of = np.zeros(GROUP, np.int64)
        pad_row = weights.shape[0] - 1
        flat_weights = weights.ravel()
        stride = np.uint64(weights.shape[1])
        for task in range(shares[part], shares[part + 1]):
            cell = cells[task]
            start = offsets[cell]
            rows = offsets[cell + 1] - start
            used = 0
            for r in range(rows):
                row = packed[np.uint64(start + r)]
{decode}
                for j in range(SLOTS):
                    f = min(slots[j], dim)
                    local[f] = 0
                    entry_at[np.uint64(r * SLOTS + j)] = f
                    entry_v[np.uint64(r * SLOTS + j)] = {value}
            for f in range(dim + 1):  # the cell's features numbered in ascending order: gathers read forward
                if local[f] == 0:
                    local[f] = used * GROUP
                    features[used] = f
                    used += 1
            for e in range(rows * SLOTS):
                entry_at[np.uint64(e)] = local[entry_at[np.uint64(e)]]
            for g0 in range(qptr[task], qptr[task + 1], GROUP):
                members = min(GROUP, qptr[task + 1] - g0)
                for t in range(GROUP):
                    if t < members:
                        q = qlist[g0 + t]
                        rows_of[t] = q
                        thr[t] = bs[q, wst[q]]
                        off[t] = offset[q]
                    else:
                        rows_of[t] = pad_row
                        thr[t] = np.inf
                        off[t] = 0.0
                for u in range(used):  # lanes past the members read the zero row: their threshold is +inf
                    f = np.uint64(features[u])
                    for t in range(GROUP):  # a fixed width, one flat index: LLVM gathers the lanes with vector loads
                        gathered[np.uint64(u * GROUP + t)] = flat_weights[np.uint64(rows_of[t]) * stride + f]
                for r in range(0, rows, 2):
                    r2 = min(r + 1, rows - 1)
{init}
                    for j in range(SLOTS):
                        at = np.uint64(entry_at[np.uint64(r * SLOTS + j)])
                        v = entry_v[np.uint64(r * SLOTS + j)]
                        bt = np.uint64(entry_at[np.uint64(r2 * SLOTS + j)])
                        u = entry_v[np.uint64(r2 * SLOTS + j)]
{accumulate}
                    if {any_a}:
{store_a}
                        for t in range(members):
                            s = lanes[t] + off[t]
                            if s >= thr[t] and (len(keep) == 0 or keep[np.uint64(start + r)]):
                                thr[t] = offer(bs, bp, wst, ids, qlist[g0 + t], s, start + r)
                    if r2 > r and ({any_b}):
{store_b}
                        for t in range(members):
                            s = lanes[t] + off[t]
                            if s >= thr[t] and (len(keep) == 0 or keep[np.uint64(start + r2)]):
                                thr[t] = offer(bs, bp, wst, ids, qlist[g0 + t], s, start + r2)
            for u in range(used):
                local[features[u]] = -1
"""

def field(position: int, width: int) -> str:
    """Source of the ``width``-bit field at bit ``position`` of a row held as big-endian int64 words ``w0, w1, …``."""
    word, start = divmod(position, WORD_BITS)
    end = start + width
    mask = (1 << width) - 1
    if end <= WORD_BITS:
        return f"((w{word} >> {WORD_BITS - end}) & {mask})"
    low = end - WORD_BITS
    return f"(((w{word} << {low}) | ((w{word + 1} >> {WORD_BITS - low}) & {(1 << low) - 1})) & {mask})"


def load_words(row_bytes: int, pad: str) -> list[str]:
    """Lines assembling ``row`` (``row_bytes`` bytes) into big-endian int64 words ``w0, w1, …`` (zero-padded)."""
    lines = []
    for word in range(-(-row_bytes // 8) + 1):
        parts = [f"(np.int64(row[{word * 8 + b}]) << {56 - 8 * b})" for b in range(8) if word * 8 + b < row_bytes]
        lines.append(f"{pad}w{word} = " + (" | ".join(parts) if parts else "np.int64(0)"))
    return lines


def decode_source(codes: PackedSparseCodes, pad: str) -> str:
    """Lines filling ``slots[j]`` and ``levels[j]`` (j < k) from the packed ``row``, for the codes' layout."""
    k, bits = codes.k, codes.value_bits
    lines = load_words(codes.packed.shape[1], pad)
    if codes.low_bits is None:
        width = codes.index_bits(codes.dim)
        lines += [f"{pad}slots[{j}] = {field(j * width, width)}" for j in range(k)]
        level_at = k * width
    else:
        low = codes.low_bits
        lines += [f"{pad}slots[{j}] = {field(j * low, low)}" for j in range(k)]
        lines += bitmap_source(k * low, k + (codes.dim >> low), low, k, pad)
        level_at = k * low + k + (codes.dim >> low)
    lines += [f"{pad}levels[{j}] = {field(level_at + j * bits, bits)}" for j in range(k)]
    return "\n".join(lines)


def bitmap_source(position: int, length: int, low_bits: int, k: int, pad: str) -> list[str]:
    """Lines adding the Elias-Fano high parts to ``slots``: the i-th set bit of the ``length``-bit bitmap at bit
    ``position`` sits ``high_i + i`` bits in; set bits are found by counting leading zeros, 56 bits at a time."""
    lines = [f"{pad}found = 0", f"{pad}seen = 0"]
    for chunk in range(0, length, 56):
        take = min(56, length - chunk)
        lines += [f"{pad}x = {field(position + chunk, take)} << {64 - take}",
                  f"{pad}seen = {chunk}",
                  f"{pad}while x != 0 and found < {k}:",
                  f"{pad}    skip = np.int64(leading_zeros(np.uint64(x)))",
                  f"{pad}    seen += skip",
                  f"{pad}    slots[found] = (slots[found] & {(1 << low_bits) - 1}) | ((seen - found) << {low_bits})",
                  f"{pad}    found += 1",
                  f"{pad}    seen += 1",
                  f"{pad}    x = (x << skip) << 1"]
    return lines


def kernel_source(codes: PackedSparseCodes) -> str:
    """The scan kernel's source for these codes' layout."""
    pad = " " * 20
    lanes = range(GROUP)
    return (_TEMPLATE.replace("SLOTS", str(codes.k)).replace("GROUP", str(GROUP))
            .format(decode=decode_source(codes, " " * 16), value="table[f, levels[j]]",
                    init="\n".join(f"{pad}a{t} = np.float32(0.0)\n{pad}b{t} = np.float32(0.0)" for t in lanes),
                    accumulate="\n".join(f"{pad}    a{t} += v * gathered[at + np.uint64({t})]\n"
                                         f"{pad}    b{t} += u * gathered[bt + np.uint64({t})]" for t in lanes),
                    any_a=" | ".join(f"(a{t} + off[{t}] >= thr[{t}])" for t in lanes),
                    any_b=" | ".join(f"(b{t} + off[{t}] >= thr[{t}])" for t in lanes),
                    store_a="\n".join(f"{pad}    lanes[{t}] = a{t}" for t in lanes),
                    store_b="\n".join(f"{pad}    lanes[{t}] = b{t}" for t in lanes)))


def value_table(codes: PackedSparseCodes) -> np.ndarray:
    """(dim + 1, levels) float32: ``table[feature, level]`` is the value a slot stands for; row ``dim`` (an empty
    slot) is zero."""
    if codes.value_bits == 16:
        raise NotImplementedError("float16-valued packed codes are scanned through the generic scorer")
    table = np.zeros((codes.dim + 1, 2**codes.value_bits), np.float32)
    table[: codes.dim] = codes.codebook.astype(np.float32)
    return table


def query_weights(queries: ProjectedQueries) -> np.ndarray:
    """(n + 1, dim + 1) float32: the queries' values plus a zero weight for the empty slot, and a zero row last
    (the weights of an unused lane)."""
    weights = np.zeros((len(queries) + 1, queries.dim + 1), np.float32)
    weights[: len(queries), : queries.dim] = queries.values
    return weights


def scan_packed(codes: PackedSparseCodes, ids: np.ndarray, offsets: np.ndarray, queries: ProjectedQueries,
                plan: ProbePlan, k: int, *, keep: np.ndarray | None, parts: int) -> TopK:
    """Top-``k`` (scores, caller ids) of each query over the rows of the cells ``plan`` gives it."""
    kernel = compile_kernel(kernel_source(codes), "scan_packed", __file__)
    best_s, best_p = empty_lists(parts, len(queries), k)
    worst = np.zeros((parts, len(queries)), np.int64)
    max_rows = int(plan.max_rows(offsets))
    kernel(np.ascontiguousarray(codes.packed), offsets, plan.cells, plan.qptr, plan.queries, plan.shares(offsets, parts), query_weights(queries),
           np.ascontiguousarray(queries.offset, np.float32), value_table(codes),
           np.zeros(0, np.uint8) if keep is None else keep, ids, k, parts, best_s, best_p, worst, max(max_rows, 1))
    return merge_lists(best_s, best_p, ids, k)
