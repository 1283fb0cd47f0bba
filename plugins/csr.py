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

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from adaptemb import (
    Budgets,
    ByteBudgets,
    Checkpoints,
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
from adaptemb_plugins.csr_supervision import MIN_HELD_OUT, group_rows, held_out_mrr
from adaptemb_plugins.csr_values import ValueTables, fit_value_tables

_ENCODE_BLOCK = 1 << 24  # pre-activation floats per encode block (64 MB in float32)
_EVAL_ROWS = 2048  # rows the before/after loss measurement uses
_MEDIAN_ROWS = 8192  # rows the geometric median is estimated from
_CODEBOOK_ROWS = 8192  # training rows the value codebooks are fitted on (and the choice measured against)
_HELD_OUT_ROWS = 1024  # at most this many rows held out to measure the choice of value bits
_MIN_ROWS_TO_HOLD_OUT = 2000  # smaller fits hold nothing out
HEAD_VALUE_BITS = 2
"""A head fitted for a byte budget trains for the k its packed code holds at this many bits per value."""
HEAD_MAX_SHARE = 1 / 3
"""Heads are fitted for budgets whose k is at most this share of the main fit's k: heads at k = 12-19 (24-32 B)
gained at most 0.005 NDCG@10 over the main fit on the built-in data and the 768-d stand-in, heads at k = 4-6 (8-10 B)
0.009-0.024 (docs/results.md)."""


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
    k_start: int | None = Field(
        None, ge=1, description="k annealing: training starts at k_start active latents, falling linearly to k over "
        "anneal_share of the steps (None: no annealing).")
    anneal_share: float = Field(0.7, gt=0, le=1, description="Share of the training steps over which k is annealed.")
    group_coef: float = Field(1.0, ge=0, description="With pairs or labels: weight of the asymmetric group loss in the "
                              "supervised fine-tune (csr_supervision).")
    group_temperature: float = Field(0.05, gt=0, description="τ of the asymmetric group loss.")
    pair_weight: float = Field(8.0, gt=0, description="Weight of a pair's query in the group loss (a corpus row: 1).")
    supervised_epochs: int = Field(20, ge=1, description="Fine-tune epochs with pairs or labels (at most).")
    supervised_lr: float = Field(1e-4, gt=0, description="Adam learning rate of the supervised fine-tune.")
    query_map: bool = Field(True, description="With pairs: the fine-tune also learns a linear map of the queries "
                            "(d x d, from the identity; documents never pass through it).")
    held_out_share: float = Field(0.2, ge=0, lt=1, description="Share of the pairs (or labelled rows) held out to "
                                  "stop the fine-tune on.")
    byte_budgets: ByteBudgets = Field(
        None, description="Bytes per vector to fit heads for (fit(..., bytes=B)): for each budget whose code holds "
        "at most k/3 latents, a head fine-tuned from the main fit with k annealed down to the k it holds at 2-bit "
        "values; kept when it recalls more of the held-out slice than the main fit's code of that size.")
    head_epochs: int = Field(5, ge=1, description="Epochs of each byte-budget head's fine-tune.")
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
        self._heads: list[_Head] = []

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
        rows = normalise(x)
        model = self._train(normalise, rows, _own_partners(rows), _own_partners(rows))
        self._fit_heads(model, normalise, rows, x, supervision)

    def _fit_stream(self, stream: RowStream, **supervision: Any) -> None:
        """Every row of the stream, in shuffled minibatches; the normalisation statistics, initial model, loss
        measurements, report, pairs' fine-tune and heads come from a uniform sample."""
        positions, sample = stream.sample(self.stream_sample_rows, self.config.seed)
        shift, scale = self._normalisation(sample)
        normalise = _Normaliser(self.config.normalize, shift, scale)
        assert stream.rows is not None
        prepare = _StreamRows(normalise)
        data = StreamBatches.holding_out(stream, prepare, (positions, sample), self.config.val_fraction, self.config.seed)
        raw = sample
        sample = normalise(sample)  # one normalised copy serves the start, the measurements and the report
        model = self._train(normalise, sample, data, _own_partners(sample))
        self._fit_heads(model, normalise, sample, raw, supervision)

    def _finish_head(self, model: CSRModel, k: int, nbytes: int, normalise: _Normaliser, rows: torch.Tensor,
                     raw: torch.Tensor, supervision: dict[str, Any]) -> _Head:
        """A trained model, fine-tuned on the supervision (if any), with its value codebooks and choice table."""
        model, supervised = self._fine_tune(model, k, normalise, rows, **supervision)
        assert self.fit_report is not None
        tables = self._value_tables(model, raw)
        if nbytes == 0 and supervised:
            self.fit_report["extra"]["supervised"] = supervised
        if nbytes == 0 and tables:
            self.fit_report["extra"]["value_choices"] = tables.rows()
        return _Head(k, nbytes, model, tables, supervised)

    def _fit_heads(self, model: CSRModel, normalise: _Normaliser, rows: torch.Tensor, raw: torch.Tensor,
                   supervision: dict[str, Any]) -> None:
        """The main head from the trained ``model``; then, for each of ``byte_budgets`` whose code holds at most a
        third of the main fit's k, a head fine-tuned from the main fit with k annealed down to the k the budget
        holds at ``HEAD_VALUE_BITS``, kept when its best code of that size recalls more of the held-out slice than
        the main fit's (the fit report says which)."""
        main = self._finish_head(model, self.config.k, 0, normalise, rows, raw, supervision)
        self._heads, reports = [main], []
        for nbytes in sorted(set(self.config.byte_budgets or ()), reverse=True):
            k = head_k(nbytes, main.model.hidden)
            if k < 1 or k > HEAD_MAX_SHARE * main.k:
                reports.append({"bytes": nbytes, "k": k, "kept": False,
                                "why": f"served by the main fit (k={main.k}): heads are fitted up to k = {main.k}/3"})
                continue
            started = time.perf_counter()
            model, dead = self._anneal_head(main.model, main.k, k, rows)
            head = self._finish_head(model, k, nbytes, normalise, rows, raw, supervision)
            own, cut = head.recall_within(nbytes), main.recall_within(nbytes)
            kept = own > cut
            if kept:
                self._heads.append(head)
            reports.append({"bytes": nbytes, "k": k, "kept": kept, "held_out_recall@10": own,
                            "main_fit_recall@10": cut, "seconds": round(time.perf_counter() - started, 2), **dead,
                            **({"supervised": head.supervised} if head.supervised else {})})
        self._heads.sort(key=lambda head: head.k)
        if reports:
            assert self.fit_report is not None
            self.fit_report["extra"]["heads"] = reports

    def _anneal_head(self, model: CSRModel, k_from: int, k: int, rows: torch.Tensor) -> tuple[CSRModel, dict[str, float]]:
        """``model`` fine-tuned for ``head_epochs`` epochs with k falling from ``k_from`` to ``k``; the dead-latent
        fractions at k before and after."""
        cfg = self.config
        tune = cfg.model_copy(update={"epochs": cfg.head_epochs, "k": k, "k_start": k_from, "val_fraction": 0.0})
        data = _own_partners(rows)
        objective = CSRObjective(copy.deepcopy(model), _loss_settings(tune, _anneal_steps(tune, data)))
        before = _dead_fraction(model, rows, k)
        train(objective, data, tune, description=f"csr k={k}")
        model = objective.cpu().eval().model
        return model, {"dead_fraction_before": before, "dead_fraction_after": _dead_fraction(model, rows, k)}

    def _fine_tune(self, model: CSRModel, k: int, normalise: _Normaliser, rows: torch.Tensor,
                   pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
                   labels: torch.Tensor | None = None) -> tuple[CSRModel, dict[str, Any] | None]:
        """With pairs or labels: ``model`` (trained for ``k``) fine-tuned with the asymmetric group loss, stopping
        on the held-out share of them (``csr_supervision``), and its measurements; else ``model`` as it is."""
        if pairs is None and labels is None:
            return model, None
        cfg = self.config.model_copy(update={"k": k})
        normalised = None if pairs is None else (normalise(pairs[0]), normalise(pairs[1]))
        data = group_rows(rows, normalised, labels, cfg.held_out_share, cfg.pair_weight, self.generator)
        settings = dataclasses.replace(_loss_settings(cfg, 0), cl_coef=0.0, group_coef=cfg.group_coef,
                                       group_temperature=cfg.group_temperature)
        if pairs is not None and cfg.query_map:
            model = copy.deepcopy(model)
            model.add_query_map()
        objective = CSRObjective(model, settings)

        def measure() -> float:
            model = objective.model
            device = next(model.parameters()).device

            def scores(queries: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
                keys = model.dense_codes(pool.to(device), cfg.k)
                return (model.query_pre_activations(queries.to(device)) @ keys.T).cpu()

            return -held_out_mrr(scores, data)

        measured = len(data.held_queries) >= MIN_HELD_OUT
        with torch.no_grad():
            before = -measure() if measured else None
        tune = cfg.model_copy(update={"epochs": cfg.supervised_epochs, "val_fraction": 0.0, "lr": cfg.supervised_lr})
        every = _steps_per_epoch(tune, data.tensors())
        report = train(objective, data.tensors(), tune, description="csr supervised",
                       checkpoints=Checkpoints(measure, every=every) if measured else None)
        return objective.cpu().eval().model, {
            "held_out_queries": len(data.held_queries), "held_out_mrr_before": before,
            "held_out_mrr_after": None if report.val_loss is None else -report.val_loss,
            "best_step": report.extra.get("best_step"), "steps": report.steps, "seconds": round(report.seconds, 2)}

    def _value_tables(self, model: CSRModel, x: torch.Tensor) -> ValueTables | None:
        """Codebooks from a sample of the fit rows ``x`` and the choice table measured with a held-out slice of
        them as queries (``csr_values``); none for float16 values. The slice is held out of the codebooks and the
        searched documents, not of training: leaving a tenth of the rows out of training cost up to 0.012
        NDCG@10 on the default data, while the choice compares codes of one model."""
        if self.config.value_bits == 16:
            return None
        rows, held_out = _held_out(len(x), self.generator)
        docs, queries = x[rows[torch.randperm(len(rows), generator=self.generator)[:_CODEBOOK_ROWS]]], x[held_out]
        with torch.inference_mode():
            return fit_value_tables(lambda batch, k: model.sparse_codes(model.normalise(batch), k),
                                    lambda q: self._query_projection(q, model), self._query_rows, docs, queries, model.hidden)

    def _train(self, normalise: _Normaliser, x: torch.Tensor, data: Any,
               measured: list[torch.Tensor]) -> CSRModel:
        """Initialise from the normalised rows ``x``, train on ``data``, measure losses on ``measured`` before
        and after; the model (its report is the fit report)."""
        cfg = self.config
        hidden = cfg.hidden or 4 * x.shape[1]
        if cfg.k > hidden:
            size = f"hidden={hidden}" if cfg.hidden else f"hidden=None: 4 d = {hidden}"
            raise InvalidConfigError(f"csr: k={cfg.k} is larger than the latent size ({size}); valid: k=1..{hidden}, "
                                     "or a larger hidden", parameter="k", value=cfg.k, valid=f"1..{hidden}")
        settings = _loss_settings(cfg, _anneal_steps(cfg, data))
        initial = self._initial_model(x, hidden, normalise.shift, normalise.scale)
        objective = CSRObjective(initial, settings)
        dead_at_start = _dead_fraction(initial, x, cfg.k)
        before = self._measure(objective, *measured)
        report = train(objective, data, cfg, description="csr")
        objective = objective.cpu().eval()
        after = self._measure(objective, *measured)
        self.fit_report = self._report(report.as_dict(), before, after, x, objective.model)
        self.fit_report["extra"]["dead_fraction_at_start"] = dead_at_start
        return objective.model

    def _normalisation(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(shift, scale) of the input normalisation: the fit rows' mean and std for ``standardize``."""
        if self.config.normalize == "standardize":
            return x.mean(dim=0), x.std(dim=0).clamp_min(1e-6)
        return torch.zeros(x.shape[1]), torch.ones(x.shape[1])

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
                x: torch.Tensor, model: CSRModel) -> dict[str, Any]:
        frequency = _activation_frequency(model, x, self.config.k)
        loop["extra"] = {
            "hidden": int(frequency.numel()),
            "k": self.config.k,
            "losses_before": before,
            "losses_after": after,
            "dead_fraction": float((frequency == 0).float().mean()),
            "activation_frequency": _summary(frequency),
        }
        return loop

    # -- encoding and scoring -----------------------------------------------------------------

    @property
    def _main(self) -> _Head:
        """The main fit (at the config's k); ``byte_budgets`` may add heads trained for smaller k."""
        assert self._heads, "fit first"
        return next(head for head in self._heads if head.nbytes == 0)

    @property
    def _fitted_model(self) -> CSRModel:
        return self._main.model

    def _head(self, k: int) -> _Head:
        """The head that encodes (and projects queries) at ``k``: the one trained for the nearest k (the larger on
        a tie)."""
        return min(self._heads, key=lambda head: (abs(head.k - k), -head.k))

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        encoder = self.encoder(k)
        hidden = self._fitted_model.hidden
        packed = torch.cat([encoder(block)[0] for block in _blocks(x, hidden)])
        return PackedSparseCodes(packed.numpy(), hidden, k, encoder.value_bits, self._codebook(k, encoder.value_bits))

    def query_budget(self, doc_codes: Codes) -> int | None:
        """Packed documents say their k (an empty slot does not change which head projects the queries)."""
        return doc_codes.k if isinstance(doc_codes, PackedSparseCodes) else super().query_budget(doc_codes)

    def encoder(self, k: int) -> PackedCSREncoder:
        """The encode path as one module (normalise, matmul, topk, relu, quantise, pack), exported to ONNX as is.
        With ``normalize="l2"`` an all-zero row (no direction) gets k empty slots, which add nothing to any score."""
        bits = self.value_bits(k)
        model = self._head(k).model
        return PackedCSREncoder(CSREncoder(model, k, value_dtype=torch.float32),
                                PackedSparseCodes.packer(model.hidden, bits, self._codebook(k, bits))).eval()

    def value_bits(self, k: int) -> int:
        """Bits per stored value of codes at ``k``: the config's ``value_bits``, else the fit's choice for k."""
        if self.config.value_bits is not None:
            return self.config.value_bits
        tables = self._head(k).tables
        return 16 if tables is None else tables.value_bits(k)

    def details(self) -> dict[str, Any]:
        """The measured choice per k (value bits, bytes, held-out recall@10) that ``bytes=`` picks from."""
        if all(head.tables is None for head in self._heads):
            return {}
        chosen = [{**({"head": f"k={head.k}"} if len(self._heads) > 1 else {}),
                   **{key: value for key, value in row.items() if key != "chosen"}}
                  for head in self._heads if head.tables is not None
                  for row in head.tables.rows() if row["chosen"] and self._head(row["k"]) is head]
        return {"byte budgets (the value bits of each k, measured at fit)": chosen}

    def _codebook(self, k: int, bits: int) -> np.ndarray | None:
        tables = self._head(k).tables
        return None if bits == 16 or tables is None else tables.codebook(k, bits)

    def budget_for_bytes(self, nbytes: float, sample: Any = None) -> int | None:
        """The k whose packed code fits ``nbytes``: the best held-out recall among the measured k (value bits
        chosen per k), or the largest k at the config's ``value_bits``."""
        self._require_fitted()
        hidden = self._fitted_model.hidden
        if self.config.value_bits is None and all(head.tables is not None for head in self._heads):
            best = [(head.recall_within(nbytes, self._head), -k, k) for head in self._heads
                    if (k := head.budget_for_bytes(nbytes, self._head)) is not None]
            return max(best)[2] if best else None
        width = PackedSparseCodes.index_bits(hidden) + self.value_bits(1)
        k = min(hidden, int(8 * int(nbytes) // width))
        return k if k >= 1 else None

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        """Packed codes (symmetric) or ``ProjectedQueries`` (asymmetric): the query's encoder pre-activations, or
        ``(W_dec (σ ⊙ q), <q, σ ⊙ b_pre + μ>)`` through the decoder (``query_form``)."""
        if self.config.scoring == "symmetric":
            return self.encode(x, k=k)
        projected, offset = self._query_projection(self._query_rows(x), self._head(k or self._budgets().default).model)
        return ProjectedQueries(projected.contiguous().numpy(), offset.contiguous().numpy())

    def _query_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Queries as scored: unit rows with ``normalize="l2"`` (scale-free, no overflow; 0 for 0), else as given."""
        return unit_rows(x) if self.normalizes_rows else x

    def _query_projection(self, q: torch.Tensor, model: CSRModel) -> tuple[torch.Tensor, torch.Tensor]:
        """(values over the h latents, offset) of queries ``q`` as ``model`` scores them (``query_form``); a zero
        query of an ``l2`` compressor scores 0."""
        if self.config.query_form == "decoder":
            return model.project_queries(q)
        pre = model.query_pre_activations(model.normalise(q))
        return (pre * has_direction(q) if self.normalizes_rows else pre), torch.zeros(len(q))

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Asymmetric ``<projected query, doc>`` for ``ProjectedQueries`` (``⟨q, x̂_doc⟩`` through the decoder); the
        sparse dot product for sparse queries (packed codes, or the ``SparseCodes`` of files written before them)."""
        if not isinstance(doc_codes, (PackedSparseCodes, SparseCodes)):
            raise TypeError(f"csr scores its own packed_sparse documents; got {type(doc_codes).__name__}")
        return query_codes.similarity(doc_codes)

    def _decode(self, codes: Codes) -> torch.Tensor:
        model = self._head(codes.k).model if isinstance(codes, PackedSparseCodes) else self._fitted_model
        return model.decode(torch.from_numpy(codes.to_dense()))

    # -- state ----------------------------------------------------------------------------------

    def _budgets(self) -> Budgets:
        return Budgets(low=1, high=self._fitted_model.hidden, default=self._main.k)

    def _state(self) -> dict[str, torch.Tensor]:
        """The main fit's tensors as before heads existed; each extra head's under ``head{i}.``, listed (k, bytes)
        in ``heads``."""
        main = self._main
        state = main.state()
        extra = [head for head in self._heads if head is not main]
        if extra:
            state["heads"] = torch.tensor([[head.k, head.nbytes] for head in extra], dtype=torch.int64)
            for i, head in enumerate(extra):
                state.update({f"head{i}.{name}": tensor for name, tensor in head.state().items()})
        return state

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
        own = {name: t for name, t in tensors.items() if not name.startswith("head")}
        self._heads = [_Head.from_state(own, self.config.k, 0, self.config.normalize)]
        for i, (k, nbytes) in enumerate(tensors.get("heads", torch.zeros(0, 2, dtype=torch.int64)).tolist()):
            prefix = f"head{i}."
            head = {name[len(prefix):]: t for name, t in tensors.items() if name.startswith(prefix)}
            if set(head) != set(own):
                raise ValueError(f"csr file: head {i} (k={k}) holds tensors {sorted(head)}, expected {sorted(own)}")
            self._heads.append(_Head.from_state(head, int(k), int(nbytes), self.config.normalize))
        self._heads.sort(key=lambda head: head.k)


@dataclasses.dataclass
class _Head:
    """A model trained for ``k`` (fitted for the byte budget ``nbytes``; 0: the main fit, at the config's k), its
    value tables and, with supervision, what the fine-tune measured."""

    k: int
    nbytes: int
    model: CSRModel
    tables: ValueTables | None
    supervised: dict[str, Any] | None = None

    def recall_within(self, nbytes: float, owner: Callable[[int], _Head] | None = None) -> float:
        """The best held-out recall@10 of this head's codes that fit ``nbytes`` (at the k ``owner`` gives it)."""
        return -1.0 if self.tables is None else self.tables.recall_within(nbytes, self._owned(owner))

    def budget_for_bytes(self, nbytes: float, owner: Callable[[int], _Head] | None = None) -> int | None:
        return None if self.tables is None else self.tables.budget_for_bytes(nbytes, self._owned(owner))

    def _owned(self, owner: Callable[[int], _Head] | None) -> Callable[[int], bool] | None:
        return None if owner is None else (lambda k: owner(k) is self)

    def state(self) -> dict[str, torch.Tensor]:
        tables = {} if self.tables is None else {"codebooks": self.tables.codebooks, "choices": self.tables.choices}
        return {**self.model.state(), **tables}

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], k: int, nbytes: int, normalize: str) -> _Head:
        model = CSRModel.from_state({n: t for n, t in tensors.items() if n not in ("codebooks", "choices")},
                                    normalize=normalize)
        tables = ValueTables(tensors["codebooks"], tensors["choices"]) if "codebooks" in tensors else None
        return cls(k, nbytes, model, tables)


def head_k(nbytes: int, hidden: int) -> int:
    """The k a head fitted for ``nbytes`` per vector trains for: the packed code's k at ``HEAD_VALUE_BITS``."""
    return 8 * nbytes // (PackedSparseCodes.index_bits(hidden) + HEAD_VALUE_BITS)


@torch.no_grad()
def _activation_frequency(model: CSRModel, x: torch.Tensor, k: int) -> torch.Tensor:
    """Fraction of the (normalised) rows ``x`` on which each latent is among the k active ones (value > 0)."""
    counts = torch.zeros(model.hidden)
    for block in _blocks(x, counts.numel()):
        values, indices = model.sparse_codes(block, k)
        counts += torch.bincount(indices[values > 0], minlength=counts.numel()).float()
    return counts / max(len(x), 1)


def _dead_fraction(model: CSRModel, x: torch.Tensor, k: int) -> float:
    """Share of latents never among the k active ones on the rows ``x``."""
    return float((_activation_frequency(model, x, k) == 0).float().mean())


class _StreamRows:
    """A stream batch as ``CSRObjective`` trains on it: normalised rows as their own partners, each its own group."""

    def __init__(self, normalise: _Normaliser) -> None:
        self.normalise = normalise

    def __call__(self, batch: torch.Tensor) -> list[torch.Tensor]:
        return _own_partners(self.normalise(batch))


def _own_partners(rows: torch.Tensor) -> list[torch.Tensor]:
    """Training tensors of rows with no supervision: each row its own partner, alone in its group."""
    return [rows, rows, torch.arange(len(rows))]


def _loss_settings(cfg: CSRConfig, anneal_steps: int) -> LossSettings:
    return LossSettings(k=cfg.k, multi_k_factor=cfg.multi_k_factor, multi_k_coef=cfg.multi_k_coef, k_aux=cfg.k_aux,
                        aux_coef=cfg.aux_coef, dead_steps=cfg.dead_steps, cl_coef=cfg.cl_coef,
                        temperature=cfg.temperature, view_dropout=cfg.view_dropout,
                        k_start=cfg.k_start or 0, anneal_steps=anneal_steps)


def _anneal_steps(cfg: CSRConfig, data: Any) -> int:
    """The optimisation steps over which k is annealed: ``anneal_share`` of the steps the fit may take."""
    return int(cfg.anneal_share * cfg.epochs * _steps_per_epoch(cfg, data))


def _steps_per_epoch(cfg: CSRConfig, data: Any) -> int:
    """Optimisation steps of one epoch over ``data`` (a stream, or tensors of which ``val_fraction`` is held out)."""
    if isinstance(data, StreamBatches):
        return data.steps_per_epoch(cfg.batch_size)
    return math.ceil(len(data[0]) * (1 - cfg.val_fraction) / cfg.batch_size)


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
