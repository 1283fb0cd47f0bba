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
from adaptemb.compressor import Array
from adaptemb.errors import CorruptFileError, InvalidConfigError
from adaptemb.index.brute import ScoreIndex
from adaptemb.indexing import BRUTE_FORCE, CompressedIndex
from adaptemb.inputs import InputSpec, take_input_options, takes_input_options
from adaptemb.method import Compressor
from adaptemb.registry import CompressorInfo, get_index_registry, get_registry, plugin_manager
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


@takes_input_options
def fit(
    emb: Array,
    method: str,
    *,
    k: int | None = None,
    bytes: int | Sequence[int] | None = None,
    pairs: tuple[Array, Array] | None = None,
    labels: Array | None = None,
    queries: Array | None = None,
    key: str | None = None,
    **params: Any,
) -> Compressor:
    """Fit ``method`` on embeddings ``emb`` (n, d) and return the fitted compressor.

    ``emb`` may be larger than memory: file paths (``key`` names the column or tensor), a list of 2-D arrays
    or a callable returning a fresh iterator of them (see ``Compressor.fit``). ``k`` is the method's budget
    parameter (training budget for learned sparse methods, default encode budget for the others); methods
    without a budget accept only ``k=None`` or ``k=d``, the same rule as ``encode``. ``bytes`` (one number or a
    list): the bytes per vector to fit for, for a method whose config has ``byte_budgets`` (csr: heads trained
    for the budgets; compositions: the ranks prepared); others refuse it (fit, then ``encode(x, bytes=B)``).
    ``pairs``/``labels`` go to methods that learn from them; ``queries`` (an unlabelled sample of real queries) to
    methods whose fit-time choices it judges (``Compressor.fit``); the other ``params`` configure the method.

    Integer embeddings you already have come in with ``input_kind`` (``adaptemb.inputs.InputOptions``): ``"int8"``
    (an int8 array, dequantised as ``input_offset + input_scale * x``, defaults 0.0 and 1.0, each a number or one
    per dimension) or ``"ubinary"`` (sign bits packed 8 per byte, uint8 (n, ceil(d / 8)), read as ±1;
    ``input_dim`` = d when d is not 8 times the width). ``int8`` keeps int8 input as its codes and ``binary``
    (``threshold="zero"``) keeps packed bits as its codes; see ``adaptemb.inputs``.
    """
    compressor, spec = _configured(emb, method, k=k, nbytes=bytes, params=params)
    return compressor.fit_as(emb, spec, pairs=pairs, labels=labels, queries=queries, key=key)


def _configured(emb: Any, method: str, *, k: int | None, nbytes: int | Sequence[int] | None,
                params: dict[str, Any]) -> tuple[Compressor, InputSpec]:
    """An unfitted ``method`` configured with ``params`` (less the input options: the spec returned) and the budget
    it is fitted for: ``k`` (a method without a budget checks it as ``encode`` does, against the dimension of
    ``emb`` when its shape tells it) and ``nbytes``."""
    inputs = take_input_options(params)
    cls = get_registry().get(method)
    spec = InputSpec.of(**inputs)
    width = spec.width_of(emb)  # from the shape: validating emb here too would read it twice (fit validates it)
    if k is not None and "k" not in cls.Config.model_fields:  # no budget: the rule encode applies
        if width is not None:
            Budgets.unbudgeted(width).resolve(k, method)
    elif k is not None:
        params["k"] = k
    if nbytes is not None:
        if "byte_budgets" not in cls.Config.model_fields:
            raise InvalidConfigError(f"{method} is not fitted for a byte budget (its config has no byte_budgets); fit "
                                     f"it, then encode(x, bytes={nbytes!r})", parameter="bytes", value=nbytes,
                                     valid=_fitted_for_bytes())
        params["byte_budgets"] = nbytes  # one number or several: the config's ByteBudgets reads both
    return cls(**params), spec


def _fitted_for_bytes() -> str:
    """The registered methods fitted for byte budgets (their config has ``byte_budgets``), and compositions."""
    registry = get_registry()
    names = [name for name in registry.names() if "byte_budgets" in registry.get(name).Config.model_fields]
    return ", ".join([*names, "compositions (projection+quantizer)"])


@takes_input_options
def compress(
    emb: Array,
    method: str,
    *,
    k: int | None = None,
    pairs: tuple[Array, Array] | None = None,
    labels: Array | None = None,
    queries: Array | None = None,
    **params: Any,
) -> Codes:
    """Fit ``method`` on ``emb`` and return the codes of ``emb`` at budget ``k`` (an array: for rows larger than
    memory, ``fit`` the files and write their codes with ``encode_files``). ``input_kind`` and its options read
    integer embeddings, as in ``fit``; ``queries`` a sample of real queries, as in ``fit``. ``emb`` is read and
    validated once, for the fit and the codes alike."""
    if RowStream.of(emb) is not None:
        raise TypeError("compress() needs the embeddings as an array; for files or batches larger than memory, "
                        "fit(paths, method) then encode_files(paths, compressor, out_dir)")
    compressor, spec = _configured(emb, method, k=k, nbytes=None, params=params)
    read = spec.read_rows(emb)
    return compressor.fit_as(read, spec, pairs=pairs, labels=labels, queries=queries).encode_as(read, spec, k)


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
    plugin_manager()  # every plugin loaded: a kind a plugin defines registers when its module is imported
    return read_codes(path)


def _compressor(metadata: dict[str, str], tensors: dict[str, torch.Tensor], source: str | Path) -> Compressor:
    cls = get_registry().get(metadata.get("method", "<missing>"))
    return cls.from_saved(metadata, tensors, source=source)


def list_compressors() -> list[CompressorInfo]:
    """Every registered compressor: name, budgets, summary and the package that registered it."""
    return get_registry().infos()
