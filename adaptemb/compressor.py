"""The Compressor base class every method (built-in or third-party) implements."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import pydantic
import torch

from adaptemb._version import __version__
from adaptemb.budgets import Budgets, largest_budget_within
from adaptemb.codes import Codes
from adaptemb.config import CompressorConfig, config_error_message
from adaptemb.errors import (
    CorruptFileError,
    InvalidConfigError,
    NotFittedError,
    UnsupportedExportError,
)
from adaptemb.export import OnnxParity, export_checked
from adaptemb.fitting import fit_compressor
from adaptemb.index.bound import CompressedIndex
from adaptemb.index.brute import ScoreIndex
from adaptemb.inputs import InputKind, InputSpec, IntegerEmbeddings
from adaptemb.registry import get_index_registry
from adaptemb.rows import RowStream
from adaptemb.serialization import (
    COMPRESSOR_FORMAT,
    FORMAT_VERSION,
    check_shapes,
    read_adaptemb_file,
    write_tensors,
)
from adaptemb.validation import as_matrix

_Self = TypeVar("_Self", bound="Compressor")
Array = Any  # a numpy array or torch tensor; validated at run time by adaptemb.validation


class Compressor(ABC):
    """Fit on frozen embeddings once, then encode at any supported budget ``k``.

    Subclasses set ``name``, ``Config`` and ``budget_help``, and implement ``_fit``, ``_encode``,
    ``_budgets``, ``_state`` and ``_set_state`` (plus ``_decode`` where the method can decode, ``_encode_queries``
    where it encodes queries its own way, and ``encoder`` where it exports to ONNX). The public ``fit``,
    ``encode`` and ``encode_queries`` are defined here only: they read the input (``input_kind``), validate it
    and the budget, and call those hooks with float32 CPU tensors. What a method can do it declares as class
    attributes (a property where it depends on the config), never found out by looking at what it overrides:
    ``doc_kind`` / ``symmetric`` / ``query_kind`` (which index backend serves it), ``fit_inputs``,
    ``accepts_input_kinds``, ``normalizes_rows``, ``trains_on_stream``, ``natural_budget``, ``decodes`` and
    ``exportable``.
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
    doc_kind: ClassVar[str | None] = None
    """The code kind ``encode`` emits (e.g. ``"sparse"``); None: read from the codes at index time."""
    stream_sample_rows: ClassVar[int] = 100_000
    """Rows of a uniform sample a fit from a stream draws: what ``_fit_stream`` fits on by default, and what a
    method that trains on every row of the stream takes its initialisation statistics from."""
    accepts_input_kinds: ClassVar[tuple[str, ...]] = ()
    """Integer input kinds (``"int8"``, ``"ubinary"``) this method keeps as its codes, without re-quantising:
    ``fit`` then calls ``_fit_passthrough`` and ``encode`` ``_encode_passthrough`` with the validated
    ``IntegerEmbeddings``. Every other method gets such input dequantised to float32 (see ``adaptemb.inputs``)."""
    symmetric: ClassVar[bool] = True
    """True when queries are encoded like documents (``encode_queries`` is ``encode``) and scored by the codes'
    own similarity, so the codes' own index backend serves them. A method that encodes queries its own way
    (``_encode_queries``) or scores otherwise (``score``) declares False, and the ``query_kind`` it emits."""
    normalizes_rows: ClassVar[bool] = False
    """True for methods that encode each row's direction (they L2-normalise rows first, with
    ``adaptemb.unit_rows``): scaling a row never changes its code. An all-zero row has no direction: ``fit``
    leaves such rows out (and pairs holding one), counts them in ``fit_report["zero_rows_skipped"]`` (and
    ``"zero_pairs_skipped"``) and warns once (``ZeroRowsWarning``); input whose every row is zero is a
    ``ValueError``. Such a method's ``encode`` (and ``encoder(k)``) must give a zero row the empty code of its
    kind (zero values, no active features; ``adaptemb.has_direction`` masks them), so a zero query scores 0."""
    trains_on_stream: ClassVar[bool] = False
    """True when a fit from a stream trains on every row (the method's ``_fit_stream`` reads minibatches);
    False when it fits on a uniform sample of ``stream_sample_rows`` rows (the default ``_fit_stream``)."""
    natural_budget: ClassVar[bool] = False
    """True when ``encode(x)`` with ``k=None`` encodes in the method's natural mode, ``_encode_natural(x)``:
    each row keeps its own number of active dims (at most ``budgets().default``); ``k=j`` still encodes at j."""
    decodes: ClassVar[bool] = False
    """True when ``decode`` reconstructs embeddings from codes (the method implements ``_decode``)."""

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
        return {
            name: f"{field.description or ''} (default {field.default!r})".strip()
            for name, field in cls.Config.model_fields.items()
        }

    @property
    def is_fitted(self) -> bool:
        return self.dim is not None

    @property
    def query_kind(self) -> str | None:
        """The code kind ``encode_queries`` emits: ``doc_kind`` for ``symmetric`` methods (with no ``doc_kind``
        either, ``index`` reads the kind from the codes); None for the others unless they declare it (a class
        attribute, or a property where it depends on the config): ``index`` then searches by brute force
        through ``score``."""
        return self.doc_kind if self.symmetric else None

    @property
    def exportable(self) -> bool:
        """True when ``encoder(k)`` gives the encode path as one torch module, so ``export_onnx`` and
        ``adaptemb.export_encoder`` can export this method. Defaults to whether the method overrides
        ``encoder``; a method that exports only some configurations overrides this property to say so."""
        return type(self).encoder is not Compressor.encoder

    def fit(self: _Self, x: Array | str | Path | Sequence[str | Path] | RowStream | Iterable[Array] | Callable[[], Iterable[Array]],  # noqa: PYI019 (typing.Self is 3.11+; 3.10 is supported)
            *, pairs: tuple[Array, Array] | None = None, labels: Array | None = None, key: str | None = None,
            input_kind: InputKind = "float", input_scale: Any = None, input_offset: Any = None,
            input_dim: int | None = None) -> _Self:
        """Fit on embeddings ``x`` (n, d); ``pairs`` or ``labels`` where the method learns from them.

        ``input_kind``: ``"float"`` (default), ``"int8"`` (an int8 array, read as ``input_offset + input_scale *
        x``; defaults 0.0 and 1.0, each a number or one per dimension) or ``"ubinary"`` (sign bits packed 8 per
        byte, uint8 (n, ceil(d / 8)), read as ±1; ``input_dim`` is d when it is not 8 times the width). A method
        listing the kind in ``accepts_input_kinds`` keeps the integers as its codes (``int8``; ``binary`` with
        ``threshold="zero"``). ``pairs`` are read with the same ``input_kind``. See ``adaptemb.inputs``.

        ``x`` may also be larger than memory: a path or list of paths (``.npy``, ``.parquet``, ``.safetensors``;
        ``key`` names the column or tensor), a list of 2-D arrays, a callable returning a fresh iterator of
        them, or a :class:`~adaptemb.rows.RowStream`. Methods that train by minibatches (``trains_on_stream``)
        then read every row once per epoch; the others fit on a uniform sample of ``stream_sample_rows`` rows.
        ``fit_report["stream"]`` says which. ``labels`` need the rows in memory; ``pairs`` are always arrays.

        All-zero rows are data. A method that encodes directions (``normalizes_rows``) learns from the other
        rows: zero rows (with their labels, and pairs whose query or document is zero) are left out, counted in
        ``fit_report["zero_rows_skipped"]`` / ``["zero_pairs_skipped"]``, with one ``ZeroRowsWarning``; input
        with no non-zero row is a ``ValueError``. Every other method fits on zero rows like on any row.
        """
        self.fit_report = None
        fit_compressor(self, x, pairs=pairs, labels=labels, key=key,
                       spec=InputSpec.of(input_kind, input_scale, input_offset, input_dim))
        return self

    def budgets(self) -> Budgets:
        """The budgets this fitted compressor supports."""
        self._require_fitted()
        return self._budgets()

    def encode(self, x: Array, k: int | None = None, *, batch_size: int = 65536, input_kind: InputKind = "float",
               input_scale: Any = None, input_offset: Any = None, input_dim: int | None = None) -> Codes:
        """Encode embeddings ``x`` (n, d) at budget ``k`` (``None``: the method's default, or its natural mode
        where it has one: ``natural_budget``), ``batch_size`` rows at a time, through the method's ``_encode``.

        ``input_kind`` / ``input_scale`` / ``input_offset`` / ``input_dim`` read integer embeddings as ``fit`` does."""
        rows = _as_given(self, x, InputSpec.of(input_kind, input_scale, input_offset, input_dim), "embeddings", keep=True)
        if isinstance(rows, IntegerEmbeddings):
            self.budgets().resolve(k, self.name)
            return self._encode_passthrough(rows)
        self._require_fitted()
        budget = None if k is None and self.natural_budget else self.budgets().resolve(k, self.name)
        matrix = as_matrix(rows, dim=self.dim)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {batch_size}")
        with torch.inference_mode():
            parts = [self._encode_natural(block) if budget is None else self._encode(block, budget)
                     for block in (matrix[i : i + batch_size] for i in range(0, len(matrix), batch_size))]
        return parts[0] if len(parts) == 1 else type(parts[0]).concat(parts)

    def encode_queries(self, x: Array, k: int | None = None, *, input_kind: InputKind = "float", input_scale: Any = None,
                       input_offset: Any = None, input_dim: int | None = None) -> Codes:
        """Encode queries for ``score``: ``encode(x, k)`` for ``symmetric`` methods; the others encode them their
        own way, ``_encode_queries`` (e.g. a dense query projected through a decoder against sparse documents).
        ``input_kind`` and its options read integer queries as ``fit`` does."""
        spec = InputSpec.of(input_kind, input_scale, input_offset, input_dim)
        rows = _as_given(self, x, spec, "queries", keep=self.symmetric)
        if isinstance(rows, IntegerEmbeddings):
            self.budgets().resolve(k, self.name)
            return self._encode_passthrough(rows)
        if self.symmetric:
            return self.encode(rows, k=k)
        self._require_fitted()
        budget = None if k is None and self.natural_budget else self.budgets().resolve(k, self.name)
        matrix = as_matrix(rows, name="queries", dim=self.dim)
        with torch.inference_mode():
            return self._encode_queries(matrix, budget)

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Scores (n_queries, n_docs) of ``encode_queries`` output against ``encode`` output."""
        return query_codes.similarity(doc_codes)

    def decode(self, codes: Codes) -> np.ndarray:
        """Reconstruct (n, d) float32 embeddings from codes, for methods that can."""
        self._require_fitted()
        self._check_decodable(codes)
        with torch.inference_mode():
            return self._decode(codes).float().cpu().numpy()

    def _check_decodable(self, codes: Codes) -> None:
        """Codes of this method's kind, no wider than its largest budget (else a ValueError naming both)."""
        if not isinstance(codes, Codes):
            raise TypeError(f"decode() needs codes from encode(); got {type(codes).__name__}")
        if self.doc_kind is not None and codes.kind != self.doc_kind:
            raise TypeError(f"{self.name} decodes its own {self.doc_kind!r} codes; got {codes.kind!r} codes")
        counts, budgets = codes.active_counts(), self.budgets()
        high = budgets.high
        if budgets.bounds_active and len(counts) and int(counts.max()) > high:
            raise ValueError(
                f"codes have {int(counts.max())} active dims, but this {self.name} compressor encodes at most "
                f"{high} (fitted on d={self.dim}); decode codes from this compressor's encode()"
            )

    def index(self, doc_codes: Codes, *, device: str = "auto", k: int | None = None, **options: Any) -> CompressedIndex:
        """A search index over ``doc_codes`` (from this compressor's ``encode``).

        The backend is the one registered for (``query_kind``, the documents' kind); ``options`` go to it
        (``backend``, ``query_batch``, ...) over the method's own ``index_options``. ``k`` is the budget
        raw queries are encoded at (default: the budget the documents were encoded at). A method whose
        kinds no backend serves is searched by brute force through ``score`` (``index.brute_force``).
        """
        self._require_fitted()
        if not isinstance(doc_codes, Codes):
            raise TypeError(f"index() needs codes from encode(); got {type(doc_codes).__name__}")
        budget = k if k is not None else self.query_budget(doc_codes)
        if budget is not None:
            self.budgets().resolve(budget, self.name)
        query_kind = self.query_kind or (doc_codes.kind if self.symmetric else None)
        backend = None if query_kind is None else get_index_registry().for_kinds(query_kind, doc_codes.kind)
        if backend is None:
            query_batch = options.get("query_batch", 512)
            return CompressedIndex(self, ScoreIndex(doc_codes, self.score, query_batch=query_batch), budget=budget)
        options = {"query_kind": query_kind, **self.index_options(doc_codes), **options}
        return CompressedIndex(self, backend(doc_codes, device=device, **options), budget=budget)

    def index_options(self, doc_codes: Codes) -> dict[str, Any]:
        """Backend options this method's scoring needs (e.g. per-document weights); none by default."""
        return {}

    def query_budget(self, doc_codes: Codes) -> int | None:
        """The budget raw queries are encoded at for these documents: their common active count when it is
        a valid budget (a fixed-k sparse code, a dense prefix), else None (the method's default). Empty codes
        (all-zero rows of a method that encodes directions) say nothing about the budget and are not counted."""
        budgets = self.budgets()
        counts = doc_codes.active_counts()
        counts = counts[counts > 0]
        if budgets.fixed or not len(counts) or not (counts == counts[0]).all():
            return None
        return int(counts[0]) if budgets.low <= counts[0] <= budgets.high else None

    def budget_for_bytes(self, nbytes: float, sample: Array | None = None) -> int | None:
        """The largest budget whose codes take at most ``nbytes`` per vector, or None when even the smallest
        takes more. How ``adaptemb bench --bytes`` maps a byte budget to each method's own ``k``.

        By default the codes of ``sample`` rows (64 seeded Gaussian rows when None; pass real rows for codes
        whose size depends on the data) are measured at candidate budgets, assuming size grows with ``k``
        (binary search). A method fitted for one budget only (``Budgets.per_fit``) overrides this to say
        which ``k`` another fit would need.
        """
        self._require_fitted()
        options = self.budgets().options()
        if sample is not None:
            rows = as_matrix(sample, name="sample", dim=self.dim)
        else:
            assert self.dim is not None
            rows = torch.randn(64, self.dim, generator=self.generator)

        return largest_budget_within(nbytes, options, lambda k: self.encode(rows, k=k).bytes_per_vector)

    def search(self, queries: Array, doc_codes: Codes, top_k: int = 10, *, k: int | None = None,
               input_kind: InputKind = "float", input_scale: Any = None, input_offset: Any = None,
               input_dim: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact search of ``queries`` (raw embeddings) in ``doc_codes``: (scores, ids), each (n_queries, top_k).

        Builds ``index(doc_codes, k=k)`` for this one call; build it once with ``index`` to search many times.
        ``input_kind`` and its options say how to read integer queries (as in ``fit``).
        """
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1; got {top_k!r}")
        return self.index(doc_codes, k=k).search(queries, top_k, input_kind=input_kind, input_scale=input_scale,
                                                 input_offset=input_offset, input_dim=input_dim)

    def encoder(self, k: int) -> torch.nn.Module:
        """The encode path at budget ``k`` as one torch module (the ONNX export path): float32 (n, d) in, a tuple
        of tensors out, named by its ``output_names`` like the arrays of ``encode(x, k).to_arrays()`` (shared
        tables such as int8 scales excluded). Methods that cannot export raise ``NotImplementedError``."""
        raise UnsupportedExportError(f"{self.name} does not support ONNX export (its exportable is False)")

    def export_onnx(self, path: str | Path, k: int | None = None, *, sample: Array | None = None) -> OnnxParity:
        """Export the encoder at budget ``k`` to ONNX and check it against onnxruntime.

        Returns the parity measured on ``sample`` rows (default: 64 seeded standard-normal rows; all-zero rows
        are fine); the file is written only when onnxruntime reproduces ``encode`` (as ``encoder_arrays`` lays it
        out). Needs ``pip install 'adaptemb[onnx]'``.
        """
        self._require_fitted()
        if not self.exportable:
            raise UnsupportedExportError(f"{self.name} cannot be exported to ONNX (its exportable is False)")
        budget = self.budgets().resolve(k, self.name)
        if sample is not None:
            rows = as_matrix(sample, name="sample", dim=self.dim)
        else:
            assert self.dim is not None
            rows = torch.randn(64, self.dim, generator=self.generator)
        module = self.encoder(budget)
        return export_checked(module, rows, path, list(module.output_names),
                              lambda x: self.encoder_arrays(self.encode(x, k=budget), budget))

    def encoder_arrays(self, codes: Codes, k: int) -> dict[str, np.ndarray]:
        """The arrays ``encoder(k)`` emits, by output name, for rows ``encode(rows, k)`` gave as ``codes``: what
        ``export_onnx`` checks the graph against. By default ``codes.to_arrays()``; a method whose encoder lays
        its codes out otherwise (``bsa``'s fixed ``indices``, which mark a zero row's empty set with -1) overrides it."""
        return codes.to_arrays()

    def file_metadata(self) -> dict[str, str]:
        """The string metadata a saved compressor carries (format, method, config, dim, version)."""
        self._require_fitted()
        return {
            "format": COMPRESSOR_FORMAT,
            "format_version": FORMAT_VERSION,
            "method": self.name,
            "config": self.config.model_dump_json(),
            "dim": str(self.dim),
            "adaptemb_version": __version__,
        }

    def save(self, path: str | Path) -> Path:
        """Write this fitted compressor to one safetensors file (atomically) and return its path."""
        return write_tensors(path, self.state_tensors(), self.file_metadata())

    @classmethod
    def load(cls: type[_Self], path: str | Path) -> _Self:  # noqa: PYI019 (typing.Self is 3.11+)
        """Load a ``cls`` compressor saved by ``save``; ``adaptemb.load(path)`` loads any method by name."""
        if cls is Compressor:
            raise TypeError("Compressor.load needs a method class (e.g. SVDCompressor.load); use adaptemb.load(path)")
        metadata, tensors = read_adaptemb_file(path, COMPRESSOR_FORMAT, "compressor")
        if metadata.get("method") != cls.name:
            raise TypeError(f"{path} holds a {metadata.get('method')!r} compressor, not {cls.name!r}")
        return cls.from_saved(metadata, tensors, source=path)

    @classmethod
    def from_saved(cls: type[_Self], metadata: dict[str, str], tensors: dict[str, torch.Tensor], *,  # noqa: PYI019
                   source: str | Path = "<memory>") -> _Self:
        """Rebuild a compressor from the metadata and tensors of a file ``save`` wrote."""
        unfit = f"the saved {cls.name} tensors do not fit its config and dim={metadata.get('dim')}"
        try:
            config = cls.Config.model_validate_json(metadata["config"])
            dim = int(metadata["dim"])
            compressor = cls(config=config)
            check_shapes(source, tensors, compressor._state_shapes(dim) or {}, unfit)
            compressor.restore(dim, tensors)
        except CorruptFileError:
            raise
        except RuntimeError as err:  # torch's words (e.g. a copy between two shapes): kept as the cause only
            raise CorruptFileError(f"{source}: {unfit}") from err
        except (KeyError, ValueError, TypeError, pydantic.ValidationError, json.JSONDecodeError) as err:
            raise CorruptFileError(f"{source} holds a damaged {cls.name!r} compressor: {err}") from None
        compressor._check_restored(source)
        return compressor

    def _check_restored(self, source: str | Path) -> None:
        """Encode one test row as document and as query: tensors whose shapes or values do not fit the
        config and ``dim`` fail here, at load, with a ``CorruptFileError``, not later in a user's encode."""
        assert self.dim is not None
        row = torch.full((1, self.dim), self.dim**-0.5)
        try:
            arrays = {**self.encode(row).to_arrays(), **self.encode_queries(row).to_arrays()}
        except (RuntimeError, ValueError, TypeError, IndexError, KeyError) as err:  # its words: the cause only
            raise CorruptFileError(f"{source}: the saved {self.name} tensors do not fit its config and dim={self.dim} "
                                   "(encoding a test row failed)") from err
        for name, array in arrays.items():
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise CorruptFileError(f"{source}: the saved {self.name} compressor encodes a test row to non-finite {name!r}")

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
        """The shape of each tensor ``_state`` returns for this config and ``dim``: an int is an exact size, a
        string a size the fit chose (``"r"``), one size in every tensor naming it. A load refuses other shapes,
        naming the tensor, what it found and what was expected. None (the default): not declared, so a load only
        encodes a test row, and a mismatch reads "do not fit its config" without naming a tensor."""
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

    # -- helpers ------------------------------------------------------------------------------

    def _require_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"this {self.name} compressor is not fitted; call fit(embeddings) first")


def _as_given(compressor: Compressor, x: Any, spec: InputSpec, name: str, *, keep: bool) -> Any:
    """The rows ``encode`` / ``encode_queries`` compute with, read as ``spec`` says (``adaptemb.inputs``): float
    input as given (only an integer array is refused here, naming ``input_kind``); integer input as the validated
    ``IntegerEmbeddings`` when ``keep`` and the method lists the kind in ``accepts_input_kinds`` (it keeps them as
    its codes), else as their dequantised float32 rows."""
    if spec.is_float:
        spec.read(x, name=name)
        return x
    compressor._require_fitted()
    given = spec.read(x, name=name, dim=compressor.dim)
    assert given is not None
    if keep and given.kind in compressor.accepts_input_kinds:
        return given
    return torch.from_numpy(given.to_float())
