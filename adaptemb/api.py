"""The one-call API: fit, compress, load and discover compressors by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adaptemb.codes import Codes
from adaptemb.compressor import Array, Compressor
from adaptemb.errors import InvalidConfigError
from adaptemb.registry import CompressorInfo, get_registry


def get_compressor(method: str, **params: Any) -> Compressor:
    """An unfitted compressor of ``method`` configured with ``params``."""
    return get_registry().get(method)(**params)


def fit(
    emb: Array,
    method: str,
    *,
    k: int | None = None,
    pairs: tuple[Array, Array] | None = None,
    labels: Array | None = None,
    **params: Any,
) -> Compressor:
    """Fit ``method`` on embeddings ``emb`` (n, d) and return the fitted compressor.

    ``k`` is the method's budget parameter (training budget for learned sparse methods, default
    encode budget for the others); methods without a budget reject it. ``pairs``/``labels`` go to
    methods that learn from them.
    """
    cls = get_registry().get(method)
    if k is not None:
        if "k" not in cls.Config.model_fields:
            raise InvalidConfigError(
                f"{method} has no budget parameter k: it always keeps every dimension; omit k"
            )
        params["k"] = k
    return cls(**params).fit(emb, pairs=pairs, labels=labels)


def compress(
    emb: Array,
    method: str,
    *,
    k: int | None = None,
    pairs: tuple[Array, Array] | None = None,
    labels: Array | None = None,
    **params: Any,
) -> Codes:
    """Fit ``method`` on ``emb`` and return the codes of ``emb`` at budget ``k``."""
    compressor = fit(emb, method, k=k, pairs=pairs, labels=labels, **params)
    return compressor.encode(emb, k=k)


def load(path: str | Path) -> Compressor:
    """Load a compressor saved with ``Compressor.save``."""
    return Compressor.load(path)


def list_compressors() -> list[CompressorInfo]:
    """Every registered compressor: name, budgets, summary and the package that registered it."""
    return get_registry().infos()
