"""An approximate index as one safetensors file, opened memory-mapped.

``save_ann`` writes (atomically, through ``adaptemb.serialization.write_tensors``) the compressor's tensors
(``compressor.*``), the live codes in cell order (``docs.*``), the caller's ids, the cell offsets, the float16
centroids and routing basis and the calibration curve (``ann.*``), a code rerank store (``rerank.*``), and string
metadata: the index format (``"adaptemb.index"``) with ``ann`` set, the compressor's metadata, the settings and
the query kind and budget.

``load_ann`` reads the header alone and maps every tensor of the index straight from the file (``numpy.memmap``,
read-only): opening costs the compressor's restore and the header checks, not the rows, which are read from disk as
searches touch them. (The safetensors library has no zero-copy numpy view, hence the small header reader here; the
layout it reads is the library's documented one.) Packed sparse codes are wrapped without unpacking every row
(their first row is parsed to check the layout); the scan kernels never read outside a row's table entries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptemb.ann.calibration import Calibration
from adaptemb.ann.cells import Router
from adaptemb.ann.config import as_config
from adaptemb.ann.files import ANN_VERSION, read_header
from adaptemb.ann.index import AnnIndex
from adaptemb.ann.rerank import RerankStore
from adaptemb.ann.scorers import scorer_for
from adaptemb.ann.store import CellStore, Segment
from adaptemb.codes import Codes, PackedSparseCodes
from adaptemb.errors import CorruptFileError
from adaptemb.registry import get_index_registry, get_registry
from adaptemb.serialization import existing_file

_DTYPES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16, "F16": np.float16,
           "U32": np.uint32, "I32": np.int32, "F32": np.float32, "U64": np.uint64, "I64": np.int64, "F64": np.float64}


def load_ann(path: str | Path) -> AnnIndex:
    """Open an index ``save_ann`` wrote, memory-mapped (see the module docstring)."""
    source = existing_file(path)
    metadata, entries, start = read_header(source)
    if metadata.get("ann") != ANN_VERSION:
        raise CorruptFileError(f"{source} is an approximate index of version {metadata.get('ann')!r}; this adaptemb "
                               f"reads version {ANN_VERSION}")
    arrays = _mapped(source, entries, start, metadata)
    try:
        return _assemble(source, metadata, arrays)
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as err:
        raise CorruptFileError(f"{source} holds a damaged approximate index: {err}") from None


def _mapped(source: Path, entries: dict[str, dict[str, Any]], start: int, metadata: dict[str, str]) -> dict[str, np.ndarray]:
    """Every tensor as a read-only array mapped from the file, checked against the writer's manifest."""
    manifest = json.loads(metadata.get("tensors", "{}"))
    size = source.stat().st_size
    arrays = {}
    for name, entry in entries.items():
        try:
            dtype = np.dtype(_DTYPES[entry["dtype"]])
            shape = tuple(int(s) for s in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as err:
            raise CorruptFileError(f"{source}: tensor {name!r} has a damaged header entry ({err})") from None
        if end - begin != dtype.itemsize * int(np.prod(shape)) or start + end > size:
            raise CorruptFileError(f"{source}: tensor {name!r} does not fit the file")
        written = manifest.get(name)
        if written is not None and (written[0] != str(torch.empty(0, dtype=_torch_dtype(dtype)).dtype).removeprefix(
                "torch.") or list(written[1]) != list(shape)):
            raise CorruptFileError(f"{source}: tensor {name!r} is {dtype} {shape}, but was written as {written}")
        arrays[name] = (np.asarray(np.memmap(source, dtype=dtype, mode="r", offset=start + begin, shape=shape))
                        if int(np.prod(shape)) else np.zeros(shape, dtype))
    if manifest and set(manifest) != set(arrays):
        raise CorruptFileError(f"{source} holds tensors {sorted(arrays)} but was written with {sorted(manifest)}")
    return arrays


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(1, dtype)).dtype


def _assemble(source: Path, metadata: dict[str, str], arrays: dict[str, np.ndarray]) -> AnnIndex:
    group = lambda prefix: {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
    state = {k: torch.from_numpy(np.array(v)) for k, v in group("compressor.").items()}
    compressor = get_registry().get(metadata["method"]).from_saved(metadata, state, source=source)
    kind, dim, n = metadata["docs_kind"], int(metadata["docs_dim"]), int(metadata["docs_n"])
    codes = open_codes(kind, group("docs."), dim)
    ids, offsets, centroids = arrays["ann.ids"], arrays["ann.offsets"], arrays["ann.centroids"]
    basis = arrays.get("ann.basis")
    _check_layout(source, codes, ids, offsets, centroids, basis, n)
    router = Router(None if basis is None else basis.astype(np.float32), centroids.astype(np.float32))
    config = as_config(json.loads(metadata["ann_config"]))
    query_kind = metadata["query_kind"]
    backend = get_index_registry().for_kinds(query_kind, kind)
    scorer = scorer_for(query_kind, kind, compressor.score, backend)
    calibration = _calibration(source, metadata, arrays.get("ann.recall"), arrays.get("ann.recall_lower"), router.cells)
    index = AnnIndex(compressor, CellStore(Segment(codes, ids, offsets)), router, scorer, config=config,
                     query_kind=query_kind, budget=json.loads(metadata["query_budget"]), calibration=calibration)
    index.rerank = _rerank(json.loads(metadata.get("rerank", "null")), group("rerank."), compressor, n)
    return index


def open_codes(kind: str, arrays: dict[str, np.ndarray], dim: int) -> Codes:
    """Codes of ``kind`` over mapped ``arrays``; packed sparse rows are wrapped without unpacking each one."""
    cls = Codes.for_kind(kind)
    if cls is not PackedSparseCodes:
        return cls.from_arrays(arrays, dim)
    packed = arrays["packed"]
    probe = PackedSparseCodes.from_arrays({**arrays, "packed": np.ascontiguousarray(packed[:1])}, dim)
    codebook = None if probe.value_bits == 16 else probe.codebook
    return PackedSparseCodes(packed, dim, probe.k, probe.value_bits, codebook, probe.low_bits)


def _check_layout(source: Path, codes: Codes, ids: np.ndarray, offsets: np.ndarray, centroids: np.ndarray,
                  basis: np.ndarray | None, n: int) -> None:
    cells = len(centroids)
    problems = []
    if len(codes) != n or ids.shape != (n,) or ids.dtype.kind != "i":
        problems.append(f"{len(codes)} code rows and ids {ids.dtype} {ids.shape} for {n} documents")
    if offsets.shape != (cells + 1,) or offsets[0] != 0 or offsets[-1] != n or (np.diff(offsets) < 0).any():
        problems.append(f"cell offsets {offsets.shape} that do not split {n} rows into {cells} cells")
    if centroids.ndim != 2 or not np.isfinite(centroids).all():
        problems.append("non-finite or misshapen centroids")
    if basis is not None and (basis.ndim != 2 or basis.shape[1] != centroids.shape[1] or not np.isfinite(basis).all()):
        problems.append("a routing basis that does not fit the centroids")
    if problems:
        raise CorruptFileError(f"{source} holds a damaged approximate index: {'; '.join(problems)}")


def _calibration(source: Path, metadata: dict[str, str], recall: np.ndarray | None, lower: np.ndarray | None,
                 cells: int) -> Calibration | None:
    described = json.loads(metadata.get("calibration", "null"))
    if described is None or recall is None or lower is None:
        return None
    if any(curve.shape != (cells,) or not np.isfinite(curve).all() for curve in (recall, lower)):
        raise CorruptFileError(f"{source}: the calibration curves do not fit {cells} cells")
    return Calibration(np.array(recall), np.array(lower), int(described["top_k"]), int(described["queries"]),
                       str(described["source"]))


def _rerank(described: dict[str, Any] | None, arrays: dict[str, np.ndarray], compressor: Any, n: int) -> RerankStore | None:
    if described is None:
        return None
    if described.get("path"):
        return RerankStore(Path(described["path"]), compressor, n)
    if described["kind"] == "vectors":
        return RerankStore(arrays["vectors"], compressor, n)
    return RerankStore(open_codes(described["codes_kind"], arrays, int(described["codes_dim"])), compressor, n)
