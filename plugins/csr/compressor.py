"""``csr``: Contrastive Sparse Representation — a TopK sparse autoencoder whose codes serve any k.

One fit trains with L(k) + L(4k)/8 + β·aux-k + γ·NCL (see ``docs/methods/csr.md``); ``encode`` then keeps the
top-k latents for any k from 1 to h, packed at their true size (``PackedSparseCodes``: ⌈log2(h + 1)⌉-bit
indices, values as levels of per-feature codebooks; ``csr.values`` fits those and measures which (k, value bits)
fills a byte budget, ``encode(x, bytes=B)``). Scoring is asymmetric by default: the dense query, as its encoder
pre-activations ``W_enc (q − b_pre) + b_enc`` (or through the decoder, ``⟨q, x̂_doc⟩ = ⟨W_decᵀq, z_doc⟩ +
⟨q, b_pre⟩``: ``query_form``), against the packed documents (``ProjectedQueries``, searched over the quantised
levels); or the paper's sparse·sparse dot product (``scoring="symmetric"``).

The model (``csr.model.CSRModel``) is what ``encode`` needs and what is saved; the objective
(``csr.objective.CSRObjective``: loss weights, dead-latent counters, the decoder constraint) exists only while fitting.
The settings are ``csr.config.CSRConfig``; the supervised fine-tune is ``csr.supervision``'s, the heads fitted for
byte budgets ``csr.heads``'.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

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
    has_direction,
    hookimpl,
    train,
    unit_rows,
)
from adaptemb_plugins.csr.config import CSRConfig, anneal_steps, loss_settings
from adaptemb_plugins.csr.heads import Head, fit_heads, serving
from adaptemb_plugins.csr.model import CSREncoder, CSRModel, PackedCSREncoder, geometric_median, row_blocks
from adaptemb_plugins.csr.objective import (
    CSRObjective,
    activation_frequency,
    dead_fraction,
    frequency_summary,
    own_partners,
)
from adaptemb_plugins.csr.supervision import fine_tune
from adaptemb_plugins.csr.values import ValueTables, fit_value_tables

_EVAL_ROWS = 2048  # rows the before/after loss measurement uses
_MEDIAN_ROWS = 8192  # rows the geometric median is estimated from
_CODEBOOK_ROWS = 4096  # training rows the value codebooks are fitted on (and the choice measured against)
_HELD_OUT_ROWS = 1024  # at most this many rows held out to measure the choice of value bits
_MIN_ROWS_TO_HOLD_OUT = 2000  # smaller fits hold nothing out


class CSRCompressor(Compressor):
    """TopK sparse autoencoder with Multi-TopK, aux-k and a non-negative contrastive loss."""

    name = "csr"
    Config = CSRConfig
    budget_help = "active latents k, 1 <= k <= h (h = 4·d by default); one fit serves every k"
    exportable = True
    fit_inputs = frozenset({"pairs", "labels", "queries"})
    test_params: ClassVar[dict[str, Any]] = {"hidden": 64, "k": 4, "epochs": 2, "batch_size": 64, "k_aux": 16, "progress": False}
    doc_kind = "packed_sparse"
    stream_sample_rows = 32_768  # enough for the start (8,192-row median, h rows) and the report
    symmetric = False  # its own encode_queries (projected queries by default) and score
    trains_on_stream = True
    decodes = True
    config: CSRConfig

    def __init__(self, config: CSRConfig | None = None, **params: Any) -> None:
        super().__init__(config, **params)
        self._heads: list[Head] = []

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
        model = self._train(normalise, rows, own_partners(rows), own_partners(rows))
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
        model = self._train(normalise, sample, data, own_partners(sample))
        self._fit_heads(model, normalise, sample, raw, supervision)

    def _fit_heads(self, model: CSRModel, normalise: _Normaliser, rows: torch.Tensor, raw: torch.Tensor,
                   supervision: dict[str, Any]) -> None:
        """The main head and the byte budgets' heads (``csr.heads.fit_heads``) from the trained ``model``, fine-tuned
        on the supervision (if any), value tables measured on the raw fit rows; the fit report says what they measured."""
        cfg = self.config
        queries = supervision.pop("queries", None)  # judges the value tables (and so the heads), learns nothing
        heads, reports = fit_heads(
            model, cfg, rows,
            lambda tuned, k: fine_tune(tuned, cfg, k, normalise, rows, self.generator, **supervision),
            lambda tuned: self._value_tables(tuned, raw, queries))
        self._heads = heads
        assert self.fit_report is not None
        main, extra = self._main, self.fit_report["extra"]
        if main.supervised:
            extra["supervised"] = main.supervised
        if main.tables:
            extra["value_choices"] = main.tables.rows()
            extra["value_choices_judged_by"] = ("a held-out slice of the fit rows" if queries is None
                                                else f"the sample of {len(queries)} queries")
        if reports:
            extra["heads"] = reports

    def _value_tables(self, model: CSRModel, x: torch.Tensor, sample: torch.Tensor | None = None) -> ValueTables | None:
        """Codebooks from a sample of the fit rows ``x`` and the choice table measured with the query ``sample``, or
        without one a held-out slice of the rows as queries (``csr.values``); none for float16 values. The slice is
        held out of the codebooks and the searched documents, not of training: leaving a tenth of the rows out of
        training cost up to 0.012 NDCG@10 on the default data, while the choice compares codes of one model."""
        if self.config.value_bits == 16:
            return None
        rows, held_out = _held_out(len(x), self.generator)
        if sample is not None:  # real queries: no row need be held out
            rows = torch.arange(len(x))
        docs = x[rows[torch.randperm(len(rows), generator=self.generator)[:_CODEBOOK_ROWS]]]
        queries = x[held_out] if sample is None else sample
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
        settings = loss_settings(cfg, anneal_steps(cfg, data))
        initial = self._initial_model(x, hidden, normalise.shift, normalise.scale)
        objective = CSRObjective(initial, settings)
        dead_at_start = dead_fraction(initial, x, cfg.k)
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
        frequency = activation_frequency(model, x, self.config.k)
        loop["extra"] = {
            "hidden": int(frequency.numel()),
            "k": self.config.k,
            "losses_before": before,
            "losses_after": after,
            "dead_fraction": float((frequency == 0).float().mean()),
            "activation_frequency": frequency_summary(frequency),
        }
        return loop

    # -- encoding and scoring -----------------------------------------------------------------

    @property
    def _main(self) -> Head:
        """The main fit (at the config's k); ``byte_budgets`` may add heads trained for smaller k."""
        assert self._heads, "fit first"
        return next(head for head in self._heads if head.nbytes == 0)

    @property
    def _fitted_model(self) -> CSRModel:
        return self._main.model

    def _head(self, k: int) -> Head:
        """The head that encodes (and projects queries) at ``k``: ``csr.heads.serving``."""
        return serving(self._heads, k)

    def _encode(self, x: torch.Tensor, k: int) -> Codes:
        encoder = self.encoder(k)
        hidden = self._fitted_model.hidden
        packed = torch.cat([encoder(block)[0] for block in row_blocks(x, hidden)])
        return PackedSparseCodes(packed.numpy(), hidden, k, encoder.value_bits, self._codebook(k, encoder.value_bits),
                                 encoder.packer.low_bits)

    def query_budget(self, doc_codes: Codes) -> int | None:
        """Packed documents say their k (an empty slot does not change which head projects the queries)."""
        return doc_codes.k if isinstance(doc_codes, PackedSparseCodes) else super().query_budget(doc_codes)

    def encoder(self, k: int) -> PackedCSREncoder:
        """The encode path as one module (normalise, matmul, topk, relu, quantise, pack), exported to ONNX as is.
        With ``normalize="l2"`` an all-zero row (no direction) gets k empty slots, which add nothing to any score."""
        bits = self.value_bits(k)
        model = self._head(k).model
        packer = PackedSparseCodes.packer(model.hidden, bits, self._codebook(k, bits),
                                          PackedSparseCodes.low_bits_of(k, model.hidden, bits))
        return PackedCSREncoder(CSREncoder(model, k, value_dtype=torch.float32), packer).eval()

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
        """The k whose packed code fits ``nbytes``: each head's pick among its measured k at their value bits
        (``csr.values.pick``), the head whose pick recalls most of its held-out slice; or the largest k at the
        config's ``value_bits``."""
        self._require_fitted()
        hidden = self._fitted_model.hidden
        if self.config.value_bits is None and all(head.tables is not None for head in self._heads):
            best = [(head.recall_within(nbytes, self._head), -k, k) for head in self._heads
                    if (k := head.budget_for_bytes(nbytes, self._head)) is not None]
            return max(best)[2] if best else None
        k = PackedSparseCodes.max_k_within(int(nbytes), hidden, self.value_bits(1))
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
        self._heads = [Head.from_state(own, self.config.k, 0, self.config.normalize)]
        for i, (k, nbytes) in enumerate(tensors.get("heads", torch.zeros(0, 2, dtype=torch.int64)).tolist()):
            prefix = f"head{i}."
            head = {name[len(prefix):]: t for name, t in tensors.items() if name.startswith(prefix)}
            if set(head) != set(own):
                raise ValueError(f"csr file: head {i} (k={k}) holds tensors {sorted(head)}, expected {sorted(own)}")
            self._heads.append(Head.from_state(head, int(k), int(nbytes), self.config.normalize))
        self._heads.sort(key=lambda head: head.k)


class _StreamRows:
    """A stream batch as ``CSRObjective`` trains on it: normalised rows as their own partners, each its own group."""

    def __init__(self, normalise: _Normaliser) -> None:
        self.normalise = normalise

    def __call__(self, batch: torch.Tensor) -> list[torch.Tensor]:
        return own_partners(self.normalise(batch))


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


@hookimpl
def register_compressors(registry: CompressorRegistry) -> None:
    registry.add(CSRCompressor)
