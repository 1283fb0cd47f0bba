"""The core of every compressor: its contract (config, declared capabilities, fit, encode, decode, score,
budgets, state) and the hooks a method implements.

Nothing here searches, saves or exports: ``adaptemb.indexing.Indexing`` (``index``, ``search``),
``adaptemb.serialization.Persistence`` (``save``, ``load``) and ``adaptemb.onnx.head.OnnxExport``
(``export_onnx``) add those, and ``adaptemb.method.Compressor``, the class every method subclasses
(``adaptemb.Compressor``), composes them with ``CompressorCore``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import pydantic
import torch

from adaptemb.budgets import Budgets, largest_budget_within
from adaptemb.capabilities import Capabilities
from adaptemb.codes import Codes
from adaptemb.config import CompressorConfig, config_error_message
from adaptemb.errors import (
    InvalidConfigError,
    NotFittedError,
)
from adaptemb.fitting import fit_compressor
from adaptemb.inputs import InputOptions, InputSpec, IntegerEmbeddings, ReadRows, takes_input_options
from adaptemb.rows import RowStream
from adaptemb.threads import compute_threads, small_batch_threads
from adaptemb.validation import as_matrix

if TYPE_CHECKING:
    from typing_extensions import Unpack

_Self = TypeVar("_Self", bound="CompressorCore")
Array = Any  # a numpy array or torch tensor; validated at run time by adaptemb.validation


class CompressorCore(Capabilities, ABC):
    """Fit on frozen embeddings once, then encode at any supported budget ``k``: the contract of a compressor.

    A method sets ``name``, ``Config`` and ``budget_help`` and implements the hooks below (``_fit``, ``_encode``,
    ``_budgets``, ``_state``, ``_set_state``; optionally ``_decode``, ``_encode_queries``, ``_fit_stream``). The
    public ``fit``, ``encode`` and ``encode_queries`` live here only: they read the input (``input_kind``),
    validate it and the budget, and call the hooks with float32 CPU tensors. What a method can do it declares in
    class attributes (``adaptemb.capabilities.Capabilities``; a property where the config decides), never guessed
    from what it overrides.
    """

    name: ClassVar[str]
    """Registered method name, e.g. ``"svd"``."""
    Config: ClassVar[type[CompressorConfig]] = CompressorConfig
    budget_help: ClassVar[str] = ""
    """One line saying what ``k`` means for this method, shown by ``adaptemb plugins``."""
    test_params: ClassVar[dict[str, Any]] = {}
    """Small, fast settings the contract suite (``adaptemb.testing``) fits with."""
    doc_kind: ClassVar[str | None] = None
    """The code kind ``encode`` emits (e.g. ``"sparse"``); None: read from the codes at index time."""

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
            raise InvalidConfigError(config_error_message(cls.name, cls.Config, err)) from None

    @classmethod
    def parameters(cls) -> dict[str, str]:
        """Each configurable parameter with its default and description, for help texts."""
        fields = cls.Config.model_fields.items()
        return {name: f"{field.description or ''} (default {field.default!r})".strip() for name, field in fields}

    @property
    def is_fitted(self) -> bool:
        return self.dim is not None

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"this {self.name} compressor is not fitted; call fit(embeddings) first")

    @property
    def query_kind(self) -> str | None:
        """The code kind ``encode_queries`` emits: ``doc_kind`` for ``symmetric`` methods (no ``doc_kind`` either:
        ``index`` reads it from the codes); None for the others unless they declare it (``index`` then searches
        by brute force through ``score``)."""
        return self.doc_kind if self.symmetric else None

    @takes_input_options
    def fit(self: _Self, x: Array | str | Path | Sequence[str | Path] | RowStream | Iterable[Array] | Callable[[], Iterable[Array]],  # noqa: PYI019 (typing.Self is 3.11+; 3.10 is supported)
            *, pairs: tuple[Array, Array] | None = None, labels: Array | None = None, queries: Array | None = None,
            key: str | None = None, **inputs: Unpack[InputOptions]) -> _Self:
        """Fit on embeddings ``x`` (n, d); ``pairs`` or ``labels`` where the method learns from them; ``queries``
        (m, d), an unlabelled sample of real queries, where the method makes fit-time choices by them (``"queries"``
        in ``fit_inputs``: each choice judged by how much of each query's exact float top-10 among the fit rows the
        candidate finds, instead of fit rows standing in for queries; others refuse it, ``adaptemb.fitting``).

        ``input_kind``: ``"float"`` (default), ``"int8"`` (an int8 array, read as ``input_offset + input_scale *
        x``; defaults 0.0 and 1.0, each a number or one per dimension) or ``"ubinary"`` (sign bits packed 8 per
        byte, uint8 (n, ceil(d / 8)), read as ±1; ``input_dim``: d when not 8 times the width); ``pairs`` are
        read alike. A method listing the kind in ``accepts_input_kinds`` keeps the integers as its codes.

        ``x`` may also be larger than memory: a path or list of paths (``key`` names the column or tensor), a list
        of 2-D arrays, a callable returning a fresh iterator of them, or a :class:`~adaptemb.rows.RowStream`:
        methods that ``trains_on_stream`` read every row once per epoch, the others fit on a uniform sample of
        ``stream_sample_rows`` rows (``fit_report["stream"]`` says which). ``labels`` need the rows in memory.
        A method that encodes directions (``normalizes_rows``) leaves all-zero rows out, counted in
        ``fit_report["zero_rows_skipped"]`` with one ``ZeroRowsWarning`` (``adaptemb.fitting``).
        """
        return self.fit_as(x, InputSpec.of(**inputs), pairs=pairs, labels=labels, queries=queries, key=key)

    def fit_as(self: _Self, x: Any, spec: InputSpec, *, pairs: tuple[Array, Array] | None = None,  # noqa: PYI019
               labels: Array | None = None, queries: Array | None = None, key: str | None = None) -> _Self:
        """``fit`` with its input options as one ``InputSpec``; ``x`` may be rows read already (``ReadRows``), which
        nothing reads again (``adaptemb.compress`` fits and encodes what it read once)."""
        self.fit_report = None
        fit_compressor(self, x, pairs=pairs, labels=labels, queries=queries, key=key, spec=spec)
        return self

    def budgets(self) -> Budgets:
        """The budgets this fitted compressor supports."""
        self._require_fitted()
        return self._budgets()

    @takes_input_options
    def encode(self, x: Array, k: int | None = None, *, bytes: float | None = None, batch_size: int = 65536,
               **inputs: Unpack[InputOptions]) -> Codes:
        """Encode embeddings ``x`` (n, d) at budget ``k`` (``None``: the method's default, or its natural mode
        where it has one: ``natural_budget``), ``batch_size`` rows at a time, through the method's ``_encode``.

        ``bytes``: instead of ``k``, the largest budget whose codes take at most this many bytes per vector
        (``budget_within_bytes``). ``input_kind`` / ``input_scale`` / ``input_offset`` / ``input_dim`` read integer
        embeddings as ``fit`` does."""
        if bytes is not None:
            k = self.budget_within_bytes(bytes, k)
        return self.encode_as(x, InputSpec.of(**inputs), k, batch_size=batch_size)

    def encode_as(self, x: Any, spec: InputSpec, k: int | None = None, *, batch_size: int = 65536) -> Codes:
        """``encode`` (at a budget ``k``) with its input options as one ``InputSpec``; ``x`` may be rows read already
        (``ReadRows``: the rows ``fit_as`` was given), which nothing reads again."""
        read, kept = _as_given(self, x, spec, "embeddings", k, keep=True)
        if kept is not None:
            return kept
        self._require_fitted()
        budget = None if k is None and self.natural_budget else self.budgets().resolve(k, self.name)
        matrix = read.floats(self.dim)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        with torch.inference_mode():
            parts = [self._encode_natural(block) if budget is None else self._encode(block, budget)
                     for block in (matrix[i : i + batch_size] for i in range(0, len(matrix), batch_size))]
        return parts[0] if len(parts) == 1 else type(parts[0]).concat(parts)

    @takes_input_options
    def encode_queries(self, x: Array, k: int | None = None, **inputs: Unpack[InputOptions]) -> Codes:
        """Encode queries for ``score``: ``encode(x, k)`` for ``symmetric`` methods; the others encode them their
        own way, ``_encode_queries`` (e.g. a dense query projected through a decoder against sparse documents).
        ``input_kind`` and its options read integer queries as ``fit`` does."""
        read, kept = _as_given(self, x, InputSpec.of(**inputs), "queries", k, keep=self.symmetric)
        if self.symmetric:
            return kept if kept is not None else self.encode(read.rows(), k=k)
        self._require_fitted()
        budget = None if k is None and self.natural_budget else self.budgets().resolve(k, self.name)
        matrix = read.floats(self.dim)
        with torch.inference_mode(), compute_threads(small_batch_threads(matrix.numel())):  # see small_batch_threads
            return self._encode_queries(matrix, budget)

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Scores (n_queries, n_docs) of ``encode_queries`` output against ``encode`` output."""
        return query_codes.similarity(doc_codes)

    def decode(self, codes: Codes) -> np.ndarray:
        """Reconstruct (n, d) float32 embeddings from codes, for methods that can."""
        self._require_fitted()
        _check_decodable(self, codes)
        with torch.inference_mode():
            return self._decode(codes).float().cpu().numpy()

    def budget_for_bytes(self, nbytes: float, sample: Array | None = None) -> int | None:
        """The largest budget whose codes take at most ``nbytes`` per vector (None: even the smallest takes more);
        how ``adaptemb bench --bytes`` maps a byte budget to each method's ``k``. By default the codes of ``sample``
        rows (64 seeded Gaussian rows when None) are measured, size growing with ``k`` (``largest_budget_within``);
        a method whose sizes are known in closed form, or fitted for one budget only, overrides this."""
        self._require_fitted()
        options = self.budgets().options()
        assert self.dim is not None
        rows = torch.randn(64, self.dim, generator=self.generator) if sample is None else as_matrix(
            sample, name="sample", dim=self.dim)
        return largest_budget_within(nbytes, options, lambda k: self.encode(rows, k=k).bytes_per_vector)

    def budget_within_bytes(self, nbytes: float, k: int | None = None) -> int:
        """The budget ``encode(x, bytes=nbytes)`` encodes at: ``budget_for_bytes(nbytes)`` (the mapping a method may
        override, None where nothing fits), checked; ``encode``, ``encode_files`` and the CLI's ``-b`` resolve a byte
        budget through it. ``InvalidConfigError`` when ``k`` (a budget the caller was also given) is not None, when
        ``nbytes`` is not a positive number, or when no budget fits it (naming the smallest code's size)."""
        if k is not None:
            raise InvalidConfigError(f"pass k={k!r} or bytes={nbytes!r}, not both: bytes= picks the budget k",
                                     parameter="bytes", value=nbytes, valid="bytes=None when k is given")
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating)) or not nbytes > 0:
            raise InvalidConfigError(f"bytes must be a positive number of bytes per vector; got {nbytes!r}",
                                     parameter="bytes", value=nbytes, valid="a number > 0")
        self._require_fitted()
        budget = self.budget_for_bytes(float(nbytes))
        if budget is None:
            raise _nothing_fits(self, nbytes)
        return budget

    def budget_start(self: _Self, k: int) -> _Self | None:  # noqa: PYI019 (typing.Self is 3.11+; 3.10 is supported)
        """An unfitted compressor of this method and config for budget ``k`` that starts from this fit (``fit`` it
        on the same rows), or None (the default: nothing carries over; fit a new one with ``k``). A method fitted
        for one budget at a time overrides this when part of a fit serves other budgets as a starting point (opq:
        its rotation); ``adaptemb bench`` refits per budget through it."""
        self._require_fitted()
        return None

    def stand_in_queries(self, doc_codes: Codes) -> Codes | None:
        """Query codes standing in for real queries near these documents, made from their codes alone: what an
        approximate index computes its routing basis and its calibration from (``adaptemb.ann.build``). None (the
        default): the index makes them itself (decoded documents encoded as queries, else its scorer's stand-ins). A
        method whose codes keep less than its queries overrides this (a composition before sign bits: each sign as
        the mean query value the fit rows had with it)."""
        self._require_fitted()
        return None

    def details(self) -> dict[str, Any]:
        """What a fitted compressor holds beyond its config and budgets, for people (``adaptemb info``): JSON-ready
        values, e.g. csr's measured choice of k and value bits per byte budget. None by default."""
        return {}

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

    def _fit_stream(self, stream: RowStream, **supervision: Any) -> None:
        """Learn from a stream of rows too large to hold. By default: ``_fit`` on a uniform sample of
        ``stream_sample_rows`` rows (what faiss-style quantisers and PCA need); methods that train by
        minibatches override this to read every row (``RowStream.shuffled_batches``, ``adaptemb.train``) and
        declare ``trains_on_stream = True``."""
        _, sample = stream.sample(self.stream_sample_rows, self.config.seed)
        self._fit(sample, **supervision)

    @abstractmethod
    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        """Encode a validated batch at a resolved budget ``k``."""

    def _encode_natural(self, x: torch.Tensor) -> Codes:
        """Encode a validated batch in the natural mode (``encode(x)`` of a method that declares ``natural_budget``)."""
        raise NotImplementedError(f"{self.name} declares natural_budget but has no _encode_natural")

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        """The query codes of a method that is not ``symmetric``: validated float32 queries, a resolved budget
        ``k`` (None: the natural mode of a ``natural_budget`` method). By default like documents, ``encode``."""
        return self.encode(x, k=k)

    @abstractmethod
    def _budgets(self) -> Budgets:
        """The budget range once fitted (``self.dim`` is set)."""

    @abstractmethod
    def _state(self) -> dict[str, torch.Tensor]:
        """Tensors that, with the config and ``dim``, fully determine the fitted compressor."""

    @abstractmethod
    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Restore what ``_state`` returned; raise ``KeyError``/``ValueError`` on missing or bad tensors."""

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]] | None:
        """The shape of each tensor ``_state`` returns for this config and ``dim`` (an int: an exact size; a string:
        a size the fit chose, one in every tensor naming it), checked at load; None (the default): not declared."""
        return None

    def _decode(self, codes: Codes) -> torch.Tensor:
        """Reconstruct validated codes as (n, d) embeddings (a method that implements it declares ``decodes``)."""
        raise NotImplementedError(f"{self.name} cannot decode codes back to embeddings")

    def _fit_passthrough(self, given: IntegerEmbeddings, **supervision: Any) -> None:
        """Fit from integer embeddings of a kind in ``accepts_input_kinds``, kept as they are (no calibration)."""
        raise NotImplementedError(f"{self.name} lists {given.kind!r} in accepts_input_kinds but has no _fit_passthrough")

    def _encode_passthrough(self, given: IntegerEmbeddings) -> Codes:
        """The codes of integer embeddings of a kind in ``accepts_input_kinds``: the given integers themselves."""
        raise NotImplementedError(f"{self.name} lists {given.kind!r} in accepts_input_kinds but has no _encode_passthrough")


def _nothing_fits(compressor: CompressorCore, nbytes: float) -> InvalidConfigError:
    """The error of a byte budget below the compressor's smallest code, naming that code's size."""
    smallest = compressor.budgets().options()[0]
    assert compressor.dim is not None
    size = compressor.encode(torch.randn(1, compressor.dim, generator=compressor.generator), k=smallest).bytes_per_vector
    return InvalidConfigError(f"no budget of {compressor.name} fits {nbytes} bytes per vector: its smallest code "
                              f"(k={smallest}) takes {size:g}", parameter="bytes", value=nbytes, valid=f"bytes >= {size:g}")


def _check_decodable(compressor: CompressorCore, codes: Codes) -> None:
    """Codes of the compressor's kind, no wider than its largest budget (else a ValueError naming both)."""
    if not isinstance(codes, Codes):
        raise TypeError(f"decode() needs codes from encode(); got {type(codes).__name__}")
    name, kind = compressor.name, compressor.doc_kind
    if kind is not None and codes.kind != kind:
        raise TypeError(f"{name} decodes its own {kind!r} codes; got {codes.kind!r} codes")
    counts, budgets = codes.active_counts(), compressor.budgets()
    if budgets.bounds_active and len(counts) and int(counts.max()) > budgets.high:
        raise ValueError(
            f"codes have {int(counts.max())} active dims, but this {name} compressor encodes at most "
            f"{budgets.high} (fitted on d={compressor.dim}); decode codes from this compressor's encode()"
        )


def _as_given(compressor: CompressorCore, x: Any, spec: InputSpec, name: str, k: int | None, *,
              keep: bool) -> tuple[ReadRows, Codes | None]:
    """(rows, None): ``x`` read as ``spec`` says (``adaptemb.inputs``), once (rows read already stay as they are):
    float input as given (only an integer array is refused here, naming ``input_kind``), other integer input as
    its dequantised float32 rows. (rows, codes): integer input of a kind the method lists in ``accepts_input_kinds``
    (when ``keep``) is its codes already (``_encode_passthrough``, the budget ``k`` checked)."""
    if isinstance(x, ReadRows):
        read = x
    elif spec.is_float:
        read = spec.read_rows(x, name=name)
    else:
        compressor._require_fitted()
        read = spec.read_rows(x, name=name, dim=compressor.dim)
    given = read.given
    if keep and given is not None and given.kind in compressor.accepts_input_kinds:
        compressor._require_fitted()
        compressor.budgets().resolve(k, compressor.name)
        return read, compressor._encode_passthrough(given)
    return read, None
