"""Writing an approximate index to one safetensors file, and reading a safetensors header alone.

``save_ann`` writes (atomically, through ``adaptemb.serialization.write_tensors``; ``write_tensors_streamed`` for a
build from shards) the compressor's tensors (``compressor.*``), the live codes in cell order (``docs.*``), the
caller's ids, the cell offsets, the float16 centroids and routing basis and the calibration curve (``ann.*``), a code
rerank store (``rerank.*``), and string metadata: the index format (``"adaptemb.index"``) with ``ann`` set, the
compressor's metadata, the settings and the query kind and budget. ``read_header`` reads a file's header alone (the
safetensors library has no zero-copy numpy view); ``adaptemb.ann.storage`` opens the file memory-mapped from it.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptemb.ann.store import CellStore, release_mapped
from adaptemb.codes import Codes
from adaptemb.errors import CorruptFileError
from adaptemb.serialization import FORMAT_VERSION, INDEX_FORMAT, atomic_write, existing_file, write_tensors

ANN_VERSION = "1"
_SAFETENSORS_DTYPES = {np.dtype(t): name for name, t in (
    ("BOOL", np.bool_), ("U8", np.uint8), ("I8", np.int8), ("U16", np.uint16), ("I16", np.int16), ("F16", np.float16),
    ("U32", np.uint32), ("I32", np.int32), ("F32", np.float32), ("U64", np.uint64), ("I64", np.int64),
    ("F64", np.float64))}


def save_ann(index: Any, path: str | Path) -> Path:
    """Write ``index`` (an ``AnnIndex``; its live rows) to ``path``; see ``adaptemb.ann.storage``."""
    return write_tensors(path, *ann_contents(index))


def ann_contents(index: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors and string metadata of an ``AnnIndex``'s file (its live rows)."""
    store = CellStore(index.store.main, index.store.added)
    if store.added is not None or store.main.alive is not None:
        store.compact()
    main = store.main
    tensors: dict[str, Any] = {f"compressor.{k}": t for k, t in index.compressor.state_tensors().items()}
    tensors.update({f"docs.{k}": a for k, a in main.codes.to_arrays().items()})
    tensors.update({"ann.ids": main.ids, "ann.offsets": main.offsets,
                    "ann.centroids": index.router.centroids.astype(np.float16)})
    if index.router.basis is not None:
        tensors["ann.basis"] = index.router.basis.astype(np.float16)
    calibration = index.calibration
    if calibration is not None:
        tensors["ann.recall"] = calibration.recall
        tensors["ann.recall_lower"] = calibration.lower
    rerank: dict[str, Any] = {}
    if index.rerank is not None:
        rerank = {"kind": index.rerank.kind, "path": None if index.rerank.path is None else str(index.rerank.path.resolve())}
        if index.rerank.path is None:
            store_arrays = index.rerank.store.to_arrays() if isinstance(index.rerank.store, Codes) else {
                "vectors": np.asarray(index.rerank.store)}
            tensors.update({f"rerank.{k}": a for k, a in store_arrays.items()})
            if isinstance(index.rerank.store, Codes):
                rerank.update(codes_kind=index.rerank.store.kind, codes_dim=index.rerank.store.dim)
    metadata = {
        **index.compressor.file_metadata(),
        "format": INDEX_FORMAT, "format_version": FORMAT_VERSION, "ann": ANN_VERSION,
        "docs_kind": main.codes.kind, "docs_dim": str(main.codes.dim), "docs_n": str(len(main)),
        "query_kind": index.query_kind, "query_budget": json.dumps(index.budget),
        "ann_config": json.dumps(index.config.saved()), "scorer": index.scorer.name,
        "calibration": json.dumps(None if calibration is None else {
            "top_k": calibration.top_k, "queries": calibration.queries, "source": calibration.source}),
        "rerank": json.dumps(rerank or None),
    }
    return tensors, metadata


def write_tensors_streamed(path: str | Path, tensors: dict[str, Any], metadata: dict[str, str],
                           chunk_bytes: int = 1 << 22) -> Path:
    """``write_tensors``' file, atomically, written ``chunk_bytes`` at a time from arrays that may be memory-mapped
    (the safetensors library copies every tensor into memory first). The layout is the library's documented one:
    a little-endian header length, the JSON header (tensor entries and ``__metadata__``, with the manifest
    ``write_tensors`` records) padded to 8 bytes, then the tensors' bytes in header order."""
    arrays = {name: a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a) for name, a in tensors.items()}
    manifest = {name: [str(torch.from_numpy(np.zeros(0, a.dtype)).dtype).removeprefix("torch."), list(a.shape)]
                for name, a in arrays.items()}
    header: dict[str, Any] = {"__metadata__": {**metadata, "tensors": json.dumps(manifest, sort_keys=True)}}
    offset = 0
    for name, array in arrays.items():
        header[name] = {"dtype": _SAFETENSORS_DTYPES[np.dtype(array.dtype)], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            handle.write(struct.pack("<Q", len(text)) + text)
            for array in arrays.values():
                handle.writelines(_chunks(array, chunk_bytes))

    return atomic_write(path, write)


def _chunks(array: np.ndarray, chunk_bytes: int) -> Iterator[bytes]:
    """The bytes of ``array`` (C order), ``chunk_bytes`` at a time. A whole ``np.memmap`` of a file is read from
    the file itself (through the page cache, not mapped into this process: its pages do not count as this
    process' memory); the pages of a view of one are released chunk by chunk."""
    if isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap) and array.flags.c_contiguous:
        with open(array.filename, "rb") as source:
            source.seek(array.offset)
            for start in range(0, array.nbytes, chunk_bytes):
                yield source.read(min(chunk_bytes, array.nbytes - start))
        return
    flat = array.reshape(-1) if array.flags.c_contiguous else np.ascontiguousarray(array).reshape(-1)
    step = max(1, chunk_bytes // max(flat.itemsize, 1))
    for start in range(0, len(flat), step):
        yield np.ascontiguousarray(flat[start : start + step]).tobytes()
        release_mapped([array])  # a view of a mapped file: its pages read so far stop counting as this process'


def is_ann_file(path: str | Path) -> bool:
    """Whether ``path`` is an approximate index file (read from its header alone)."""
    try:
        metadata, _, _ = read_header(existing_file(path))
    except CorruptFileError:
        return False
    return metadata.get("format") == INDEX_FORMAT and "ann" in metadata


def read_header(path: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]], int]:
    """(metadata, tensor entries, byte offset of the data) of a safetensors file, from its header alone."""
    try:
        with open(path, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > path.stat().st_size - 8:
                raise ValueError(f"header length {size} exceeds the file")
            header = json.loads(handle.read(size))
        metadata = {str(k): str(v) for k, v in (header.pop("__metadata__", None) or {}).items()}
    except (OSError, ValueError, struct.error, TypeError, AttributeError) as err:
        raise CorruptFileError(f"{path} is not a valid safetensors file ({err})") from None
    return metadata, header, 8 + size


