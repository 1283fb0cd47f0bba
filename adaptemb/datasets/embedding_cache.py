"""The embedding cache of a text dataset: texts are embedded once, then read back while nothing they depend on changed.

A cache file (``.npz``: ``embeddings`` (n, d) float32 and a JSON header ``__adaptemb__``) is valid for one
``CacheKey``: the model's content hash (``model_sha256``: every file of its folder that defines it, not its path),
the data files' hashes and the hash of the exact texts embedded (which covers how documents are joined, which
queries a split keeps, ...). A file whose key differs, or that cannot be read, is never reused: ``read_cache``
says why, the caller embeds again and replaces it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adaptemb.serialization import atomic_write

CACHE_FORMAT = "adaptemb.embedding-cache"
CACHE_VERSION = "1"
HEADER_KEY = "__adaptemb__"
_SKIPPED_DIRS = {"onnx", "openvino", ".git", ".cache"}
"""Sub-folders of a model folder that hold other runtimes' copies of the weights, not the model that is loaded."""
_SKIPPED_FILES = {"README.md", ".gitattributes", ".gitignore"}
_CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_sha256(folder: str | Path) -> str:
    """The content hash of a model folder: each file's path inside it and SHA-256 (config, tokenizer, weights,
    pooling, ...), in path order; READMEs, git files and ``onnx/`` / ``openvino/`` copies are left out."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root)
        if relative.name in _SKIPPED_FILES or _SKIPPED_DIRS & set(relative.parts[:-1]):
            continue
        digest.update(f"{relative.as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def texts_sha256(texts: Sequence[str]) -> str:
    """The SHA-256 of a list of texts (each length-prefixed, so no two lists share a hash by concatenation)."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheKey:
    """What a cache's embeddings depend on; two keys equal exactly when the embeddings may be reused."""

    model: str
    """The model's folder (for messages; not compared)."""
    model_sha256: str
    texts_sha256: str
    count: int
    files: dict[str, str] = field(default_factory=dict)
    """Data file name -> SHA-256."""
    normalize: bool = True

    def compared(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if key != "model"}


def read_cache(path: str | Path, key: CacheKey) -> tuple[np.ndarray | None, str | None]:
    """The embeddings cached at ``path`` for ``key``, or ``(None, why)``: why they cannot be reused (None when there is
    no cache file at all)."""
    path = Path(path)
    if not path.is_file():
        return None, None
    try:
        with np.load(path, allow_pickle=False) as archive:
            header = json.loads(str(archive[HEADER_KEY]))
            embeddings = archive["embeddings"]
    except (OSError, ValueError, KeyError) as err:
        return None, f"{path} is not a readable embedding cache ({type(err).__name__}: {err}); embedding again"
    if not isinstance(header, dict) or header.get("format") != CACHE_FORMAT:
        return None, f"{path} is not an adaptemb embedding cache; embedding again and replacing it"
    stale = _difference(header.get("key", {}), key)
    if stale:
        return None, f"{path} was written {stale}; embedding again and replacing it"
    if embeddings.ndim != 2 or len(embeddings) != key.count or embeddings.dtype != np.float32:
        return None, f"{path} holds {embeddings.shape} {embeddings.dtype} embeddings, not ({key.count}, d) float32"
    return embeddings, None


def write_cache(path: str | Path, key: CacheKey, embeddings: np.ndarray, info: dict[str, Any]) -> Path:
    """Write ``embeddings`` for ``key`` at ``path``, atomically (``info``: device, seconds, ... for the record)."""
    header = {"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": asdict(key), "info": info}
    arrays = {"embeddings": np.ascontiguousarray(embeddings, dtype=np.float32), HEADER_KEY: np.array(json.dumps(header))}

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)

    return atomic_write(path, write)


def _difference(stored: dict[str, Any], key: CacheKey) -> str:
    """Why a stored key is not ``key`` ('' when it is): another model, other files, other texts."""
    if stored.get("model_sha256") != key.model_sha256:
        return (f"by another model ({stored.get('model', '?')}, content sha256 {str(stored.get('model_sha256'))[:12]}), "
                f"not {key.model} (sha256 {key.model_sha256[:12]})")
    files = stored.get("files") or {}
    changed = sorted(name for name in set(files) | set(key.files) if files.get(name) != key.files.get(name))
    if changed:
        return f"for other files ({', '.join(changed)} changed)"
    if {k: v for k, v in stored.items() if k != "model"} != key.compared():
        return "for other texts (the texts to embed, their count or normalisation differ)"
    return ""
