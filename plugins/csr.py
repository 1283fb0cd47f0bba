"""``csr``: Contrastive Sparse Representation — a TopK sparse autoencoder whose codes serve any k.

One fit trains with L(k) + L(4k)/8 + β·aux-k + γ·NCL (see ``docs/methods/csr.md``); ``encode`` then keeps the
top-k latents for any k from 1 to h, packed at their true size (``PackedSparseCodes``: ⌈log2(h + 1)⌉-bit
indices, values as levels of per-feature codebooks; ``csr_values`` fits those and measures which (k, value bits)
fills a byte budget, ``encode(x, bytes=B)``). Scoring is asymmetric by default: the dense query, as its encoder
pre-activations ``W_enc (q − b_pre) + b_enc`` (or through the decoder, ``⟨q, x̂_doc⟩ = ⟨W_decᵀq, z_doc⟩ +
⟨q, b_pre⟩``: ``query_form``), against the packed documents (``ProjectedQueries``, searched over the quantised
levels); or the paper's sparse·sparse dot product (``scoring="symmetric"``).

The model (``csr_model.CSRModel``) is what ``encode`` needs and what is saved; the objective
(``csr_objective.CSRObjective``: loss weights, dead-latent counters, the decoder constraint) exists only while fitting.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from adaptemb import (
    Budgets,
    Codes,
    Compressor,
    CompressorRegistry,
    InvalidConfigError,
    PackedSparseCodes,
    ProjectedQueries,
    RowStream,
    SparseCodes,
    StreamBatches,
    TrainingConfig,
    has_direction,
    hookimpl,
    train,
    unit_rows,
)
from adaptemb_plugins.csr_model import CSREncoder, CSRModel, PackedCSREncoder, geometric_median
from adaptemb_plugins.csr_objective import CSRObjective, LossSettings
from adaptemb_plugins.csr_values import ValueTables, fit_value_tables

_ENCODE_BLOCK = 1 << 24  # pre-activation floats per encode block (64 MB in float32)
_EVAL_ROWS = 2048  # rows the before/after loss measurement uses
_MEDIAN_ROWS = 8192  # rows the geometric median is estimated from
_CODEBOOK_ROWS = 8192  # training rows the value codebooks are fitted on (and the choice measured against)
_HELD_OUT_ROWS = 1024  # at most this many rows held out to measure the choice of value bits
_MIN_ROWS_TO_HOLD_OUT = 2000  # smaller fits hold nothing out


class CSRConfig(TrainingConfig):
    """CSR settings; defaults chosen by measurement (``docs/methods/csr.md``)."""

    k: int = Field(32, ge=1, description="Active latents trained for, and the default encode budget.")
    hidden: int | None = Field(None, ge=1, description="Latent size h; None means 4·d (the paper's peak).")
    decoder: Literal["tied", "untied"] = Field(
        "tied", description="untied: unit-norm decoder with gradient projection (OpenAI); tied: W_dec = W_encᵀ (paper)."
    )
    init: Literal["random", "data"] = Field(
        "random", description="Latent directions start at random unit vectors, or at (centred) training rows."
    )
    pre_bias_init: Literal["median", "mean"] = Field("median", description="b_pre starts at the geometric median or the mean.")
    normalize: Literal["l2", "none", "standardize"] = Field("l2", description="Input normalisation before encoding.")
    multi_k_factor: int = Field(4, ge=1, description="Multi-TopK: the second reconstruction uses factor·k latents.")
    multi_k_coef: float = Field(0.125, ge=0, description="Weight of the factor·k reconstruction loss.")
    k_aux: int = Field(512, ge=1, description="Dead latents the auxiliary loss reconstructs the residual with.")
    aux_coef: float = Field(1 / 32, ge=0, description="β: weight of the aux-k loss.")
    dead_steps: int = Field(50, ge=1, description="A latent is dead after this many steps without firing.")
    cl_coef: float = Field(1.0, ge=0, description="γ: weight of the non-negative contrastive loss.")
    temperature: float = Field(0.2, gt=0, description="τ of the InfoNCE over L2-normalised sparse codes.")
    view_dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the contrastive second view (0: the identical pass, measured best)."
    )
    scoring: Literal["asymmetric", "symmetric"] = Field(
        "asymmetric", description="asymmetric: a dense query (query_form) vs packed docs; symmetric: packed·packed."
    )
    query_form: Literal["encoder", "decoder"] = Field(
        "encoder", description="Asymmetric queries: the encoder's pre-activations W_enc(q - b_pre) + b_enc (measured "
        "best at 16-32 B on the default data), or the query through the decoder, scoring <q, decode(doc)>.")
    value_bits: Literal[1, 2, 3, 4, 8, 16] | None = Field(
        None, description="Bits per stored value: 1-8: levels of a per-feature codebook fitted on the fit rows; 16: "
        "float16; None: per k, the bits of its best code on the frontier of held-out recall@10 against bytes (measured at fit).")
    # training defaults, measured for this method (see the docs)
    epochs: int = Field(10, ge=1, description="Passes over the training rows (at most).")
    batch_size: int = Field(256, ge=2, description="Rows per optimisation step.")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate.")
    adam_eps: float = Field(6.25e-10, gt=0, description="Adam epsilon (the paper's).")
    val_fraction: float = Field(0.0, ge=0, lt=0.5, description="Rows held out for early stopping (0: train on all).")

    @model_validator(mode="before")
    @classmethod
    def _legacy_value_dtype(cls, data: Any) -> Any:
        """Files written before packed codes say ``value_dtype`` (float16 / float32 values): now float16 values,
        queries through the decoder as then."""
        if isinstance(data, dict) and "value_dtype" in data:
            data = {key: value for key, value in data.items() if key != "value_dtype"}
            data.setdefault("value_bits", 16)
            data.setdefault("query_form", "decoder")
        return data


class CSRCompressor(Compressor):
    """TopK sparse autoencoder with Multi-TopK, aux-k and a non-negative contrastive loss."""

    name = "csr"
    Config = CSRConfig
    budget_help = "active latents k, 1 <= k <= h (h = 4·d by default); one fit serves every k"
    exportable = True
    fit_inputs = frozenset({"pairs", "labels"})
    test_params: ClassVar[dict[str, Any]] = {"hidden": 64, "k": 4, "epochs": 2, "batch_size": 64, "k_aux": 16, "progress": False}
    doc_kind = "packed_sparse"
    stream_sample_rows = 32_768  # enough for the start (8,192-row median, h rows) and the report
    symmetric = False  # its own encode_queries (projected queries by default) and score
    trains_on_stream = True
    decodes = True
    config: CSRConfig

    def __init__(self, config: CSRConfig | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._model: CSRModel | None = None
        self._tables: ValueTables | None = None

    @property
    def normalizes_rows(self) -> bool:  # type: ignore[override]  # depends on the normalize option
        return self.config.normalize == "l2"

    @property
    def query_kind(self) -> str:
        return "packed_sparse" if self.config.scoring == "symmetric" else "projected"

    # -- fitting --------------------------------------------------------------------------------

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        shift, scale = self._normalisation(x)
        normalise = _Normaliser(self.config.normalize, shift, scale)
        rows, partners, groups = self._training_rows(normalise, x, **supervision)
        self._train(normalise, normalise(x), [rows, partners, groups], (rows, partners, groups))
        self._fit_values(x)

    def _fit_stream(self, stream: RowStream, **supervision: Any) -> None:
        """Every row of the stream, in shuffled minibatches (pairs mixed into each batch in proportion); the
        normalisation statistics, initial model, loss measurements and report come from a uniform sample."""
        positions, sample = stream.sample(self.stream_sample_rows, self.config.seed)
        shift, scale = self._normalisation(sample)
        normalise = _Normaliser(self.config.normalize, shift, scale)
        assert stream.rows is not None
        prepare = _StreamRows(normalise, stream.kept_rows, supervision.get("pairs"), self.config.seed)
        data = StreamBatches.holding_out(stream, prepare, (positions, sample), self.config.val_fraction, self.config.seed)
        raw = sample
        sample = normalise(sample)  # one normalised copy serves the start, the measurements and the report
        self._train(normalise, sample, data, (sample, sample, torch.arange(len(sample))))
        self._fit_values(raw)

    def _fit_values(self, x: torch.Tensor) -> None:
        """Codebooks from a sample of the fit rows ``x`` and the choice table measured with a held-out slice of
        them as queries (``csr_values``); none for float16 values. The slice is held out of the codebooks and the
        searched documents, not of training: leaving a tenth of the rows out of training cost up to 0.012
        NDCG@10 on the default data, while the choice compares codes of one model."""
        if self.config.value_bits == 16:
            self._tables = None
            return
        model = self._fitted_model
        rows, held_out = _held_out(len(x), self.generator)
        docs, queries = x[rows[torch.randperm(len(rows), generator=self.generator)[:_CODEBOOK_ROWS]]], x[held_out]
        with torch.inference_mode():
            self._tables = fit_value_tables(lambda batch, k: model.sparse_codes(model.normalise(batch), k),
                                            self._query_projection, self._query_rows, docs, queries, model.hidden)
        assert self.fit_report is not None
        self.fit_report["extra"]["value_choices"] = self._tables.rows()

    def _train(self, normalise: _Normaliser, x: torch.Tensor, data: Any,
               measured: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        """Initialise from the normalised rows ``x``, train on ``data``, measure losses on ``measured`` before
        and after, and keep the model and its report."""
        cfg = self.config
        hidden = cfg.hidden or 4 * x.shape[1]
        if cfg.k > hidden:
            size = f"hidden={hidden}" if cfg.hidden else f"hidden=None: 4 d = {hidden}"
            raise InvalidConfigError(f"csr: k={cfg.k} is larger than the latent size ({size}); valid: k=1..{hidden}, "
                                     "or a larger hidden", parameter="k", value=cfg.k, valid=f"1..{hidden}")
        objective = CSRObjective(self._initial_model(x, hidden, normalise.shift, normalise.scale), _loss_settings(cfg))
        before = self._measure(objective, *measured)
        report = train(objective, data, cfg, description="csr")
        objective = objective.cpu().eval()
        after = self._measure(objective, *measured)
        self._model = objective.model
        self.fit_report = self._report(report.as_dict(), before, after, x)

    def _normalisation(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(shift, scale) of the input normalisation: the fit rows' mean and std for ``standardize``."""
        if self.config.normalize == "standardize":
            return x.mean(dim=0), x.std(dim=0).clamp_min(1e-6)
        return torch.zeros(x.shape[1]), torch.ones(x.shape[1])

    def _training_rows(self, normalise: _Normaliser, x: torch.Tensor, pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
                       labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows to reconstruct, each row's contrastive partner, and a group id (same group = positive)."""
        n = len(x)
        groups = labels.long() if labels is not None else torch.arange(n)
        rows, partners = [normalise(x)], [normalise(x)]
        if pairs is not None:
            rows.append(normalise(pairs[0]))
            partners.append(normalise(pairs[1]))
            offset = int(groups.max()) + 1 if n else 0
            groups = torch.cat([groups, offset + torch.arange(len(pairs[0]))])
        return torch.cat(rows), torch.cat(partners), groups

    def _initial_model(self, x: torch.Tensor, hidden: int, shift: torch.Tensor, scale: torch.Tensor) -> CSRModel:
        cfg = self.config
        gen = self.generator
        sample = x[torch.randperm(len(x), generator=gen)[:_MEDIAN_ROWS]]
        pre_bias = geometric_median(sample) if cfg.pre_bias_init == "median" else x.mean(dim=0)
        directions = self._initial_directions(x, pre_bias, hidden, gen)
        return CSRModel(directions, pre_bias, tied=cfg.decoder == "tied", normalize=cfg.normalize, shift=shift, scale=scale)

    def _initial_directions(self, x: torch.Tensor, pre_bias: torch.Tensor, hidden: int,
                            gen: torch.Generator) -> torch.Tensor:
        """Unit-norm (h, d) latent directions: centred training rows (``init="data"``) or random."""
        directions = torch.randn(hidden, x.shape[1], generator=gen)
        if self.config.init == "data":
            take = min(hidden, len(x))
            directions[:take] = x[torch.randperm(len(x), generator=gen)[:take]] - pre_bias
        return F.normalize(directions, dim=1)

    @torch.no_grad()
    def _measure(self, objective: CSRObjective, rows: torch.Tensor, partners: torch.Tensor,
                 groups: torch.Tensor) -> dict[str, float]:
        """Loss components on a fixed sample, in eval mode and with a fixed seed (before vs after)."""
        device = next(objective.parameters()).device
        objective.eval()
        order = torch.randperm(len(rows), generator=self.generator)[:_EVAL_ROWS]
        sums: dict[str, float] = {}
        batches = 0
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(self.config.seed)
            for start in range(0, len(order), self.config.batch_size):
                idx = order[start : start + self.config.batch_size]
                if len(idx) < 2:
                    continue
                batch = [t[idx].to(device) for t in (rows, partners, groups)]
                total, parts = objective.training_loss(batch, 0)
                for name, value in {"loss": total, **parts}.items():
                    sums[name] = sums.get(name, 0.0) + float(value)
                batches += 1
        return {name: value / max(batches, 1) for name, value in sums.items()}

    def _report(self, loop: dict[str, Any], before: dict[str, float], after: dict[str, float],
                x: torch.Tensor) -> dict[str, Any]:
        frequency = self._activation_frequency(x)
        loop["extra"] = {
            "hidden": int(frequency.numel()),
            "k": self.config.k,
            "losses_before": before,
            "losses_after": after,
            "dead_fraction": float((frequency == 0).float().mean()),
            "activation_frequency": _summary(frequency),
        }
        return loop

    @torch.no_grad()
    def _activation_frequency(self, x: torch.Tensor) -> torch.Tensor:
        """Fraction of training rows on which each latent is among the k active ones (value > 0)."""
        model = self._fitted_model
        counts = torch.zeros(model.hidden)
        for block in _blocks(x, counts.numel()):
            values, indices = model.sparse_codes(block, self.config.k)
            counts += torch.bincount(indices[values > 0], minlength=counts.numel()).float()
        return counts / max(len(x), 1)

    # -- encoding and scoring -----------------------------------------------------------------

    @property
    def _fitted_model(self) -> CSRModel:
        assert self._model is not None, "fit first"
        return self._model

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        encoder = self.encoder(k)
        hidden = self._fitted_model.hidden
        packed = torch.cat([encoder(block)[0] for block in _blocks(x, hidden)])
        return PackedSparseCodes(packed.numpy(), hidden, k, encoder.value_bits, self._codebook(k, encoder.value_bits))

    def encoder(self, k: int) -> PackedCSREncoder:
        """The encode path as one module (normalise, matmul, topk, relu, quantise, pack), exported to ONNX as is.
        With ``normalize="l2"`` an all-zero row (no direction) gets k empty slots, which add nothing to any score."""
        bits = self.value_bits(k)
        return PackedCSREncoder(CSREncoder(self._fitted_model, k, value_dtype=torch.float32),
                                PackedSparseCodes.packer(self._fitted_model.hidden, bits, self._codebook(k, bits))).eval()

    def value_bits(self, k: int) -> int:
        """Bits per stored value of codes at ``k``: the config's ``value_bits``, else the fit's choice for k."""
        if self.config.value_bits is not None:
            return self.config.value_bits
        return 16 if self._tables is None else self._tables.value_bits(k)

    def details(self) -> dict[str, Any]:
        """The measured choice per k (value bits, bytes, held-out recall@10) that ``bytes=`` picks from."""
        if self._tables is None:
            return {}
        chosen = [{key: value for key, value in row.items() if key != "chosen"} for row in self._tables.rows() if row["chosen"]]
        return {"byte budgets (the value bits of each k, measured at fit)": chosen}

    def _codebook(self, k: int, bits: int) -> np.ndarray | None:
        return None if bits == 16 or self._tables is None else self._tables.codebook(k, bits)

    def budget_for_bytes(self, nbytes: float, sample: Any = None) -> int | None:
        """The k whose packed code fits ``nbytes``: the best held-out recall among the measured k (value bits
        chosen per k), or the largest k at the config's ``value_bits``."""
        self._require_fitted()
        hidden = self._fitted_model.hidden
        if self.config.value_bits is None and self._tables is not None:
            return self._tables.budget_for_bytes(nbytes)
        width = PackedSparseCodes.index_bits(hidden) + self.value_bits(1)
        k = min(hidden, int(8 * int(nbytes) // width))
        return k if k >= 1 else None

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        """Packed codes (symmetric) or ``ProjectedQueries`` (asymmetric): the query's encoder pre-activations, or
        ``(W_dec (σ ⊙ q), <q, σ ⊙ b_pre + μ>)`` through the decoder (``query_form``)."""
        if self.config.scoring == "symmetric":
            return self.encode(x, k=k)
        projected, offset = self._query_projection(self._query_rows(x))
        return ProjectedQueries(projected.contiguous().numpy(), offset.contiguous().numpy())

    def _query_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Queries as scored: unit rows with ``normalize="l2"`` (scale-free, no overflow; 0 for 0), else as given."""
        return unit_rows(x) if self.normalizes_rows else x

    def _query_projection(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values over the h latents, offset) of queries ``q`` as scored (``query_form``); a zero query of an
        ``l2`` compressor scores 0."""
        model = self._fitted_model
        if self.config.query_form == "decoder":
            return model.project_queries(q)
        pre = model.pre_activations(model.normalise(q))
        return (pre * has_direction(q) if self.normalizes_rows else pre), torch.zeros(len(q))

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Asymmetric ``<projected query, doc>`` for ``ProjectedQueries`` (``⟨q, x̂_doc⟩`` through the decoder); the
        sparse dot product for sparse queries (packed codes, or the ``SparseCodes`` of files written before them)."""
        if not isinstance(doc_codes, (PackedSparseCodes, SparseCodes)):
            raise TypeError(f"csr scores its own packed_sparse documents; got {type(doc_codes).__name__}")
        return query_codes.similarity(doc_codes)

    def _decode(self, codes: Codes) -> torch.Tensor:
        return self._fitted_model.decode(torch.from_numpy(codes.to_dense()))

    # -- state ----------------------------------------------------------------------------------

    def _budgets(self) -> Budgets:
        return Budgets(low=1, high=self._fitted_model.hidden, default=self.config.k)

    def _state(self) -> dict[str, torch.Tensor]:
        tables = {} if self._tables is None else {"codebooks": self._tables.codebooks, "choices": self._tables.choices}
        return {**self._fitted_model.state(), **tables}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        h = self.config.hidden or 4 * dim
        shapes: dict[str, tuple[int | str, ...]] = {
            "enc_weight": (h, dim), "enc_bias": (h,), "pre_bias": (dim,), "shift": (dim,), "scale": (dim,)}
        if self.config.value_bits != 16:
            shapes.update(codebooks=("grid", h, 32), choices=("choices", 4))
        return shapes if self.config.decoder == "tied" else {**shapes, "dec_weight": (h, dim)}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        tied = "dec_weight" not in tensors
        if tied != (self.config.decoder == "tied"):
            raise ValueError(f"csr file has {'no' if tied else 'a'} separate decoder but decoder={self.config.decoder!r}")
        model_tensors = {name: t for name, t in tensors.items() if name not in ("codebooks", "choices")}
        self._model = CSRModel.from_state(model_tensors, normalize=self.config.normalize)
        self._tables = ValueTables(tensors["codebooks"], tensors["choices"]) if "codebooks" in tensors else None


class _StreamRows:
    """A stream batch as ``CSRObjective`` trains on it: normalised rows as their own partners, each its own group,
    plus a random share of the pairs (anchors with their positives) in proportion to ``pairs : stream rows``."""

    def __init__(self, normalise: _Normaliser, stream_rows: int, pairs: tuple[torch.Tensor, torch.Tensor] | None,
                 seed: int) -> None:
        self.normalise, self.stream_rows = normalise, stream_rows
        self.pairs = None if pairs is None else (normalise(pairs[0]), normalise(pairs[1]))
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, batch: torch.Tensor) -> list[torch.Tensor]:
        rows = self.normalise(batch)
        if self.pairs is None:
            return [rows, rows, torch.arange(len(rows))]
        anchors, positives = self.pairs
        share = len(rows) * len(anchors) / self.stream_rows
        count = int(share) + int(torch.rand((), generator=self.generator) < share - int(share))
        pick = torch.randint(len(anchors), (min(count, len(anchors)),), generator=self.generator)
        return [torch.cat([rows, anchors[pick]]), torch.cat([rows, positives[pick]]), torch.arange(len(rows) + len(pick))]


def _loss_settings(cfg: CSRConfig) -> LossSettings:
    return LossSettings(k=cfg.k, multi_k_factor=cfg.multi_k_factor, multi_k_coef=cfg.multi_k_coef, k_aux=cfg.k_aux,
                        aux_coef=cfg.aux_coef, dead_steps=cfg.dead_steps, cl_coef=cfg.cl_coef,
                        temperature=cfg.temperature, view_dropout=cfg.view_dropout)


class _Normaliser:
    """The model's input normalisation before a model exists (fit prepares its training rows with it)."""

    def __init__(self, mode: str, shift: torch.Tensor, scale: torch.Tensor) -> None:
        self.mode, self.shift, self.scale = mode, shift, scale

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return unit_rows(x) if self.mode == "l2" else (x - self.shift) / self.scale


def _held_out(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(codebook rows, held-out rows): a seeded tenth of the rows, at most ``_HELD_OUT_ROWS``, held out from
    ``_MIN_ROWS_TO_HOLD_OUT`` rows on; below that every row serves both."""
    order = torch.randperm(n, generator=generator)
    if n < _MIN_ROWS_TO_HOLD_OUT:
        return order.sort().values, order.sort().values
    count = min(_HELD_OUT_ROWS, n // 10)
    return order[count:].sort().values, order[:count].sort().values


def _blocks(x: torch.Tensor, hidden: int) -> list[torch.Tensor]:
    rows = max(1, _ENCODE_BLOCK // max(hidden, 1))
    return [x[i : i + rows] for i in range(0, len(x), rows)]


def _summary(frequency: torch.Tensor) -> dict[str, float]:
    q = torch.quantile(frequency, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]))
    return {
        "min": float(q[0]), "p10": float(q[1]), "median": float(q[2]), "p90": float(q[3]), "max": float(q[4]),
        "mean": float(frequency.mean()),
        "below_1e-3": float((frequency < 1e-3).float().mean()),
    }


@hookimpl
def register_compressors(registry: CompressorRegistry) -> None:
    registry.add(CSRCompressor)
