"""The Compressor base class every method (built-in or third-party) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import pydantic
import torch

from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError, NotFittedError, did_you_mean
from adaptemb.ranking import top_k
from adaptemb.validation import as_matrix, as_vector, check_budget

_Self = TypeVar("_Self", bound="Compressor")
Array = Any  # a numpy array or torch tensor; validated at run time by adaptemb.validation


class CompressorConfig(pydantic.BaseModel):
    """Base of every method's configuration. Unknown fields are errors, values are bounded."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, validate_default=True)

    seed: int = pydantic.Field(0, ge=0, description="Random seed; equal seeds give identical codes.")


@dataclass(frozen=True)
class Budgets:
    """The budgets ``k`` (active dims per code) a fitted compressor can encode at."""

    low: int
    high: int
    default: int

    @classmethod
    def unbudgeted(cls, dim: int) -> Budgets:
        """The budgets of a method without one: it always keeps all ``dim`` dims."""
        return cls(low=dim, high=dim, default=dim)

    @property
    def fixed(self) -> bool:
        """True for methods without a budget: they always keep ``high`` dims."""
        return self.low == self.high

    def resolve(self, k: int | None, method: str) -> int:
        """Return the budget to use for a requested ``k`` (``None`` means the default)."""
        if k is None:
            return self.default
        is_int = isinstance(k, (int, np.integer)) and not isinstance(k, bool)
        if self.fixed and is_int and k != self.high:
            raise ValueError(
                f"{method} has no budget: it always keeps all {self.high} dims; "
                f"pass k=None (or k={self.high}), got k={k!r}"
            )
        return check_budget(k, low=self.low, high=self.high, method=method)


class Compressor(ABC):
    """Fit on frozen embeddings once, then encode at any supported budget ``k``.

    Subclasses set ``name``, ``Config`` and ``budget_help``, and implement ``_fit``, ``_encode``,
    ``_budgets``, ``_state`` and ``_set_state`` (plus ``_decode`` where the method can decode).
    Inputs reach those hooks already validated, as float32 CPU tensors.
    """

    name: ClassVar[str]
    """Registered method name, e.g. ``"svd"``."""
    Config: ClassVar[type[CompressorConfig]] = CompressorConfig
    budget_help: ClassVar[str] = ""
    """One line saying what ``k`` means for this method, shown by ``adaptemb plugins``."""
    fit_inputs: ClassVar[frozenset[str]] = frozenset()
    """Extra supervision ``fit`` accepts: a subset of ``{"pairs", "labels"}``."""
    test_params: ClassVar[dict[str, Any]] = {}
    """Small, fast settings the contract suite (``adaptemb.testing``) fits with."""

    def __init__(self, config: CompressorConfig | None = None, **params: Any) -> None:
        if config is not None and params:
            raise TypeError("pass either a config object or keyword parameters, not both")
        self.config = config if config is not None else self.make_config(**params)
        if not isinstance(self.config, self.Config):
            raise TypeError(f"{self.name} needs a {self.Config.__name__}; got {type(self.config).__name__}")
        self.dim: int | None = None
        self.fit_report: dict[str, Any] | None = None
        """What the last fit measured (losses, dead latents, time, device), for learned methods."""

    @classmethod
    def make_config(cls, **params: Any) -> CompressorConfig:
        """Validate keyword parameters into this method's config, with errors that list valid ones."""
        try:
            return cls.Config(**params)
        except pydantic.ValidationError as err:
            raise InvalidConfigError(_config_error_message(cls, err)) from None

    @classmethod
    def parameters(cls) -> dict[str, str]:
        """Each configurable parameter with its default and description, for help texts."""
        return {
            name: f"{field.description or ''} (default {field.default!r})".strip()
            for name, field in cls.Config.model_fields.items()
        }

    @property
    def is_fitted(self) -> bool:
        return self.dim is not None

    def fit(self: _Self, x: Array, *, pairs: tuple[Array, Array] | None = None, labels: Array | None = None) -> _Self:  # noqa: PYI019 (typing.Self is 3.11+; 3.10 is supported)
        """Fit on embeddings ``x`` (n, d); ``pairs`` or ``labels`` where the method learns from them."""
        matrix = as_matrix(x)
        supervision: dict[str, Any] = {}
        if pairs is not None:
            supervision["pairs"] = self._check_pairs(pairs, matrix.shape[1])
        if labels is not None:
            self._require_fit_input("labels")
            supervision["labels"] = torch.from_numpy(
                as_vector(labels, name="labels", length=matrix.shape[0], integer=True).astype(np.int64)
            )
        self._fit(matrix, **supervision)
        self.dim = matrix.shape[1]
        return self

    def budgets(self) -> Budgets:
        """The budgets this fitted compressor supports."""
        self._require_fitted()
        return self._budgets()

    def encode(self, x: Array, k: int | None = None, *, batch_size: int = 65536) -> Codes:
        """Encode embeddings ``x`` (n, d) at budget ``k`` (``None``: the method's default)."""
        self._require_fitted()
        budget = self.budgets().resolve(k, self.name)
        matrix = as_matrix(x, dim=self.dim)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        with torch.inference_mode():
            parts = [self._encode(matrix[i : i + batch_size], budget) for i in range(0, len(matrix), batch_size)]
        return parts[0] if len(parts) == 1 else type(parts[0]).concat(parts)

    def encode_queries(self, x: Array, k: int | None = None) -> Codes:
        """Encode queries for ``score``. Same as ``encode`` unless the method scores asymmetrically
        (for example a dense query projected through a decoder against sparse document codes)."""
        return self.encode(x, k=k)

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Scores (n_queries, n_docs) of ``encode_queries`` output against ``encode`` output."""
        return query_codes.similarity(doc_codes)

    def decode(self, codes: Codes) -> np.ndarray:
        """Reconstruct (n, d) float32 embeddings from codes, for methods that can."""
        self._require_fitted()
        with torch.inference_mode():
            return self._decode(codes).float().cpu().numpy()

    def search(self, queries: Array, doc_codes: Codes, top_k: int = 10, *, k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact search: encode ``queries`` at ``k`` and return (scores, ids), each (n_queries, top_k)."""
        return _top_k_checked(self.score(self.encode_queries(queries, k=k), doc_codes), top_k)

    def export_onnx(self, path: str | Path, k: int | None = None, *, sample: Array | None = None) -> Any:
        """Export the encoder at budget ``k`` to ONNX and check it against onnxruntime.

        Returns the parity measured on ``sample`` rows (``adaptemb.export.OnnxParity``); the file is
        written only when onnxruntime reproduces ``encode``. Needs ``pip install 'adaptemb[onnx]'``.
        """
        from adaptemb.export import export_onnx

        self._require_fitted()
        return export_onnx(self, path, k, sample=sample)

    def save(self, path: str | Path) -> Path:
        """Write this fitted compressor to one safetensors file (atomically) and return its path."""
        from adaptemb.serialization import save_compressor

        self._require_fitted()
        return save_compressor(self, path)

    @classmethod
    def load(cls, path: str | Path) -> Compressor:
        """Load a compressor saved by ``save``; called on a subclass it also checks the method."""
        from adaptemb.serialization import load_compressor

        compressor = load_compressor(path)
        if cls is not Compressor and not isinstance(compressor, cls):
            raise TypeError(f"{path} holds a {compressor.name!r} compressor, not {cls.name!r}")
        return compressor

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The fitted tensors, contiguous and on the CPU (what ``save`` writes)."""
        self._require_fitted()
        return {key: t.detach().cpu().contiguous() for key, t in self._state().items()}

    def restore(self, dim: int, tensors: dict[str, torch.Tensor]) -> None:
        """Set the fitted state from ``state_tensors()`` output (used by ``load``)."""
        self._set_state(tensors)
        self.dim = dim

    def __repr__(self) -> str:
        fitted = f"dim={self.dim}" if self.is_fitted else "unfitted"
        return f"{type(self).__name__}({fitted}, config={self.config!r})"

    @property
    def generator(self) -> torch.Generator:
        """A CPU generator seeded from the config, fresh on every access."""
        return torch.Generator().manual_seed(self.config.seed)

    # -- what a method implements -------------------------------------------------------------

    @abstractmethod
    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        """Learn from validated float32 embeddings (and ``pairs``/``labels`` if accepted)."""

    @abstractmethod
    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        """Encode a validated batch at a resolved budget ``k``."""

    @abstractmethod
    def _budgets(self) -> Budgets:
        """The budget range once fitted (``self.dim`` is set)."""

    @abstractmethod
    def _state(self) -> dict[str, torch.Tensor]:
        """Tensors that, with the config and ``dim``, fully determine the fitted compressor."""

    @abstractmethod
    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore what ``_state`` returned; raise ``KeyError``/``ValueError`` on missing or bad tensors."""

    def _decode(self, codes: Codes) -> torch.Tensor:
        raise NotImplementedError(f"{self.name} cannot decode codes back to embeddings")

    def _onnx_encoder(self, k: int) -> torch.nn.Module:
        """A module mapping a float32 batch to the arrays of ``encode(x, k).to_arrays()``, in the
        order of its ``output_names`` attribute (shared tables excluded). Enables ONNX export."""
        raise NotImplementedError(f"{self.name} does not support ONNX export")

    # -- helpers ------------------------------------------------------------------------------

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"this {self.name} compressor is not fitted; call fit(embeddings) first")

    def _require_fit_input(self, kind: str) -> None:
        if kind not in self.fit_inputs:
            accepted = ", ".join(sorted(self.fit_inputs)) or "only the embeddings"
            raise InvalidConfigError(f"{self.name} does not learn from {kind}; it accepts {accepted}")

    def _check_pairs(self, pairs: tuple[Array, Array], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        self._require_fit_input("pairs")
        if not isinstance(pairs, (tuple, list)) or len(pairs) != 2:
            raise TypeError("pairs must be a tuple (anchors, positives) of two (m, d) arrays")
        anchors = as_matrix(pairs[0], name="pair anchors", dim=dim)
        positives = as_matrix(pairs[1], name="pair positives", dim=dim)
        if anchors.shape != positives.shape:
            raise ValueError(f"pair anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} differ in shape")
        return anchors, positives


def _top_k_checked(scores: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    if count < 1:
        raise ValueError(f"top_k must be >= 1; got {count}")
    return top_k(scores, min(count, scores.shape[1]))


def _config_error_message(cls: type[Compressor], err: pydantic.ValidationError) -> str:
    valid = ", ".join(f"{name}={field.default!r}" for name, field in cls.Config.model_fields.items())
    problems = []
    for item in err.errors():
        field = ".".join(str(p) for p in item["loc"]) or "config"
        if item["type"] == "extra_forbidden":
            problems.append(f"unknown parameter {field!r}{did_you_mean(field, cls.Config.model_fields)}")
        else:
            problems.append(f"{field}: {item['msg']} (got {item.get('input')!r})")
    return f"invalid parameters for {cls.name}: {'; '.join(problems)}. Valid parameters (defaults): {valid}"
