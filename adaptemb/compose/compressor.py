"""``ComposedCompressor``: a fitted projection, an optional orthogonal rotation and a quantiser, as one method.

``"svd+rabitq"``: the projection (a method declaring ``role = "projection"``) maps an embedding to its first
``k`` values; the rotation (``adaptemb.compose.rotation``) centres and rotates them; the quantiser (``role =
"quantizer"``) stores the result as its own codes, which its own index backend searches. ``k`` is the projection
rank. One fit prepares a set of ranks: the quantiser (and rotation) is fitted once per rank, on the fit rows
projected to that rank, so ``encode(x, bytes=B)`` picks the largest prepared rank whose codes fit B (by default
the ranks that fill 1, 2, 3, 4, 6, 8, 12, 16, 24, ... bytes, measured on the quantiser's own codes, and the full
rank). A quantiser whose code size it fixes itself per fit (pq, opq: ``Budgets.per_fit``) is fitted at one rank.

Before a sign-bit quantiser (binary) a prepared width w may instead hold 2 bits per dimension on rank w / 2
(``adaptemb.compose.levels``: two sign planes, so the code is again w bits wide): ``bits_per_dim="auto"`` keeps
1 bit up to the full rank and 2 bits past it (budgets the full rank's code leaves unused), unless a query sample
chooses (``adaptemb.compose.query_choice``). So a stage is keyed by its code width ``k``: the projection rank at 1
bit, twice the rank at 2 bits. How the fit chooses its ranks, rotations (``rotation="auto"``, ``"pairs"``) and
bits per dimension without a sample is ``adaptemb.compose.choice``.

Queries: a quantiser that scores float queries itself (``symmetric = False``: rabitq, sq, pq) gets the projected,
rotated float query; documents of a symmetric quantiser are searched by the float query where an index backend
serves float queries against its codes (binary: ``<q, ±1>``, ``adaptemb.index.float_binary``), else queries are
quantised like documents (int8; or ``float_queries=False``). Saved as one safetensors file: the projection's
tensors under ``projection.``, each rank's quantiser under ``rank{r}.quantizer.`` and its rotation under
``rank{r}.`` (``center`` and a dense ``rotation`` matrix, or ``hadamard_signs``; ``adaptemb.compose.stages``). ONNX: ``encoder(r)`` is the
projection's head, the rotation and the quantiser's head as one module (``adaptemb.compose.export``), where both
parts export.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np
import torch

from adaptemb.budgets import Budgets
from adaptemb.codes import Codes, DenseCodes, decoded_inner_products
from adaptemb.compose.choice import StageChoice
from adaptemb.compose.config import (
    ComposedConfig,
    composed_config,
    make_composed_config,
    part_settings,
    queries_choose,
)
from adaptemb.compose.export import ComposedHead, projected_values, refusal
from adaptemb.compose.query_choice import measure_by_queries
from adaptemb.compose.rotation import HadamardRotation
from adaptemb.compose.stages import (
    Stage,
    rank_of,
    rotation_of,
    stage_tensors,
    stages_from_tensors,
    transformed_documents,
)
from adaptemb.compose.stand_ins import sign_query_means, sign_stand_ins
from adaptemb.errors import InvalidConfigError, UnsupportedExportError
from adaptemb.linalg import has_direction
from adaptemb.method import Compressor
from adaptemb.registry import COMPOSE_SEPARATOR, get_index_registry
from adaptemb.serialization import split_prefix

SIGN_MEANS = "query_given_sign"
"""A 1-bit sign stage's tensor (2, width) in the file: ``adaptemb.compose.stand_ins``."""


class ComposedCompressor(StageChoice, Compressor):
    """A projection, an optional orthogonal rotation, then a quantiser, fitted and saved as one method."""

    Projection: ClassVar[type[Compressor]]
    Quantizer: ClassVar[type[Compressor]]
    Config: ClassVar[type[ComposedConfig]] = ComposedConfig
    budget_help = ("projection rank r (the quantiser codes r values; code width 2r where a stage keeps 2 bits per "
                   "dimension); the fit prepares the ranks that fill 1, 2, 3, 4, 6, 8, 12, ... bytes and the full "
                   "rank; encode(x, bytes=B) picks one")
    config: ComposedConfig

    def __init__(self, config: ComposedConfig | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._quantizer_template = self.Quantizer(config=self.config.quantizer)  # type: ignore[attr-defined]
        self._projection_template = self.Projection(config=self.config.projection)  # type: ignore[attr-defined]
        self._sizes: dict[int, float] = {}
        self._sign_means: dict[int, torch.Tensor] = {}  # per 1-bit sign width: adaptemb.compose.stand_ins
        self._given_projection: Compressor | None = None
        if self.config.rotation == "pairs":
            learners = [part.name for part in (self.Projection, self.Quantizer) if "pairs" in part.fit_inputs]
            if learners:
                raise InvalidConfigError(
                    f"{self.name}: rotation='pairs' chooses the rotation by pairs no part has learnt from, but "
                    f"{' and '.join(learners)} learns from them (measured: the pairs it trained on pick the rotation "
                    "that ranks other queries best about as often as chance); use rotation='auto', 'random', 'itq' "
                    "or 'none'", parameter="rotation", value="pairs")
            self.fit_inputs = type(self).fit_inputs | {"pairs"}  # type: ignore[misc]  # only to choose the rotation
        if "queries" in self.fit_inputs and not queries_choose(self.config):
            self.fit_inputs = self.fit_inputs - {"queries"}  # type: ignore[misc]  # nothing left for them to choose
        if self.config.bits_per_dim == 2 and (not self.Quantizer.sign_bits or self.config.rotation == "pairs"):
            why = (f"its quantizer {self.Quantizer.name} does not keep sign bits" if not self.Quantizer.sign_bits
                   else "rotation='pairs' chooses 1-bit stages only")
            raise InvalidConfigError(f"{self.name}: bits_per_dim=2 codes two sign planes per dimension, but {why}; "
                                     "use bits_per_dim=1 or 'auto'", parameter="bits_per_dim", value=2)

    @classmethod
    def make_config(cls, **params: Any) -> ComposedConfig:
        return make_composed_config(cls, params)

    # -- what the composition declares, from its parts ----------------------------------------------

    @property
    def doc_kind(self) -> str | None:  # type: ignore[override]  # the quantiser's, which its config may decide
        return self._quantizer_template.doc_kind

    @property
    def float_queries(self) -> bool:
        """True when queries stay float (projected and rotated) against the quantised documents."""
        if not self._quantizer_template.symmetric:
            return True
        kind = self.doc_kind
        return self.config.float_queries and kind is not None and get_index_registry().for_kinds("dense", kind) is not None

    @property
    def symmetric(self) -> bool:  # type: ignore[override]
        return not self.float_queries

    @property
    def query_kind(self) -> str | None:
        if not self._quantizer_template.symmetric:
            return self._quantizer_template.query_kind
        return "dense" if self.float_queries else self.doc_kind

    @property
    def _lists_unrotated(self) -> bool:
        """Whether the file lists the widths left unrotated (``stages``): where the config may rotate sign bits."""
        return self.config.rotation not in ("none", "pairs") and self.Quantizer.sign_bits

    # -- fit -----------------------------------------------------------------------------------------

    def shares_projection(self, projection: Compressor) -> bool:
        """True when ``projection`` is a fitted ``Projection`` with this composition's projection settings."""
        return (type(projection) is self.Projection and projection.is_fitted
                and part_settings(projection.config) == part_settings(self.config.projection))

    def reuse_projection(self, projection: Compressor) -> ComposedCompressor:
        """Fit with ``projection`` instead of fitting a projection: it must be fitted, with this composition's
        projection settings, on the rows (and supervision) this composition is then fitted on: ``adaptemb bench``
        fits cllr once for its own row and its compositions. Returns ``self``."""
        if not self.shares_projection(projection):
            raise InvalidConfigError(f"{self.name}: reuse_projection takes a fitted {self.Projection.name} with the "
                                     f"settings {part_settings(self.config.projection)}; got {projection!r}")
        self._given_projection = projection
        return self

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        if self.config.rotation == "pairs" and supervision.get("pairs") is None:
            raise InvalidConfigError(f"{self.name}: rotation='pairs' chooses the rotation by the MRR of labelled pairs; "
                                     "pass pairs=(queries, documents) to fit, or choose rotation='auto', 'random', "
                                     "'itq' or 'none'", parameter="rotation", value="pairs")
        queries = supervision.pop("queries", None)
        projection = self._given_projection or self._fit_projection(x, supervision)
        self._projection, self._stages, self._sizes, self._choices, self._sign_means = projection, {}, {}, {}, {}
        for rank in self._plan_ranks(x):  # a width past the full rank: 2 bits; past twice it: 3
            self._stages[rank] = (self._fit_stage(x, rank, supervision) if rank <= self._full else
                                  self._fit_two_bit_stage(x, rank // 2, uncentred=True) if rank <= 2 * self._full else
                                  self._fit_three_bit_stage(x, rank // 3))
        for width in self._two_bit_widths(projection) if self.config.bits_per_dim == 2 else []:
            self._stages[width] = self._fit_two_bit_stage(x, width // 2)
            self._sign_means.pop(width, None)  # its 1-bit stage was replaced
        if self.config.k is not None and self.config.k not in self._stages:
            raise InvalidConfigError(f"{self.name}: k={self.config.k} is not a rank of the projection "
                                     f"({projection.budgets().describe()})", parameter="k", value=self.config.k)
        if queries is not None:  # the stages measured by the sample (adaptemb.compose.query_choice)
            self._choices = measure_by_queries(self, x, queries)
        kinds = {width: self.stage_rotation_kind(self._rank(width), width // self._rank(width)) for width in sorted(self._stages)}
        self.fit_report = {"ranks": sorted(self._stages), "rotation": _one_or_mixed(kinds.values()), "rotations": kinds,
                           "bits_per_dim": {width: width // self._rank(width) for width in sorted(self._stages)},
                           "bytes_per_vector": {r: self._code_bytes(r) for r in sorted(self._stages)},
                           "projection": projection.fit_report}
        if self._choices:
            self.fit_report["query_choice" if queries is not None else "rotation_choice"] = dict(sorted(self._choices.items()))

    def _fit_projection(self, x: torch.Tensor, supervision: dict[str, Any]) -> Compressor:
        """A new projection fitted on ``x`` with the supervision it learns from."""
        projection = self.Projection(config=self.config.projection)  # type: ignore[attr-defined]
        own = {key: value for key, value in supervision.items() if key in self.Projection.fit_inputs}
        rows = x
        if projection.normalizes_rows:  # it leaves rows without a direction out: do so here, without its warning
            keep = has_direction(x)[:, 0]
            rows = x[keep]
            own = {key: (value[keep] if key == "labels" else value) for key, value in own.items()}
        return projection.fit(rows, **own)

    def _fit_stage(self, x: torch.Tensor, rank: int, supervision: dict[str, Any]) -> Stage:
        """The rotation and the quantiser fitted on the rows projected to ``rank``; supervision the quantiser
        learns from goes to it (pairs projected and rotated like the rows)."""
        y = self._projected(x, rank)
        if self.config.rotation == "pairs":
            return self._chosen_stage(y, rank, supervision["pairs"])
        rotation = self._fit_rotation(y, self.rotation_kind(rank))
        mine = {key: value for key, value in supervision.items() if key in self.Quantizer.fit_inputs}
        if "pairs" in mine:
            mine["pairs"] = tuple(transformed_documents(rotation, self._projected(side, rank)) for side in mine["pairs"])
        quantizer = self.Quantizer(config=self.config.quantizer)  # type: ignore[attr-defined]
        documents = transformed_documents(rotation, y)
        quantizer.fit(documents, **mine)
        if self.Quantizer.sign_bits and self.float_queries:  # the mean float query of each sign, for stand_in_queries
            queries = y if rotation is None else rotation.queries(y)
            self._sign_means[rank] = sign_query_means(quantizer.encode(documents), queries)
        return rotation, quantizer

    def _rank(self, width: int) -> int:
        return rank_of(width, self._stages[width][0])

    def _projected(self, x: torch.Tensor, rank: int) -> torch.Tensor:
        return torch.from_numpy(self._projection.encode(x, k=rank).to_dense())

    # -- encode, score, budgets ------------------------------------------------------------------------

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        rotation, quantizer = self._stages[k]
        return quantizer.encode(transformed_documents(rotation, self._projected(x, self._rank(k))))

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        assert k is not None
        return self._query_codes(self._stages[k], self._projected(x, self._rank(k)))

    def _stage_queries(self, stage: Stage, y: torch.Tensor) -> Codes:
        """Projected queries as ``encode_queries`` gives them through ``stage``: float (``_query_codes``), or coded
        like documents where queries are quantised (``float_queries=False`` before a symmetric quantiser)."""
        transform, quantizer = stage
        if self.float_queries or not quantizer.symmetric:
            return self._query_codes(stage, y)
        return quantizer.encode(transformed_documents(transform, y))

    @staticmethod
    def _query_codes(stage: Stage, y: torch.Tensor) -> Codes:
        """Projected float queries through a stage: rotated, then the quantiser's query codes or kept float."""
        rotation, quantizer = stage
        floats = y if rotation is None else rotation.queries(y)
        if not quantizer.symmetric:
            return quantizer.encode_queries(floats)
        return DenseCodes(np.ascontiguousarray(floats.numpy()))

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """The quantiser's scores of the query codes against the documents; for float queries against a symmetric
        quantiser's codes, ``<q, doc.to_dense()>`` (what the float-query index backend ranks by)."""
        _, quantizer = self._stage_of(doc_codes)
        return self._scores(quantizer, query_codes, doc_codes)

    def _scores(self, quantizer: Compressor, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        if not (quantizer.symmetric and self.float_queries):
            return quantizer.score(query_codes, doc_codes)
        if query_codes.kind != self.query_kind or query_codes.dim != doc_codes.dim:
            raise TypeError(f"{self.name} scores float queries from its encode_queries against its codes")
        return decoded_inner_products(query_codes.to_dense(), doc_codes)

    def stand_in_queries(self, doc_codes: Codes) -> Codes | None:
        """Float queries for 1-bit sign codes: each sign as the mean query value the fit rows had with it
        (``adaptemb.compose.stand_ins``); None for other stages, and for files saved before they were kept."""
        self._stage_of(doc_codes)
        means = self._sign_means.get(doc_codes.dim)
        return None if means is None else sign_stand_ins(doc_codes, means)

    def index_options(self, doc_codes: Codes) -> dict[str, Any]:
        _, quantizer = self._stage_of(doc_codes)
        return quantizer.index_options(doc_codes) if not quantizer.symmetric else {}

    def query_budget(self, doc_codes: Codes) -> int | None:
        """The width (``k``) the documents were encoded at: their codes' dimension."""
        return doc_codes.dim if doc_codes.dim in self._stages else None

    def _stage_of(self, doc_codes: Codes) -> Stage:
        self._require_fitted()
        if doc_codes.dim not in self._stages:
            raise ValueError(f"{self.name} codes have one of the ranks {sorted(self._stages)} as their dimension; "
                             f"got {doc_codes.dim}: score codes from this compressor's encode()")
        return self._stages[doc_codes.dim]

    def _budgets(self) -> Budgets:
        ranks = sorted(self._stages)
        contiguous = ranks == list(range(ranks[0], ranks[-1] + 1))
        return Budgets(low=ranks[0], high=ranks[-1], default=self.config.k or ranks[-1],
                       values=None if contiguous else tuple(ranks), per_fit=True)

    def budget_for_bytes(self, nbytes: float, sample: Any = None) -> int | None:
        """The largest prepared width (the rank at 1 bit per dimension) whose codes take at most ``nbytes`` per
        vector (None: none does)."""
        self._require_fitted()
        fits = [width for width in self._stages if self._code_bytes(width) <= nbytes]
        return max(fits) if fits else None

    def details(self) -> dict[str, Any]:
        """Each prepared width (``k``): its projection rank, bits per dimension (before sign bits), bytes per vector
        and stored rotation (``adaptemb info`` shows them)."""
        self._require_fitted()
        stages = []
        for width in sorted(self._stages):
            rank, rotation = self._rank(width), rotation_of(self._stages[width][0])
            bits = {"bits_per_dim": width // rank} if self.Quantizer.sign_bits else {}  # else the quantiser's own
            named = "none" if rotation is None else "hadamard" if isinstance(rotation, HadamardRotation) else "dense"
            stages.append({"k": width, "rank": rank, **bits, "bytes": self._code_bytes(width), "rotation": named})
        return {"stages (k: the code width)": stages}

    def _code_bytes(self, width: int) -> float:
        if width not in self._sizes:
            _, quantizer = self._stages[width]
            self._sizes[width] = float(quantizer.encode(torch.ones(1, width)).bytes_per_vector)
        return self._sizes[width]

    # -- ONNX ----------------------------------------------------------------------------------------

    @property
    def exportable(self) -> bool:  # type: ignore[override]  # the parts decide
        """True when both the projection and the quantiser export (their ``exportable``)."""
        return not self.export_refusal()

    def export_refusal(self) -> str:
        """Why this composition does not export, naming the part that does not; empty when it does."""
        return refusal(self.name, self._projection_template, self._quantizer_template) or ""

    def encoder(self, k: int) -> torch.nn.Module:
        """The encode path at rank ``k``: the projection's head, its float values, the rank's rotation (centre and
        matrix), then the quantiser's head, whose outputs (its storage form) are the module's."""
        reason = self.export_refusal()
        if reason:
            raise UnsupportedExportError(reason)
        rotation, quantizer = self._stage_of_rank(k)
        projection = self._projection.encoder(self._rank(k))
        values = projected_values(self._projection.encode(torch.ones(1, self._projection.dim), k=self._rank(k)), self.name)
        return ComposedHead(projection, values, rotation, quantizer.encoder(quantizer.budgets().default)).eval()

    def encoder_arrays(self, codes: Codes, k: int) -> dict[str, np.ndarray]:
        """The arrays the quantiser's head emits for these codes (its own ``encoder_arrays``)."""
        _, quantizer = self._stage_of_rank(k)
        return quantizer.encoder_arrays(codes, quantizer.budgets().default)

    def _stage_of_rank(self, k: int) -> Stage:
        self._require_fitted()
        if k not in self._stages:
            raise ValueError(f"{self.name} prepared the ranks {sorted(self._stages)}; got k={k}")
        return self._stages[k]

    # -- state ---------------------------------------------------------------------------------------

    def _state(self) -> dict[str, torch.Tensor]:
        projection = {f"projection.{key}": t for key, t in self._projection.state_tensors().items()}
        means = {f"rank{width}.{SIGN_MEANS}": t for width, t in self._sign_means.items()}
        return stage_tensors(self._stages, self._lists_unrotated) | means | projection

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._projection = self.Projection(config=self.config.projection)  # type: ignore[attr-defined]
        assert self.dim is not None  # restore() sets it first: the projection is restored at the input dimension
        stages = stages_from_tensors(tensors, self.rotation_kind, self._lists_unrotated,
                                     lambda: self.Quantizer(config=self.config.quantizer))  # type: ignore[attr-defined]
        self._projection.restore(self.dim, split_prefix(tensors, "projection."))
        self._stages, self._sizes, self._sign_means = stages, {}, {}
        for width in stages:  # absent from files saved before stand_in_queries
            means = tensors.get(f"rank{width}.{SIGN_MEANS}")
            if means is not None:
                if tuple(means.shape) != (2, width):
                    raise ValueError(f"rank{width}.{SIGN_MEANS} must have shape (2, {width}); got {tuple(means.shape)}")
                self._sign_means[width] = means.float()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its part classes, config and fitted tensors (the composed class is made, not imported: Ray
        workers get a composition this way); the fit report stays behind."""
        fitted = self.state_tensors() if self.is_fitted else None
        return _unpickle, (self.Projection, self.Quantizer, self.config.model_dump_json(), self.dim, fitted)

    def restore(self, dim: int, tensors: dict[str, torch.Tensor]) -> None:
        self.dim = dim
        try:
            super().restore(dim, tensors)
        except BaseException:
            self.dim = None
            raise


def _one_or_mixed(kinds: Any) -> str:
    """The one rotation kind every rank has, or ``"mixed"`` (``fit_report["rotations"]`` has each rank's)."""
    distinct = set(kinds)
    return distinct.pop() if len(distinct) == 1 else "mixed"


@functools.cache
def composed_class(projection: type[Compressor], quantizer: type[Compressor]) -> type[ComposedCompressor]:
    """The method class of ``projection`` followed by ``quantizer`` (one class per pair, so configs compare equal)."""
    name = f"{projection.name}{COMPOSE_SEPARATOR}{quantizer.name}"
    title = "".join(part.capitalize() for part in name.split(COMPOSE_SEPARATOR))
    attributes = {
        "__doc__": f"Composed code: the {projection.name} projection, an optional rotation, then {quantizer.name} codes.",
        "__module__": __name__,
        "name": name,
        "Projection": projection,
        "Quantizer": quantizer,
        "Config": composed_config(name, projection.Config, quantizer.Config),
        "fit_inputs": projection.fit_inputs | quantizer.fit_inputs | ({"queries"} if quantizer.sign_bits else set()),
        # the contract fits every composition through a stored rotation (tests/test_contract.py also runs one without)
        "test_params": {"projection": dict(projection.test_params), "quantizer": dict(quantizer.test_params),
                        "rotation": "random"},
    }
    return type(f"{title}Compressor", (ComposedCompressor,), attributes)


def _unpickle(projection: type[Compressor], quantizer: type[Compressor], config: str, dim: int | None,
              tensors: dict[str, torch.Tensor] | None) -> ComposedCompressor:
    cls = composed_class(projection, quantizer)
    made = cls(config=cls.Config.model_validate_json(config))
    if tensors is not None and dim is not None:
        made.restore(dim, tensors)
    return made
