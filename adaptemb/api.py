"""The one-call API: fit, compress, load and discover compressors by name; load indexes and codes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from adaptemb.ann import AnnIndex, is_ann_file, load_ann
from adaptemb.budgets import Budgets
from adaptemb.codes import Codes
from adaptemb.compose import composed_class  # noqa: F401 - importing it installs the "a+b" composer in the registry
from adaptemb.compressor import Array
from adaptemb.errors import CorruptFileError, InvalidConfigError
from adaptemb.index.bound import BRUTE_FORCE, CompressedIndex
from adaptemb.index.brute import ScoreIndex
from adaptemb.inputs import InputKind, InputSpec
from adaptemb.method import Compressor
from adaptemb.registry import CompressorInfo, get_index_registry, get_registry
from adaptemb.rows import RowStream
from adaptemb.serialization import (
    COMPRESSOR_FORMAT,
    INDEX_FORMAT,
    read_adaptemb_file,
    read_codes,
    split_prefix,
)


def get_compressor(method: str, **params: Any) -> Compressor:
    """An unfitted compressor of ``method`` configured with ``params``; ``"projection+quantizer"`` names a composed
    code (``ComposedCompressor``: each part's parameters nested, ``projection=dict(...)``, or flat)."""
    return get_registry().get(method)(**params)


def fit(
    emb: Array,
    method: str,
    *,
    k: int | None = None,
    bytes: int | Sequence[int] | None = None,
    pairs: tuple[Array, Array] | None = None,
    labels: Array | None = None,
    key: str | None = None,
    input_kind: InputKind = "float",
    input_scale: Any = None,
    input_offset: Any = None,
    input_dim: int | None = None,
    **params: Any,
) -> Compressor:
    """Fit ``method`` on embeddings ``emb`` (n, d) and return the fitted compressor.

    ``emb`` may be larger than memory: file paths (``key`` names the column or tensor), a list of 2-D arrays
    or a callable returning a fresh iterator of them (see ``Compressor.fit``). ``k`` is the method's budget
    parameter (training budget for learned sparse methods, default encode budget for the others); methods
    without a budget accept only ``k=None`` or ``k=d``, the same rule as ``encode``. ``bytes`` (one number or a
    list): the bytes per vector to fit for, for a method whose config has ``byte_budgets`` (csr: heads trained
    for the budgets; compositions: the ranks prepared); others refuse it (fit, then ``encode(x, bytes=B)``).
    ``pairs``/``labels`` go to methods that learn from them.

    Integer embeddings you already have come in with ``input_kind``: ``"int8"`` (an int8 array, dequantised as
    ``input_offset + input_scale * x``, defaults 0.0 and 1.0, each a number or one per dimension) or
    ``"ubinary"`` (sign bits packed 8 per byte, uint8 (n, ceil(d / 8)), read as ±1; ``input_dim`` = d when d is
    not 8 times the width). ``int8`` keeps int8 input as its codes and ``binary`` (``threshold="zero"``) keeps
    packed bits as its codes; see ``adaptemb.inputs``.
    """
    cls = get_registry().get(method)
    spec = InputSpec.of(input_kind, input_scale, input_offset, input_dim)
    if k is not None and "k" not in cls.Config.model_fields:  # no budget: the rule encode applies
        shape = getattr(emb, "shape", ())  # validating emb here too would read it twice: fit() validates it
        if len(shape) == 2:
            width = int(shape[1]) if spec.kind != "ubinary" else spec.dim or 8 * int(shape[1])
            Budgets.unbudgeted(width).resolve(k, method)
    elif k is not None:
        params["k"] = k
    if bytes is not None:
        if "byte_budgets" not in cls.Config.model_fields:
            raise InvalidConfigError(f"{method} is not fitted for a byte budget (its config has no byte_budgets); fit "
                                     f"it, then encode(x, bytes={bytes!r})", parameter="bytes", value=bytes,
                                     valid=_fitted_for_bytes())
        params["byte_budgets"] = bytes  # one number or several: the config's ByteBudgets reads both
    return cls(**params).fit(emb, pairs=pairs, labels=labels, key=key, input_kind=input_kind, input_scale=input_scale,
                             input_offset=input_offset, input_dim=input_dim)


def _fitted_for_bytes() -> str:
    """The registered methods fitted for byte budgets (their config has ``byte_budgets``), and compositions."""
    registry = get_registry()
    names = [name for name in registry.names() if "byte_budgets" in registry.get(name).Config.model_fields]
    return ", ".join([*names, "compositions (projection+quantizer)"])


def compress(
    emb: Array,
    method: str,
    *,
    k: int | None = None,
    pairs: tuple[Array, Array] | None = None,
    labels: Array | None = None,
    input_kind: InputKind = "float",
    input_scale: Any = None,
    input_offset: Any = None,
    input_dim: int | None = None,
    **params: Any,
) -> Codes:
    """Fit ``method`` on ``emb`` and return the codes of ``emb`` at budget ``k`` (an array: for rows larger than
    memory, ``fit`` the files and write their codes with ``encode_files``). ``input_kind`` and its options read
    integer embeddings, as in ``fit``."""
    if RowStream.of(emb) is not None:
        raise TypeError("compress() needs the embeddings as an array; for files or batches larger than memory, "
                        "fit(paths, method) then encode_files(paths, compressor, out_dir)")
    inputs = {"input_kind": input_kind, "input_scale": input_scale, "input_offset": input_offset, "input_dim": input_dim}
    compressor = fit(emb, method, k=k, pairs=pairs, labels=labels, **inputs, **params)
    return compressor.encode(emb, k=k, **inputs)


def load(path: str | Path) -> Compressor:
    """Load a compressor saved with ``Compressor.save`` (any registered method; the file names it)."""
    metadata, tensors = read_adaptemb_file(path, COMPRESSOR_FORMAT, "compressor")
    return _compressor(metadata, tensors, path)


def load_index(path: str | Path, *, device: str = "auto") -> CompressedIndex | AnnIndex:
    """Load an index saved with ``CompressedIndex.save`` (its compressor, codes and backend, on ``device``) or with
    ``AnnIndex.save`` (opened memory-mapped)."""
    if is_ann_file(path):
        return load_ann(path)
    metadata, tensors = read_adaptemb_file(path, INDEX_FORMAT, "index")
    compressor = _compressor(metadata, split_prefix(tensors, "compressor."), path)
    try:
        kind, dim, n = metadata["docs_kind"], int(metadata["docs_dim"]), int(metadata["docs_n"])
        docs = Codes.for_kind(kind).from_arrays({k: t.numpy() for k, t in split_prefix(tensors, "docs.").items()}, dim)
        budget = json.loads(metadata["query_budget"])
        options = json.loads(metadata["backend_options"])
        arrays = {k: t.numpy() for k, t in split_prefix(tensors, "index.").items()}
        name = metadata["backend"]
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as err:
        raise CorruptFileError(f"{path} holds a damaged index: {err}") from None
    if len(docs) != n:
        raise CorruptFileError(f"{path} declares {n} documents but holds {len(docs)}")
    if name == BRUTE_FORCE:
        return CompressedIndex(compressor, ScoreIndex(docs, compressor.score, **options), budget=budget)
    backend = get_index_registry().get(name)
    return CompressedIndex(compressor, backend(docs, device=device, **options, **arrays), budget=budget)


def load_codes(path: str | Path) -> Codes:
    """Load codes saved with ``save_codes`` (plugins are loaded first: they may define code kinds)."""
    get_registry()
    return read_codes(path)


def _compressor(metadata: dict[str, str], tensors: dict[str, torch.Tensor], source: str | Path) -> Compressor:
    cls = get_registry().get(metadata.get("method", "<missing>"))
    return cls.from_saved(metadata, tensors, source=source)


def list_compressors() -> list[CompressorInfo]:
    """Every registered compressor: name, budgets, summary and the package that registered it."""
    return get_registry().infos()
