"""``bsa``: Binary Sparsity Alignment (seed 003): binary sparse codes from a sigmoid autoencoder.

One fit serves two inference modes:

* natural (``encode(x)``, ``k=None``): every feature with ``s >= 0.5``, a variable count per row
  (about the trained ``k`` on average), capped at ``budgets().default`` strongest features;
* fixed (``encode(x, k=j)``): exactly the ``j`` largest activations, any ``1 <= j <= h // 2``.

Codes are :class:`adaptemb.BinarySparseCodes`. Scoring (config ``scoring``): ``asymmetric`` (default:
a dense query projected through the decoder, ``cos(q, x_hat_doc)`` from ``<D q, b_doc> + <q, c>`` and
norms decoded from the codes once, when the index is built; no float document vectors), ``asymmetric_dot``
(``<q, x_hat_doc>``), or symmetric ``dot`` (|A ∩ B|) / ``cosine`` between binary codes. Every scoring is
searched through the documents' posting lists. See docs/methods/bsa.md.

The model (``bsa.model.BSAModel``) is what ``encode`` needs and what is saved; the objective
(``bsa.objective.BSAObjective``: the loss terms and their weights, input noise, code dropout) exists only while
fitting.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from adaptemb import (
    BinarySparseCodes,
    Budgets,
    Codes,
    Compressor,
    CompressorRegistry,
    InvalidConfigError,
    ProjectedQueries,
    RowStream,
    StreamBatches,
    TrainingConfig,
    has_direction,
    hookimpl,
    train,
    unit_rows,
)

from .model import THRESHOLD, BSAFixedEncoder, BSAModel
from .objective import BSAObjective, LossWeights

_REPORT_BLOCK = 4096


class BSAConfig(TrainingConfig):
    h: int | None = Field(None, ge=2, description="Code size N (features); None: 8 * d.")
    k: int | None = Field(
        None, ge=1, description="Target active count K (trained); None: max(64, h // 128), capped at h // 4."
    )
    alpha: float = Field(1.0, ge=0, description="Weight of the sparsity alignment loss.")
    alpha_ramp: float = Field(
        0.0, ge=0, le=1, description="Fraction of training over which alpha rises linearly from 0 (0: constant)."
    )
    epsilon: float = Field(0.125, ge=0, lt=1, description="Shift of the alignment target (pushes inactive below 0).")
    detach_target: bool = Field(True, description="Stop the gradient through the TopK alignment target.")
    target: Literal["values", "ones"] = Field(
        "ones", description="Alignment target: the 0/1 indicator of the top k (ones) or TopK_k(s) (values)."
    )
    fixed_k_weight: float = Field(0.0, ge=0, description="Weight of the fixed-K loss 1 - cos(D TopK_K(s), x); 0: off.")
    input_noise: float = Field(
        0.0, ge=0, lt=1,
        description="Expected norm of Gaussian noise added to each unit-norm training row before the encoder "
        "(denoising; the reconstruction target stays clean); 0: off. 0.3 helps small fits, see docs.",
    )
    code_dropout: float = Field(
        0.5, ge=0, lt=1,
        description="Fraction of code bits zeroed (others scaled by 1 / (1 - p)) before the decoder in each "
        "training step; a regulariser against overfitting small fits, see docs; 0: off.",
    )
    center: bool = Field(True, description="Subtract the fit rows' mean before the encoder (anisotropic spaces).")
    decoder_bias: bool = Field(True, description="Learn a decoder bias c: x_hat = D^T b + c.")
    init_scale: float = Field(
        3.0, gt=0, description="Std of W_enc (x - m) over the fit rows at start (zero bias: half of s above 0.5)."
    )
    max_active: int | None = Field(
        None, ge=1, description="Natural mode keeps at most this many features; None: min(h // 2, 4 * k)."
    )
    scoring: Literal["asymmetric", "asymmetric_dot", "dot", "cosine"] = Field(
        "asymmetric",
        description="asymmetric: cos(q, x_hat_doc); asymmetric_dot: <q, x_hat_doc>; dot/cosine: binary vs binary.",
    )
    holdout_fraction: float = Field(
        0.05, ge=0, lt=0.5, description="Rows kept out of training to measure reconstruction in fit_report."
    )
    epochs: int | None = Field(
        None, ge=1, description="Passes over the training rows (at most; held-out loss stops earlier); None: from the "
        "schedule (40 for small models, down to 25 as d * h grows, and down to 20 as the rows grow past 5,000; see "
        "docs/methods/bsa.md).",
    )
    batch_size: int | None = Field(
        None, ge=2, description="Rows per step; None: from the schedule (training rows // 100 down to // 40, 32..256).",
    )
    lr: float = Field(3e-2, gt=0, description="Adam learning rate.")
    patience: int = Field(3, ge=1, description="Epochs without held-out improvement before stopping.")


SCHEDULES = ((100, 40), (60, 40), (40, 30), (40, 25))
"""Default training schedules, most thorough first: (batch = training rows // divisor, epochs)."""
SCHEDULE_BUDGET = 1.0e12
"""Work (``schedule_work`` units) a default schedule may take: 5,000 x 768 rows at h = 6,144 get the last
schedule (measured 43 s on 2 cores with bf16 matmuls), 5,000 x 384 at h = 3,072 the first (~30 s)."""
ROWS_SEEN = 180_000
"""A schedule's epochs show the fit at most about this many rows in all, but never fewer than ``MIN_EPOCHS`` epochs.
Fits of up to 4,500 rows keep their schedule's 40 epochs (the size the schedules' quality and bsa's bar were
measured at, docs/methods/bsa.md: 5,000 x 384 rows less the held-out tenth; at 31 epochs its held-out
reconstruction distance rose from 0.144-0.146 to 0.149, against the bar's 0.15). The default data's 7,200 fit rows
train 25 epochs (NDCG@10 of its codes within noise from 15 to 40 epochs: 0.1252 / 0.1544 / 0.1747 at 15 / 32 / 63 B
with 15, 0.1240 / 0.1521 / 0.1776 with 20, 0.1243 / 0.1550 / 0.1752 with 40); the 768-d stand-in's 4,500 rows get
the last schedule's 25 epochs either way."""
MIN_EPOCHS = 20
STEP_COST_ROWS = 90
"""An optimiser step's fixed cost (Adam over both weight matrices, casts) in rows of forward-backward work,
measured on the 2-core dev machine (about 15 ms per step against 0.17 ms per row at d = 768, h = 6,144)."""


def schedule_work(rows: int, dim: int, h: int, batch: int, epochs: int) -> float:
    """Relative cost of a fit: ``d * h * epochs * (rows + steps per epoch * STEP_COST_ROWS)``."""
    return float(dim) * h * epochs * (rows + -(-rows // batch) * STEP_COST_ROWS)


class BSACompressor(Compressor):
    """Binary sparse codes by cosine sparsity alignment; natural (variable count) or fixed-k encoding."""

    name = "bsa"
    Config = BSAConfig
    budget_help = "k=None: natural mode (all s >= 0.5, ~k on average); k=j: exactly j active of h (1..h//2)"
    exportable = True
    test_params: ClassVar[dict[str, Any]] = {"h": 64, "k": 8, "epochs": 2, "batch_size": 64, "progress": False}
    doc_kind = "binary_sparse"
    symmetric = False  # its own encode_queries (projected queries) and score
    normalizes_rows = True
    trains_on_stream = True
    natural_budget = True  # encode(x): every s >= 0.5, a count per row
    decodes = True
    config: BSAConfig

    @property
    def query_kind(self) -> str:
        return "projected" if self.config.scoring.startswith("asymmetric") else "binary_sparse"

    # -- fitting --------------------------------------------------------------------------------

    def _fit(self, x: torch.Tensor, **supervision: Any) -> None:
        x = unit_rows(x)
        train_idx, held_idx = self._holdout(len(x))
        self._train(x, train_idx, held_idx, [x[train_idx]], len(train_idx))

    def _fit_stream(self, stream: RowStream, **supervision: Any) -> None:
        """Every row of the stream in shuffled minibatches; the centre, the initial scale, the held-out rows of
        the report and the early-stopping rows come from a uniform sample (held-out rows are left out of training)."""
        positions, sample = stream.sample(self.stream_sample_rows, self.config.seed)
        sample = unit_rows(sample)
        train_idx, held_idx = self._holdout(len(sample))
        kept = (positions[train_idx.numpy()], sample[train_idx])
        data = StreamBatches.holding_out(stream, lambda rows: [unit_rows(rows)], kept, self.config.val_fraction, self.config.seed)
        data.held_out = np.union1d(data.held_out, positions[held_idx.numpy()])
        assert stream.rows is not None
        self._train(sample, train_idx, held_idx, data, stream.kept_rows - len(data.held_out))

    def _train(self, x: torch.Tensor, train_idx: torch.Tensor, held_idx: torch.Tensor, data: Any, rows: int) -> None:
        """Initialise on the unit rows ``x[train_idx]``, train on ``data`` (``rows`` training rows), and report
        natural-mode statistics on ``x`` and the reconstruction of ``x[held_idx]``."""
        h, k = self._sizes(x.shape[1])
        train_rows = x[train_idx]
        model = BSAModel(x.shape[1], h, decoder_bias=self.config.decoder_bias, generator=self.generator)
        if self.config.center:
            model.center.copy_(train_rows.mean(dim=0))
        model.calibrate(train_rows, self.config.init_scale)
        batch_size, epochs = self._schedule(rows, x.shape[1], h)
        config = self.config.model_copy(update={"batch_size": batch_size, "epochs": epochs})
        objective = BSAObjective(model, self._loss_weights(k, rows, config), seed=self.config.seed)
        report = train(objective, data, config, description="bsa")
        self._model = objective.model.cpu().eval()
        self._k = k
        self.fit_report = {**report.as_dict(), "batch_size": batch_size, "max_epochs": epochs, **self._measure(x, x[held_idx])}

    def _schedule(self, rows: int, dim: int, h: int) -> tuple[int, int]:
        """(batch size, epochs): the configured ones, or the most thorough schedule of ``SCHEDULES`` whose work
        fits ``SCHEDULE_BUDGET`` (the last one when none does), its epochs capped at ``ROWS_SEEN`` rows in all (at
        least ``MIN_EPOCHS``). Deterministic: it depends on the problem's size only, never on the machine. See
        docs/methods/bsa.md, "Fit time"."""
        for divisor, epochs in SCHEDULES:
            batch = self.config.batch_size or int(min(256, max(32, rows // divisor)))
            epochs = self.config.epochs or max(MIN_EPOCHS, min(epochs, -(-ROWS_SEEN // rows)))
            if schedule_work(rows, dim, h, batch, epochs) <= SCHEDULE_BUDGET:
                break
        return batch, epochs

    def _sizes(self, dim: int) -> tuple[int, int]:
        h = self.config.h or 8 * dim
        k = self.config.k or min(max(64, h // 128), max(1, h // 4))
        if k > h // 2:
            raise InvalidConfigError(f"bsa: k={k} must be at most h // 2 = {h // 2} (h={h}); valid: k=1..{h // 2}, "
                                     "or a larger h", parameter="k", value=k, valid=f"1..{h // 2}")
        return h, k

    def _holdout(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices of the training rows and of the rows held out for the report's reconstruction distance."""
        held = int(rows * self.config.holdout_fraction)
        if held < 2 or rows - held < 4:
            return torch.arange(rows), torch.arange(0)
        order = torch.randperm(rows, generator=self.generator)
        return order[held:], order[:held]

    def _loss_weights(self, k: int, rows: int, c: BSAConfig) -> LossWeights:
        steps = c.epochs * max(1, -(-rows // c.batch_size))
        return LossWeights(k=k, alpha=c.alpha, epsilon=c.epsilon, detach_target=c.detach_target, target=c.target,
                           fixed_k_weight=c.fixed_k_weight, ramp_steps=int(c.alpha_ramp * steps),
                           input_noise=c.input_noise, code_dropout=c.code_dropout)

    @torch.no_grad()
    def _measure(self, x: torch.Tensor, held: torch.Tensor) -> dict[str, Any]:
        """Natural-mode statistics on all fit rows; reconstruction distance on the held-out rows."""
        fired = torch.zeros(self._model.encoder.shape[0], dtype=torch.bool)
        counts = []
        for start in range(0, len(x), _REPORT_BLOCK):
            active = self._model.activations(x[start : start + _REPORT_BLOCK]) >= THRESHOLD
            fired |= active.any(dim=0)
            counts.append(active.sum(dim=1).float())
        count = torch.cat(counts)
        rows = held if len(held) else x
        recon = self._model.decode((self._model.activations(rows) >= THRESHOLD).float())
        return {
            "h": int(fired.numel()), "k": self._k,
            "active_mean": float(count.mean()), "active_std": float(count.std()) if len(count) > 1 else 0.0,
            "dead_fraction": float((~fired).float().mean()),
            "natural_capped_fraction": float((count > self._max_active()).float().mean()),
            "reconstruction_cosine_distance": float((1 - F.cosine_similarity(recon, rows, dim=1)).mean()),
            "reconstruction_rows": "held_out" if len(held) else "fit (too few rows to hold out)",
            "reconstruction_row_count": len(rows),
        }

    # -- encoding -------------------------------------------------------------------------------

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        """Fixed mode: the ``k`` largest activations of each row; none for an all-zero row."""
        idx = torch.topk(self.activations(x), k, dim=1).indices.numpy()
        h = self._model.encoder.shape[0]
        live = has_direction(x)[:, 0].numpy()
        if live.all():
            return BinarySparseCodes.from_indices(idx, h)
        indptr = np.concatenate([[0], np.cumsum(np.where(live, k, 0))])
        return BinarySparseCodes(indptr, np.sort(idx[live], axis=1).reshape(-1), h)

    def encoder(self, k: int) -> torch.nn.Module:
        """Fixed mode at ``k`` as one module (natural mode's ragged output is not exported), emitting the storage
        form of rows of k active features: ``packed`` rows (``BinarySparseCodes.pack_slots``; an all-zero row's
        empty set is k empty slots), or a packed ``bitmap`` when that is smaller (``BinarySparseCodes.fixed_layout``)."""
        h = self._model.encoder.shape[0]
        return BSAFixedEncoder(self._model, k, layout=BinarySparseCodes.fixed_layout(k, h)).eval()

    def encoder_arrays(self, codes: Codes, k: int) -> dict[str, np.ndarray]:
        """What ``encoder(k)`` emits for fixed-mode ``codes``: their sets as ``packed`` rows of k slots, or as a
        ``bitmap``, whichever ``BinarySparseCodes.fixed_layout`` picks (codes of any layout are laid out so)."""
        docs = self._check_codes(codes)
        counts = docs.active_counts()
        if np.any((counts != k) & (counts != 0)):
            raise ValueError(f"fixed-mode codes at k={k} hold k or no active features per row; got counts "
                             f"{sorted(set(counts.tolist()))[:5]}")
        return docs.as_layout(BinarySparseCodes.fixed_layout(k, docs.dim), slots=k).to_arrays()

    def _encode_natural(self, x: torch.Tensor) -> BinarySparseCodes:
        """Natural mode (``encode(x)``): every feature with ``s >= 0.5``, at most ``budgets().default``; none for 0."""
        values, idx = torch.topk(self.activations(x), self._max_active(), dim=1)
        keep = ((values >= THRESHOLD) & has_direction(x)).numpy()
        mask = np.zeros((len(x), self._model.encoder.shape[0]), dtype=bool)
        rows = np.broadcast_to(np.arange(len(x))[:, None], keep.shape)
        mask[rows[keep], idx.numpy()[keep]] = True
        return BinarySparseCodes.from_mask(mask)

    def activations(self, x: torch.Tensor) -> torch.Tensor:
        """Soft activations ``s`` (n, h) of rows ``x`` (L2-normalised first)."""
        return self._model.activations(unit_rows(x))

    def _max_active(self) -> int:
        return min(self.config.max_active or 4 * self._k, self._model.encoder.shape[0] // 2)

    def _budgets(self) -> Budgets:
        return Budgets(low=1, high=self._model.encoder.shape[0] // 2, default=self._max_active())

    # -- decoding and scoring -------------------------------------------------------------------

    def _decode(self, codes: Codes) -> torch.Tensor:
        csr = self._check_codes(codes).to_csr()
        decoder = self._model.decoder.detach().numpy()
        return torch.from_numpy(np.asarray(csr @ decoder, dtype=np.float32)) + self._model.decoder_bias.detach()

    def _encode_queries(self, x: torch.Tensor, k: int | None) -> Codes:
        """Asymmetric scoring: ``ProjectedQueries`` ``(D q, <q, c>)`` of the unit-norm query; otherwise ``encode(x, k)``."""
        if not self.config.scoring.startswith("asymmetric"):
            return self.encode(x, k=k)
        q = unit_rows(x)  # an all-zero query stays zero: scores 0
        projected, offset = q @ self._model.decoder.T, q @ self._model.decoder_bias
        return ProjectedQueries(projected.contiguous().numpy(), offset.contiguous().numpy(),
                                document_weights=self.config.scoring == "asymmetric")

    def score(self, query_codes: Codes, doc_codes: Codes) -> np.ndarray:
        """Projected queries: ``<q, x_hat_doc> = <D q, b_doc> + <q, c>``, divided by ``|x_hat_doc|`` for
        ``scoring="asymmetric"`` (norms decoded from the codes); binary queries: |A ∩ B| or cosine."""
        docs = self._check_codes(doc_codes)
        if isinstance(query_codes, ProjectedQueries):
            scores = query_codes.similarity(docs)
            if self.config.scoring == "asymmetric":
                scores /= np.maximum(self.reconstruction_norms(docs), 1e-12)[None, :]
            return scores
        metric = "cosine" if self.config.scoring == "cosine" else "dot"
        return self._check_codes(query_codes).similarity(docs, metric=metric)

    def index_options(self, doc_codes: Codes) -> dict[str, Any]:
        """What the posting-list index needs to compute ``score``: document weights ``1 / |x_hat_doc|``
        (decoded once, here) for ``asymmetric``, the cosine metric for ``cosine``."""
        if self.config.scoring == "asymmetric":
            return {"doc_scale": 1.0 / np.maximum(self.reconstruction_norms(doc_codes), 1e-12)}
        return {"metric": "cosine"} if self.config.scoring == "cosine" else {}

    def reconstruction_norms(self, codes: Codes) -> np.ndarray:
        """``|x_hat|`` of each code, decoded blockwise (nothing float is stored per document)."""
        docs = self._check_codes(codes)
        parts = [np.linalg.norm(self.decode(docs[i : i + _REPORT_BLOCK]), axis=1) for i in range(0, len(docs), _REPORT_BLOCK)]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, dtype=np.float32)

    def _check_codes(self, codes: Codes) -> BinarySparseCodes:
        if not isinstance(codes, BinarySparseCodes):
            raise TypeError(f"bsa needs BinarySparseCodes from its own encode(); got {type(codes).__name__}")
        if codes.dim != self._model.encoder.shape[0]:
            raise ValueError(f"codes have dim {codes.dim}, this compressor has h={self._model.encoder.shape[0]}")
        return codes

    # -- state ----------------------------------------------------------------------------------

    def _state(self) -> dict[str, torch.Tensor]:
        return {**self._model.state(), "k": torch.tensor([self._k])}

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]]:
        h = self.config.h or 8 * dim  # as _sizes chooses it
        return {"encoder": (h, dim), "encoder_bias": (h,), "center": (dim,), "decoder": (h, dim),
                "decoder_bias": (dim,), "k": (1,)}

    def _set_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self._model = BSAModel.from_state(tensors, decoder_bias=self.config.decoder_bias)
        self._k = int(tensors["k"][0])


@hookimpl
def register_compressors(registry: CompressorRegistry) -> None:
    registry.add(BSACompressor)
