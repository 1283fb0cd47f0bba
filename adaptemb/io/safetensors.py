"""``.safetensors`` files, read from their JSON header and then at each tensor's offset (no torch, no memory
map). numpy has no bfloat16: a bfloat16 tensor is widened to float32 here, exactly (its 16 bits are the high
half of a float32), so every reader of embeddings sees the same float32 rows."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.errors import CorruptFileError
from adaptemb.io.base import FixedRows, RowSource, pick_name

METADATA_KEY = "__metadata__"
_MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}


def safetensors_rows(path: Path, key: str | None) -> RowSource:
    """The tensor ``key`` of the file (or its only tensor)."""
    tensors, _, data_start = read_header(path)
    name = pick_name(path, sorted(tensors), key, "tensor")
    return _tensor_rows(path, name, tensors[name], data_start)


def safetensors_arrays(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every tensor of the file by name (bfloat16 widened to float32), and its string metadata."""
    tensors, metadata, data_start = read_header(path)
    return {name: _tensor_rows(path, name, entry, data_start).read_all() for name, entry in tensors.items()}, metadata


def read_header(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str], int]:
    """(tensor entries by name, string metadata, byte where the tensor data begins)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise CorruptFileError(f"could not read {path}: not a safetensors file (shorter than its 8-byte header size)")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(_MAX_HEADER_BYTES, size - 8):
            raise CorruptFileError(f"could not read {path}: not a safetensors file (header size {length:,} bytes "
                                   f"in a file of {size:,})")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CorruptFileError(f"could not read {path}: its safetensors header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CorruptFileError(f"could not read {path}: its safetensors header is not a JSON object")
    metadata = header.pop(METADATA_KEY, None) or {}
    if not isinstance(metadata, dict):
        raise CorruptFileError(f"could not read {path}: its safetensors metadata is not a JSON object")
    for name, entry in header.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and isinstance(entry.get("shape"), list)
                and isinstance(entry.get("data_offsets"), list) and len(entry["data_offsets"]) == 2):
            raise CorruptFileError(f"could not read {path}: tensor {name!r} has no valid dtype, shape and data_offsets")
    return header, {str(k): str(v) for k, v in metadata.items()}, 8 + length


def _tensor_rows(path: Path, name: str, entry: dict[str, Any], data_start: int) -> RowSource:
    kind, shape, (begin, end) = entry["dtype"], tuple(int(s) for s in entry["shape"]), entry["data_offsets"]
    if kind not in _DTYPES:
        raise CorruptFileError(f"could not read {path}: tensor {name!r} is {kind}, which adaptemb does not read "
                               f"(it reads {', '.join(_DTYPES)})")
    stored = np.dtype(_DTYPES[kind])
    if end - begin != int(np.prod(shape, dtype=np.int64)) * stored.itemsize or begin < 0:
        raise CorruptFileError(f"could not read {path}: tensor {name!r} of {kind} {list(shape)} does not fill its "
                               f"data_offsets {begin}..{end}")
    if kind == "BF16":
        return FixedRows(path, data_start + begin, stored, shape, dtype=np.dtype(np.float32),
                         limit=data_start + end, convert=bfloat16_to_float32)
    return FixedRows(path, data_start + begin, stored, shape, limit=data_start + end)


def bfloat16_to_float32(bits: np.ndarray, _start: int = 0) -> np.ndarray:
    """bfloat16 values given as their uint16 bit patterns, as float32 (exact: the bits become the high half)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)
