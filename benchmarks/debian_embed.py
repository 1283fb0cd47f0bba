"""Resumable, memory-bounded embedding of many sentences into one ``.npy`` file (used by ``debian_corpus.py``).

``embed_in_chunks`` writes L2-normalised float32 rows chunk by chunk into ``NAME.partial.npy`` (an
``np.lib.format.open_memmap``), records after each chunk how many rows are done in ``NAME.progress.json``, and
renames the partial file to ``NAME.npy`` when every row is in. Killed and run again, it continues after the last
finished chunk; a progress file written for other sentences or another width is refused, not reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.progress import progress_bar
from adaptemb.serialization import atomic_write

Encoder = Callable[[list[str]], np.ndarray]


def texts_fingerprint(texts: Sequence[str]) -> str:
    """A SHA-256 of the texts (newline-joined), so a resumed run can tell it is embedding the same sentences."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _partial_paths(path: Path) -> tuple[Path, Path]:
    stem = path.name.removesuffix(".npy")
    return path.with_name(f"{stem}.partial.npy"), path.with_name(f"{stem}.progress.json")


def _open_partial(partial: Path, progress: Path, expected: dict[str, Any]) -> tuple[np.memmap, int, float | None]:
    """The partial memmap, the rows already done in it and the seconds they took (0 and 0.0 for a fresh file;
    None seconds when a progress file does not say)."""
    if partial.is_file() and progress.is_file():
        state = json.loads(progress.read_text())
        if {key: state.get(key) for key in expected} != expected:
            raise ValueError(f"{progress} belongs to another run ({ {k: state.get(k) for k in expected} } != "
                             f"{expected}); delete {partial} and {progress} to start this embedding afresh")
        return np.lib.format.open_memmap(partial, mode="r+"), int(state["rows_done"]), state.get("seconds")
    rows, dim = expected["rows"], expected["dim"]
    return np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(rows, dim)), 0, 0.0


def normalised_rows(block: np.ndarray, dim: int, rows: int) -> np.ndarray:
    """``block`` as float32 rows of unit length; refuses a wrong shape, NaN or infinity, or an all-zero row."""
    block = np.asarray(block, dtype=np.float32)
    if block.shape != (rows, dim):
        raise ValueError(f"the encoder returned shape {block.shape}, expected ({rows}, {dim})")
    if not np.isfinite(block).all():
        raise ValueError("the encoder returned NaN or infinite values")
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"the encoder returned {int((norms == 0).sum())} all-zero rows, which cannot be normalised")
    return block / norms


def embed_in_chunks(texts: Sequence[str], encode: Encoder, path: Path, dim: int, *, chunk_rows: int = 10_000,
                    label: str = "embed", stop_after_chunks: int | None = None) -> dict[str, Any]:
    """Embed ``texts`` with ``encode`` into ``path`` (float32, (len(texts), dim), unit rows), resumably.

    Returns what happened: rows, rows embedded in this call (``embedded``), the seconds and rate of this call
    and, over every call that filled the file, ``seconds_total`` and ``rows_per_second_total``. ``stop_after_chunks``
    stops early (as a kill would), leaving the partial file and its progress for the next call (used by tests).
    """
    partial, progress = _partial_paths(path)
    expected = {"rows": len(texts), "dim": dim, "texts_sha256": texts_fingerprint(texts)}
    matrix, done, earlier = _open_partial(partial, progress, expected)
    start, first = time.perf_counter(), done
    with progress_bar(total=len(texts), initial=done, desc=label, unit="rows") as bar:
        for chunk, begin in enumerate(range(done, len(texts), chunk_rows)):
            if stop_after_chunks is not None and chunk >= stop_after_chunks:
                del matrix
                return {"rows": len(texts), "embedded": done - first, "complete": False}
            end = min(begin + chunk_rows, len(texts))
            matrix[begin:end] = normalised_rows(encode(list(texts[begin:end])), dim, end - begin)
            matrix.flush()
            done = end
            total = None if earlier is None else round(earlier + time.perf_counter() - start, 1)
            _write_json(progress, {**expected, "rows_done": done, "seconds": total})
            bar.update(end - begin)
            _log_chunk(label, done, len(texts), first, start)
    del matrix
    os.replace(partial, path)
    progress.unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    total = None if earlier is None else earlier + seconds
    return {"rows": len(texts), "embedded": done - first, "complete": True, "resumed_from": first,
            "seconds": round(seconds, 1), "rows_per_second": round((done - first) / seconds, 1) if seconds else None,
            "seconds_total": None if total is None else round(total, 1),
            "rows_per_second_total": round(len(texts) / total, 1) if total else None}


def _log_chunk(label: str, done: int, total: int, first: int, start: float) -> None:
    """One line per chunk (a progress bar is silent in a log file)."""
    elapsed = time.perf_counter() - start
    rate = (done - first) / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else float("nan")
    print(f"{label}: {done:,}/{total:,} rows, {rate:,.0f} rows/s, {eta:,.0f} s left, load "
          f"{os.getloadavg()[0]:.2f}", flush=True)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(payload, indent=1) + "\n"))
