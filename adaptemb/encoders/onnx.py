"""One ONNX graph from what a service holds (token ids or image pixels) to the compressed code.

``export_encoder`` composes a backbone (the text or image encoders of :mod:`adaptemb.encoders`) with a
fitted compressor's head (``Compressor.encoder(k)``, the module ``Compressor.export_onnx`` exports alone)
into one graph:

* text: ``input_ids`` and ``attention_mask`` (int64, (batch, sequence)) from the tokenizer saved beside
  the ``.onnx`` file (``tokenizer.json``, with the model's truncation and padding switched on);
* images: ``pixel_values`` (float32, (batch, 3, size, size)), the preprocessing of
  ``ImageEncoder.preprocess`` (recorded in the file's metadata);

through the backbone's pooled, L2-normalised embedding and the head, to the code in its storage form
(``STORAGE_FORMS``: ``indices`` + ``values`` for sparse codes, ``bits`` for packed bit codes, ``codes``
for int8 and dense codes). Batch and sequence axes are dynamic.

The backbone and the head are exported separately (``torch.onnx.export``, the dynamo exporter) and
joined with ``onnx.compose``, so ``quantize="dynamic"`` can quantise the backbone alone (onnxruntime's
dynamic int8 quantisation) while the head stays exact. Before anything is written the float graph runs
under onnxruntime on sample inputs and must reproduce the torch pipeline (``compressor.encode`` of the
encoder's embeddings): at least ``MIN_AGREEMENT`` of the integer entries (indices as per-row sets, bits,
int8 codes) identical and float values within ``ATOL``. A quantised graph cannot be identical; it is
measured in its turn and held to its own bar (``QUANTIZED_MIN_AGREEMENT`` of the active indices / bits,
or a code cosine of ``QUANTIZED_MIN_COSINE`` for codes made of numbers), written either way, and reported
as failed when it misses that bar. The numbers go into the file's metadata.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from adaptemb._version import __version__
from adaptemb.codes import Codes, index_dtype
from adaptemb.compressor import Compressor
from adaptemb.encoders._common import ModelNotFoundError
from adaptemb.encoders.image import EFFICIENTNET_LITE0, ImageEncoder, load_image_encoder
from adaptemb.encoders.text import MINILM_NAMES, TextEncoder, load_text_encoder
from adaptemb.errors import UnsupportedExportError
from adaptemb.export import INPUT_NAME as HEAD_INPUT
from adaptemb.export import require_onnx
from adaptemb.serialization import atomic_write, is_a_directory
from adaptemb.threads import compute_threads

Modality = Literal["auto", "text", "image"]
TEXT_INPUTS = ("input_ids", "attention_mask")
IMAGE_INPUTS = ("pixel_values",)
EMBEDDING_OUTPUT = "embedding"
ENCODER_FORMAT = "adaptemb.encoder"
ENCODER_FORMAT_VERSION = "1"
MIN_AGREEMENT = 0.999
"""Fraction of integer code entries (indices, bits, int8 codes) the ONNX graph must reproduce exactly."""
ATOL = 1e-4
"""Largest difference allowed between float code values of the ONNX graph and the torch pipeline (plus
one unit in the last place for float16 values)."""
QUANTIZED_MIN_AGREEMENT = 0.85
"""The bar of a quantised graph (``quantize="dynamic"``) for codes made of indices or bits: the fraction of
the torch code's active entries it must reproduce (each row's index set for sparse codes, its set bits for
``binary_sparse``, every sign bit for ``binary``). Measured on all-MiniLM-L6-v2 (24 sample texts and 600
WordNet definitions): per-channel int8 weights (``QUANTIZE_OPTIONS``) keep 90-94 % for csr (k=16, 32) and
bsa, 96 % for binary, and their csr search loses nothing (NDCG@10 0.2784 vs 0.2786); per-tensor weights
keep 77-81 % for csr and bsa (NDCG@10 0.2705), 90-91 % for binary. 0.85 lies between; it says "close",
not "identical" (``MIN_AGREEMENT``)."""
QUANTIZED_MIN_COSINE = 0.98
"""The bar of a quantised graph for codes made of numbers (``int8``, dequantised; dense codes): the mean
cosine between each row's code from the graph and from the torch pipeline. Measured on MiniLM: 0.991-0.995
with per-channel weights (int8, svd and mrl at k=64), 0.956-0.971 per tensor."""
SAMPLE_TEXTS = (
    "A dog runs across the park.",
    "the cat sat on the mat",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "How do I reset my password?",
    "Paris is the capital of France.",
    "an expression of greeting",
    "She sells sea shells by the sea shore; the shells she sells are surely seashells.",
    "1234 5678 90",
    "Café, naïve, résumé: accents and umlauts (ä, ö, ü) survive tokenisation.",
    "x",
    "",
    "The stock market fell sharply on Monday after the central bank raised interest rates again.",
    "a small, round, red fruit that grows on trees",
    "What is the boiling point of water at sea level?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "to move quickly on foot",
    "The committee postponed its decision until further evidence could be gathered from the field.",
    "emoji 🙂 and symbols → ≠ ∞",
    "deep learning models compress embeddings",
    "WHO WON THE WORLD CUP IN 2018?",
    "the act of buying and selling goods",
    " ".join(["This long text is longer than the model's maximum sequence length, so it is truncated."] * 40),
    "the quick brown fox jumps over the lazy dog",
    "a building where books are kept for reading or borrowing",
)
"""The default parity sample: short and long texts, punctuation, accents, emoji, an empty text and one
longer than any model's maximum length (so truncation is checked too)."""
_TRACE_TEXTS = ("an example sentence", "another, slightly longer example sentence to trace with")
_SAMPLE_IMAGES = 16
_TIMING_ROUNDS = 2
QUANTIZE_OPTIONS = {"weight_type": "QInt8", "per_channel": True}
"""``onnxruntime.quantization.quantize_dynamic`` settings of ``quantize="dynamic"`` (recorded in the metadata)."""


class _Storage:
    """How one code kind's storage arrays come out of the composed graph."""

    def __init__(
        self,
        outputs: tuple[str, ...],
        graph: Callable[[dict[str, torch.Tensor], int], tuple[torch.Tensor, ...]],
        arrays: Callable[[Codes], dict[str, np.ndarray]],
    ) -> None:
        self.outputs, self.graph, self.arrays = outputs, graph, arrays


def _sparse_arrays(codes: Codes) -> dict[str, np.ndarray]:
    arrays = codes.to_arrays()
    if "counts" in arrays:
        raise UnsupportedExportError("sparse codes with a variable count per row (ragged) cannot be exported")
    return {"indices": arrays["indices"], "values": arrays["values"]}


def _pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """(n, h) 0/1 -> (n, ceil(h / 8)) uint8, most significant bit first (``np.packbits``)."""
    weights = 2.0 ** torch.arange(7, -1, -1, dtype=torch.float32, device=mask.device)
    padded = F.pad(mask.float(), (0, (-mask.shape[1]) % 8))
    return (padded.reshape(padded.shape[0], -1, 8) * weights).sum(dim=2).to(torch.uint8)


def _binary_sparse_bits(outs: dict[str, torch.Tensor], dim: int) -> tuple[torch.Tensor, ...]:
    if "bitmap" in outs:
        return (outs["bitmap"].to(torch.uint8),)
    indices = outs["indices"].long()  # -1 in every slot of a row with no active feature (an all-zero embedding)
    mask = torch.zeros(indices.shape[0], dim, dtype=torch.float32, device=indices.device)
    return (_pack_bits(mask.scatter(1, indices.clamp_min(0), (indices >= 0).float())),)


def _torch_index_dtype(dim: int) -> torch.dtype:
    return {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}.get(index_dtype(dim), torch.uint32)


STORAGE_FORMS: dict[str, _Storage] = {
    "dense": _Storage(("codes",), lambda o, d: (o["values"],), lambda c: {"codes": c.to_arrays()["values"]}),
    "sparse": _Storage(
        ("indices", "values"),
        lambda o, d: (o["indices"].to(_torch_index_dtype(d)), o["values"]),
        _sparse_arrays,
    ),
    "binary": _Storage(("bits",), lambda o, d: (o["packed"].to(torch.uint8),), lambda c: {"bits": c.to_arrays()["packed"]}),
    "int8": _Storage(("codes",), lambda o, d: (o["codes"],), lambda c: {"codes": c.to_arrays()["codes"]}),
    "binary_sparse": _Storage(
        ("bits",), _binary_sparse_bits, lambda c: {"bits": np.packbits(c.to_dense() > 0, axis=1)}
    ),
}
"""Storage form of each code kind in an exported encoder: output names, the conversion of the head's
outputs inside the graph (given the code dimension), and the same arrays from ``encode``'s codes. A kind
not listed keeps the head's own outputs (``encoder(k).output_names``, arrays of ``to_arrays()``)."""


class StorageHead(torch.nn.Module):
    """A compressor's ``encoder(k)`` with its outputs in the storage form of its code kind."""

    def __init__(self, head: torch.nn.Module, kind: str, dim: int) -> None:
        super().__init__()
        self.head, self.kind, self.dim = head, kind, dim
        form = STORAGE_FORMS.get(kind)
        self.output_names = form.outputs if form is not None else tuple(head.output_names)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = dict(zip(self.head.output_names, self.head(x)))
        form = STORAGE_FORMS.get(self.kind)
        return form.graph(outs, self.dim) if form is not None else tuple(outs.values())


def storage_arrays(codes: Codes, head_outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays an exported encoder emits for ``codes`` (``STORAGE_FORMS``, else the head's own)."""
    form = STORAGE_FORMS.get(codes.kind)
    if form is not None:
        return form.arrays(codes)
    arrays = codes.to_arrays()
    return {name: arrays[name] for name in head_outputs}


class TextBackbone(torch.nn.Module):
    """Token ids and mask -> the L2-normalised embedding ``TextEncoder.encode`` returns."""

    def __init__(self, encoder: TextEncoder) -> None:
        super().__init__()
        self.model = encoder.model
        self.sentence_transformer = encoder.tokenizer is None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.sentence_transformer:
            pooled = self.model({"input_ids": input_ids, "attention_mask": attention_mask})["sentence_embedding"]
        else:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return _unit(pooled.float())


class ImageBackbone(torch.nn.Module):
    """Normalised pixels -> the L2-normalised features ``ImageEncoder.encode`` returns."""

    def __init__(self, encoder: ImageEncoder) -> None:
        super().__init__()
        self.net = encoder.module
        self._forward = encoder.forward

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return _unit(self._forward(pixel_values).float())


def _unit(x: torch.Tensor) -> torch.Tensor:
    """Rows over their L2 norm, as ``l2_normalize`` does (zero rows stay zero)."""
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    return x / norms.clamp_min(float(np.finfo(np.float32).tiny))


@dataclass(frozen=True)
class EncoderParity:
    """How closely an ONNX encoder reproduced the torch pipeline on the sample inputs, and whether that met
    its bar: the float bar (``MIN_AGREEMENT``, ``ATOL``: the same codes) or, for a quantised graph, the
    quantised bar (``QUANTIZED_MIN_AGREEMENT`` / ``QUANTIZED_MIN_COSINE``: close codes)."""

    rows: int
    agreement: float
    """Fraction of identical integer entries: indices (compared as each row's set), bits, int8 codes."""
    max_abs_diff: float
    """Largest difference of float code values (sparse values compared by rank, largest first)."""
    integer_entries: int
    float_entries: int
    passed: bool
    """Whether the graph met ``bar``."""
    active_agreement: float = 1.0
    """Fraction of the torch code's active entries the graph reproduces: each row's index set (sparse codes),
    its set bits (``binary_sparse``), every bit (``binary`` and other bit codes); 1.0 without such entries."""
    active_entries: int = 0
    cosine: float = 1.0
    """Mean cosine between each row's code from the graph and from the torch pipeline, as vectors (sparse
    values at their indices, bits as 0/1 or ±1, int8 codes dequantised, dense values)."""
    quantized: bool = False
    """Measured on a graph with a quantised backbone (held to the quantised bar)."""
    bar: str = ""
    """The bar ``passed`` refers to, in words."""

    def __str__(self) -> str:
        parts = [f"{self.rows} inputs"]
        if self.quantized:
            if self.active_entries:
                parts.append(f"{self.active_agreement:.2%} of {self.active_entries} active indices/bits identical")
            parts.append(f"code cosine {self.cosine:.4f}")
            if self.integer_entries and (self.integer_entries, self.agreement) != (self.active_entries, self.active_agreement):
                parts.append(f"{self.agreement:.2%} of all {self.integer_entries} index/bit/code entries identical")
            if self.float_entries:
                parts.append(f"values within {self.max_abs_diff:.2e}")
            return ", ".join(parts) + f": {'passed' if self.passed else 'FAILED'} the int8 bar ({self.bar})"
        if self.integer_entries:
            parts.append(f"{self.agreement:.4%} of {self.integer_entries} index/bit/code entries identical")
        if self.float_entries:
            parts.append(f"values within {self.max_abs_diff:.2e}")
        return ", ".join(parts)


@dataclass(frozen=True)
class QuantizationReport:
    """What ``quantize="dynamic"`` changed, measured on the sample inputs."""

    method: str
    options: dict[str, Any]
    float_bytes: int
    quantized_bytes: int
    float_seconds: float
    """Best of two onnxruntime runs (after a warm-up) of the float graph over the whole sample."""
    quantized_seconds: float
    torch_seconds: float
    """Best of two runs of the torch pipeline (encoder, then ``compressor.encode``) over the sample."""
    threads: int
    parity: EncoderParity
    """The quantised graph (the one written) against the torch pipeline, held to the quantised bar."""
    float_parity: EncoderParity | None = None
    """The float graph it was quantised from (held to the float bar before quantising)."""

    @property
    def size_ratio(self) -> float:
        return self.float_bytes / self.quantized_bytes

    @property
    def speedup(self) -> float:
        """Quantised over float onnxruntime throughput."""
        return self.float_seconds / self.quantized_seconds

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "size_ratio": self.size_ratio, "speedup": self.speedup}

    def __str__(self) -> str:
        return (
            f"dynamic int8 quantisation: {self.float_bytes / 1e6:.1f} MB -> {self.quantized_bytes / 1e6:.1f} MB, "
            f"{self.speedup:.2f}x the float graph's speed on the sample ({self.threads} thread"
            f"{'s' if self.threads != 1 else ''}; torch "
            f"{self.torch_seconds * 1e3:.0f} ms, onnxruntime {self.float_seconds * 1e3:.0f} ms -> "
            f"{self.quantized_seconds * 1e3:.0f} ms)"
        )


@dataclass(frozen=True)
class EncoderExport:
    """What ``export_encoder`` wrote."""

    path: Path
    method: str
    k: int
    modality: str
    backbone: str
    inputs: dict[str, str]
    outputs: dict[str, str]
    parity: EncoderParity
    """The graph written against the torch pipeline: the float graph (held to ``MIN_AGREEMENT`` and
    ``ATOL``; never written unless it passes) or, with ``quantize``, the quantised graph (held to
    ``QUANTIZED_MIN_AGREEMENT`` / ``QUANTIZED_MIN_COSINE``; written either way, ``passed`` says whether it
    met that bar)."""
    size_bytes: int
    tokenizer_files: tuple[Path, ...] = ()
    quantization: QuantizationReport | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    float_parity: EncoderParity | None = None
    """With ``quantize``: the float graph the quantised one came from (it passed the float bar); else None."""

    @property
    def passed(self) -> bool:
        """Whether the graph written met its parity bar (``parity.passed``)."""
        return self.parity.passed

    def __str__(self) -> str:
        lines = [
            (f"wrote {self.path} ({self.size_bytes / 1e6:.1f} MB): {self.modality} backbone {self.backbone} + "
             f"{self.method} at k={self.k}"),
            "inputs: " + ", ".join(f"{name} {kind}" for name, kind in self.inputs.items()),
            "outputs: " + ", ".join(f"{name} {kind}" for name, kind in self.outputs.items()),
        ]
        if self.float_parity is None:
            lines.append(f"onnxruntime parity with the torch pipeline: {self.parity}")
        else:
            lines.append(f"onnxruntime parity with the torch pipeline, int8 graph (the one written): {self.parity}")
            lines.append(f"float graph before quantising: {self.float_parity}")
        if self.tokenizer_files:
            lines.append(f"tokenizer: {', '.join(str(p) for p in self.tokenizer_files)}")
        if self.quantization is not None:
            lines.append(str(self.quantization))
        if not self.parity.passed:
            lines.append(
                f"FAILED: the quantised encoder misses its parity bar ({self.parity.bar}); it was written anyway. "
                "Check its search quality before serving it, or export without quantisation."
            )
        return "\n".join(lines)


def export_encoder(
    model: str | Path | TextEncoder | ImageEncoder | None,
    compressor: Compressor | str | Path,
    path: str | Path,
    *,
    k: int | None = None,
    modality: Modality = "auto",
    quantize: Literal["dynamic"] | None = None,
    sample: Sequence[str] | np.ndarray | None = None,
    include_embedding: bool = False,
    weights: str | Path | None = None,
    image_size: int | None = None,
) -> EncoderExport:
    """Export backbone ``model`` composed with fitted ``compressor`` at budget ``k`` as one ONNX file.

    ``model`` is what ``load_text_encoder`` / ``load_image_encoder`` accept (``None``: the bundled
    all-MiniLM-L6-v2; ``"efficientnet-lite0"``, ``"timm:NAME"``, ``"open_clip:NAME"``, a model folder) or an
    encoder they returned; ``modality`` says which when a folder is ambiguous. ``compressor`` is a fitted
    compressor or the path of a saved one. ``sample`` (texts, or images as ``ImageEncoder.encode`` takes
    them) is what parity is checked on (default: ``SAMPLE_TEXTS`` / Fashion-MNIST test images when
    installed, else seeded random pixels). ``quantize="dynamic"`` writes the graph with its backbone
    quantised to int8 and measures what that changed. ``include_embedding`` adds the float embedding as
    an output ``embedding`` (for asymmetric scoring or rescoring). Text exports also write the tokenizer
    (``tokenizer.json`` and its companions) into the folder of ``path``; missing folders are created.
    Nothing is written unless the float graph reproduces the torch pipeline under onnxruntime
    (``MIN_AGREEMENT``, ``ATOL``). With ``quantize`` the result's ``parity`` is the quantised graph's, the
    one written: held to its own bar (at least ``QUANTIZED_MIN_AGREEMENT`` = 85 % of the active indices /
    bits identical for sparse and bit codes; a code cosine of at least ``QUANTIZED_MIN_COSINE`` = 0.98 for
    int8 and dense codes), it is written even when it misses that bar, with ``parity.passed`` False and
    a FAILED line in ``str(result)``; ``float_parity`` keeps the float graph's. Needs
    ``pip install 'adaptemb[onnx]'``.
    """
    require_onnx()
    if quantize not in (None, "dynamic"):
        raise ValueError(f"quantize must be None or 'dynamic'; got {quantize!r}")
    target = Path(path)
    if target.is_dir():
        raise is_a_directory(target)  # before any model loads
    compressor = _as_compressor(compressor)
    budget = compressor.budgets().resolve(k, compressor.name)  # NotFittedError before any model loads
    if not compressor.exportable:
        raise UnsupportedExportError(
            f"{compressor.name} cannot be exported to ONNX: it declares no encoder(k) (Compressor.exportable "
            f"is False); methods with an encoder: {', '.join(_methods_with_encoder()) or 'none'}"
        )
    encoder, kind = _resolve_model(model, modality, weights=weights, image_size=image_size)
    with _on_cpu(encoder), compute_threads() as threads:
        return _export(encoder, kind, compressor, budget, target, sample, quantize, include_embedding, threads)


def _export(
    encoder: TextEncoder | ImageEncoder,
    modality: str,
    compressor: Compressor,
    budget: int,
    target: Path,
    sample: Sequence[str] | np.ndarray | None,
    quantize: str | None,
    include_embedding: bool,
    threads: int,
) -> EncoderExport:
    import onnx

    text = isinstance(encoder, TextEncoder)
    serving_tokenizer = _serving_tokenizer(encoder) if text else None
    items = _sample(sample, text)

    def pipeline() -> tuple[np.ndarray, Codes]:
        embedded = encoder.encode(items, progress=False)
        if embedded.shape[1] != compressor.dim:
            raise ValueError(
                f"{encoder.name} gives {embedded.shape[1]}-d embeddings, but the {compressor.name} compressor was "
                f"fitted on d={compressor.dim}; fit it on this model's embeddings"
            )
        return embedded, compressor.encode(embedded, k=budget)

    embeddings, codes = pipeline()
    head = StorageHead(compressor.encoder(budget), codes.kind, codes.dim).eval()
    expected = storage_arrays(codes, head.head.output_names)
    if text:
        assert serving_tokenizer is not None
        backbone: torch.nn.Module = TextBackbone(encoder)  # type: ignore[arg-type]
        feeds = _tokenize(serving_tokenizer, list(items))
        trace = tuple(torch.from_numpy(a) for a in _tokenize(serving_tokenizer, list(_TRACE_TEXTS)).values())
        input_names = TEXT_INPUTS
    else:
        image_encoder: ImageEncoder = encoder  # type: ignore[assignment]
        backbone = ImageBackbone(image_encoder)
        with torch.no_grad():
            pixels = image_encoder.preprocess(torch.from_numpy(np.asarray(items))).cpu()
        feeds = {"pixel_values": pixels.numpy()}
        trace = (pixels[:2].clone() if len(pixels) > 1 else pixels.repeat(2, 1, 1, 1),)  # batch 1 would be static
        input_names = IMAGE_INPUTS
    output_names = (*head.output_names, *((EMBEDDING_OUTPUT,) if include_embedding else ()))

    with tempfile.TemporaryDirectory(prefix="adaptemb-export-") as tmp:
        work = Path(tmp)
        _export_module(backbone.eval(), trace, work / "backbone.onnx", list(input_names), ["__adaptemb_embedding__"],
                       dynamic_sequence=text)
        head_rows = torch.from_numpy(embeddings[:8].copy())
        if len(head_rows) < 2:
            head_rows = head_rows.repeat(2, 1)
        _export_module(head, (head_rows,), work / "head.onnx", [HEAD_INPUT], list(head.output_names),
                       dynamic_sequence=False)
        model = _compose(onnx.load(str(work / "backbone.onnx")), onnx.load(str(work / "head.onnx")),
                         input_names, head.output_names, include_embedding)
        float_path = work / "encoder.onnx"
        _save(model, float_path)
        outputs = _run(float_path, feeds, output_names, threads)
        parity = compare_codes(outputs, expected, reference=codes)
        if not parity.passed:
            raise ValueError(
                f"the exported ONNX encoder does not reproduce the torch pipeline: {parity} (needs at least "
                f"{MIN_AGREEMENT:.1%} identical and values within {ATOL}); nothing was written"
            )
        report, float_parity = None, None
        if quantize == "dynamic":
            model, report = _quantized(work, input_names, head.output_names, include_embedding, feeds, expected,
                                       output_names, threads, pipeline, float_path, codes, parity)
            parity, float_parity = report.parity, parity  # the result describes the graph written
        metadata = _metadata(encoder, modality, compressor, budget, codes, model, parity, report, serving_tokenizer)
        for key, value in metadata.items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        model.producer_name, model.producer_version = "adaptemb", __version__
        model.doc_string = (
            f"adaptemb encoder: {encoder.name} ({modality}) + {compressor.name} at k={budget}; "
            f"inputs {', '.join(input_names)}; outputs {', '.join(output_names)}"
        )
        atomic_write(target, lambda tmp_path: _save(model, tmp_path))
    tokenizer_files = _write_tokenizer(encoder, serving_tokenizer, target.parent) if text else ()
    return EncoderExport(
        path=target, method=compressor.name, k=budget, modality=modality, backbone=encoder.name,
        inputs=json.loads(metadata["inputs"]), outputs=json.loads(metadata["outputs"]), parity=parity,
        size_bytes=target.stat().st_size, tokenizer_files=tokenizer_files, quantization=report, metadata=metadata,
        float_parity=float_parity,
    )


def compare_codes(outputs: dict[str, np.ndarray], expected: dict[str, np.ndarray], *, reference: Codes | None = None,
                  quantized: bool = False) -> EncoderParity:
    """Parity of an ONNX encoder's ``outputs`` with the storage arrays ``expected`` (see ``EncoderParity``).

    ``reference`` (the torch pipeline's codes) tells the code kind (``binary_sparse`` bits count their set
    bits as the active entries; int8 codes are dequantised for the cosine). ``quantized`` holds the outputs
    to the quantised bar instead of the float bar."""
    kind = reference.kind if reference is not None else None
    same = total = floats = active_same = active_total = 0
    max_diff, within = 0.0, True
    rows = 0
    got_rows: list[Any] = []  # the code as vectors, one block per output, for the cosine
    want_rows: list[Any] = []
    for name, want in expected.items():
        got = outputs[name]
        rows = len(want)
        if got.shape != want.shape:
            raise ValueError(f"ONNX output {name!r} has shape {got.shape}, the torch pipeline gives {want.shape}")
        sparse = name == "indices" and want.ndim == 2
        if np.issubdtype(want.dtype, np.floating):
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            allowed = ATOL + (np.finfo(want.dtype).eps * np.abs(want.astype(np.float64)) if want.dtype == np.float16 else 0)
            within = within and bool((diff <= allowed).all())
            max_diff = max(max_diff, float(diff.max(initial=0.0)))
            floats += want.size
            if not (name == "values" and "indices" in expected):  # sparse values go with their indices
                got_rows.append(got.reshape(rows, -1).astype(np.float64))
                want_rows.append(want.reshape(rows, -1).astype(np.float64))
        elif name == "bits":
            got_bits = np.unpackbits(got.astype(np.uint8), axis=1)
            want_bits = np.unpackbits(want.astype(np.uint8), axis=1)
            equal = got_bits == want_bits
            same, total = same + int(equal.sum()), total + equal.size
            if kind == "binary_sparse":  # the active features are the set bits
                active_same += int((got_bits & want_bits).sum())
                active_total += int(want_bits.sum())
                got_rows.append(got_bits.astype(np.float64))
                want_rows.append(want_bits.astype(np.float64))
            else:  # every bit is a sign
                active_same, active_total = active_same + int(equal.sum()), active_total + equal.size
                got_rows.append(2.0 * got_bits - 1.0)
                want_rows.append(2.0 * want_bits - 1.0)
        elif sparse:  # a row's active set; order within a row may differ at ties
            got64, want64 = got.astype(np.int64), want.astype(np.int64)
            overlap = sum(len(np.intersect1d(g, w)) for g, w in zip(got64, want64))
            same, total = same + overlap, total + want.size
            active_same, active_total = active_same + overlap, active_total + want.size
            width = int(max(got64.max(initial=0), want64.max(initial=0))) + 1
            got_rows.append(_sparse_rows(got64, outputs.get("values"), width))
            want_rows.append(_sparse_rows(want64, expected.get("values"), width))
        else:
            same += int((got.astype(np.int64) == want.astype(np.int64)).sum())
            total += want.size
            got_values, want_values = got.reshape(rows, -1).astype(np.float64), want.reshape(rows, -1).astype(np.float64)
            if kind == "int8" and name == "codes" and reference is not None:
                shared = reference.to_arrays()
                scale, offset = shared["scale"].astype(np.float64), shared["offset"].astype(np.float64)
                got_values, want_values = offset + scale * got_values, offset + scale * want_values
            got_rows.append(got_values)
            want_rows.append(want_values)
    agreement = same / total if total else 1.0
    active_agreement = active_same / active_total if active_total else 1.0
    cosine = _mean_row_cosine(got_rows, want_rows)
    if quantized:
        if active_total:
            bar = f"at least {QUANTIZED_MIN_AGREEMENT:.0%} of the active indices/bits identical"
            passed = active_agreement >= QUANTIZED_MIN_AGREEMENT
        else:
            bar = f"code cosine at least {QUANTIZED_MIN_COSINE}"
            passed = cosine >= QUANTIZED_MIN_COSINE
    else:
        bar = f"at least {MIN_AGREEMENT:.1%} of index/bit/code entries identical and values within {ATOL}"
        passed = agreement >= MIN_AGREEMENT and within
    return EncoderParity(rows, agreement, max_diff, total, floats, passed, active_agreement, active_total, cosine,
                         quantized, bar)


def _sparse_rows(indices: np.ndarray, values: np.ndarray | None, width: int) -> sp.csr_matrix:
    """(n, k) indices (and their values; ones without) as an (n, width) sparse matrix."""
    n, k = indices.shape
    data = np.ones(n * k) if values is None else values.astype(np.float64).ravel()
    return sp.csr_matrix((data, indices.ravel(), np.arange(0, n * k + 1, k)), shape=(n, width))


def _mean_row_cosine(got: list[Any], want: list[Any]) -> float:
    """Mean over rows of the cosine between the concatenated blocks of ``got`` and ``want`` (two all-zero
    rows count as identical)."""
    if not got:
        return 1.0
    got_matrix = sp.hstack([sp.csr_matrix(block) for block in got]).tocsr()
    want_matrix = sp.hstack([sp.csr_matrix(block) for block in want]).tocsr()
    dot = np.asarray(got_matrix.multiply(want_matrix).sum(axis=1)).ravel()
    norms = np.sqrt(np.asarray(got_matrix.multiply(got_matrix).sum(axis=1)).ravel()
                    * np.asarray(want_matrix.multiply(want_matrix).sum(axis=1)).ravel())
    cosine = np.where(norms > 0, dot / np.maximum(norms, np.finfo(np.float64).tiny),
                      (got_matrix != want_matrix).getnnz(axis=1) == 0)
    return float(cosine.mean()) if len(cosine) else 1.0


# -- building the graph ---------------------------------------------------------------------------


def _export_module(module: torch.nn.Module, args: tuple[torch.Tensor, ...], target: Path, inputs: list[str],
                   outputs: list[str], *, dynamic_sequence: bool) -> None:
    """``torch.onnx.export`` (dynamo) with a dynamic batch axis (and sequence axis) on every input."""
    axes = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC} if dynamic_sequence else {0: torch.export.Dim.DYNAMIC}
    with warnings.catch_warnings(), _quiet_loggers():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, args, dynamo=True, input_names=inputs, output_names=outputs,
            dynamic_shapes=tuple(axes for _ in args), verbose=False,
        )
    assert program is not None
    program.save(str(target))


def _compose(backbone: Any, head: Any, inputs: Sequence[str], outputs: Sequence[str], embedding: bool) -> Any:
    """One graph: backbone's embedding into the head's input; plain input and output names."""
    from onnx import compose

    head.ir_version = backbone.ir_version = max(head.ir_version, backbone.ir_version)
    _align_opsets(backbone, head)
    wanted = [f"head/{name}" for name in outputs] + (["backbone/__adaptemb_embedding__"] if embedding else [])
    merged = compose.merge_models(
        backbone, head, io_map=[("__adaptemb_embedding__", HEAD_INPUT)], prefix1="backbone/", prefix2="head/",
        outputs=wanted,
    )
    renames = {f"backbone/{name}": name for name in inputs}
    renames.update({f"head/{name}": name for name in outputs})
    renames["backbone/__adaptemb_embedding__"] = EMBEDDING_OUTPUT
    _rename_values(merged.graph, renames)
    order = [*outputs, *([EMBEDDING_OUTPUT] if embedding else [])]
    ordered = sorted(merged.graph.output, key=lambda value: order.index(value.name))
    copies = [type(value)() for value in ordered]
    for copy, value in zip(copies, ordered):
        copy.CopyFrom(value)
    del merged.graph.output[:]
    merged.graph.output.extend(copies)
    for value in merged.graph.input:
        _name_axes(value, ("batch", "sequence"))
    for value in merged.graph.output:
        _name_axes(value, ("batch",))
    return merged


def _align_opsets(*models: Any) -> None:
    """The same version of every opset domain in every model (the highest any of them imports)."""
    versions: dict[str, int] = {}
    for model in models:
        for entry in model.opset_import:
            versions[entry.domain] = max(versions.get(entry.domain, 0), entry.version)
    for model in models:
        del model.opset_import[:]
        for domain, version in versions.items():
            entry = model.opset_import.add()
            entry.domain, entry.version = domain, version


def _rename_values(graph: Any, renames: dict[str, str]) -> None:
    """Rename values wherever they occur (node inputs and outputs, subgraphs, graph inputs and outputs)."""
    for node in graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        node.output[:] = [renames.get(name, name) for name in node.output]
        for attribute in node.attribute:
            for sub in [attribute.g, *attribute.graphs]:
                if sub is not None:
                    _rename_values(sub, renames)
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = renames.get(value.name, value.name)


def _name_axes(value: Any, names: tuple[str, ...]) -> None:
    dims = value.type.tensor_type.shape.dim
    for dim, name in zip(dims, names):
        if not dim.HasField("dim_value"):
            dim.dim_param = name


def _save(model: Any, target: Path) -> None:
    import onnx

    onnx.save(model, str(target))


def _run(model_path: Path, feeds: dict[str, np.ndarray], names: Sequence[str], threads: int) -> dict[str, np.ndarray]:
    session = _session(model_path, threads)
    return dict(zip(names, session.run(list(names), feeds)))


def _session(model_path: Path, threads: int) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def _quantized(
    work: Path, inputs: Sequence[str], head_outputs: Sequence[str], embedding: bool, feeds: dict[str, np.ndarray],
    expected: dict[str, np.ndarray], output_names: Sequence[str], threads: int,
    pipeline: Callable[[], object], float_path: Path, codes: Codes, float_parity: EncoderParity,
) -> tuple[Any, QuantizationReport]:
    """The graph with its backbone dynamically quantised to int8, and what that changed on the sample
    (its parity held to the quantised bar).

    Weights are quantised per output channel: on MiniLM that kept a mean cosine of 0.992 to the float
    embedding (0.960 per tensor) at the same size and speed (``QUANTIZE_OPTIONS``)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_loggers():
        quantize_dynamic(str(work / "backbone.onnx"), str(work / "backbone.int8.onnx"),
                         weight_type=QuantType[QUANTIZE_OPTIONS["weight_type"]], per_channel=QUANTIZE_OPTIONS["per_channel"])
    model = _compose(onnx.load(str(work / "backbone.int8.onnx")), onnx.load(str(work / "head.onnx")),
                     inputs, head_outputs, embedding)
    quantized_path = work / "encoder.int8.onnx"
    _save(model, quantized_path)
    float_session, quantized_session = _session(float_path, threads), _session(quantized_path, threads)
    float_session.run(list(output_names), feeds)  # warm-up
    parity = compare_codes(dict(zip(output_names, quantized_session.run(list(output_names), feeds))), expected,
                           reference=codes, quantized=True)
    report = QuantizationReport(
        method="dynamic",
        options=dict(QUANTIZE_OPTIONS),
        float_bytes=float_path.stat().st_size,
        quantized_bytes=quantized_path.stat().st_size,
        float_seconds=_best_time(lambda: float_session.run(list(output_names), feeds)),
        quantized_seconds=_best_time(lambda: quantized_session.run(list(output_names), feeds)),
        torch_seconds=_best_time(pipeline),
        threads=threads,
        parity=parity,
        float_parity=float_parity,
    )
    return model, report


def _best_time(run: Callable[[], object]) -> float:
    """Best of ``_TIMING_ROUNDS`` runs (run once before: warm)."""
    best = float("inf")
    for _ in range(_TIMING_ROUNDS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


@contextmanager
def _quiet_loggers() -> Any:
    """Silence the INFO/WARNING chatter of the exporter and the quantiser (root logger included)."""
    loggers = [logging.getLogger(), logging.getLogger("torch.onnx"), logging.getLogger("onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


# -- models, inputs and metadata -----------------------------------------------------------------


def _methods_with_encoder() -> list[str]:
    """Registered methods that override ``Compressor.encoder`` (the default of ``exportable``)."""
    from adaptemb.registry import get_registry

    registry = get_registry()
    return sorted(name for name in registry.names() if registry.get(name).encoder is not Compressor.encoder)


def _as_compressor(compressor: Compressor | str | Path) -> Compressor:
    if isinstance(compressor, Compressor):
        return compressor
    if isinstance(compressor, (str, Path)):
        from adaptemb.api import load

        return load(compressor)
    raise TypeError(f"compressor must be a fitted Compressor or the path of a saved one; got {type(compressor).__name__}")


def _resolve_model(
    model: str | Path | TextEncoder | ImageEncoder | None, modality: Modality, *, weights: str | Path | None,
    image_size: int | None,
) -> tuple[TextEncoder | ImageEncoder, str]:
    if modality not in ("auto", "text", "image"):
        raise ValueError(f"modality must be 'auto', 'text' or 'image'; got {modality!r}")
    if isinstance(model, TextEncoder):
        return model, "text"
    if isinstance(model, ImageEncoder):
        return model, "image"
    if model is not None and not isinstance(model, (str, Path)):
        raise TypeError(
            f"model must be a model name or path, or an encoder from load_text_encoder / load_image_encoder; "
            f"got {type(model).__name__}"
        )
    kind = modality if modality != "auto" else _guess_modality(model)
    if kind == "image":
        if model is None:
            raise ValueError("an image export needs model= (efficientnet-lite0, timm:NAME, open_clip:NAME or a folder)")
        return load_image_encoder(str(model), weights=weights, image_size=image_size, device="cpu"), "image"
    if weights is not None or image_size is not None:
        raise ValueError("weights= and image_size= apply to image models only")
    location = None if model is None else Path(str(model)).expanduser()
    if location is not None and str(model) not in MINILM_NAMES and not location.exists() and (
        location.is_absolute() or str(model).startswith((".", "~")) or location.suffix
    ):
        raise ModelNotFoundError(f"model path {str(model)!r} does not exist; give a local model folder")
    return load_text_encoder(model, device="cpu"), "text"


def _guess_modality(model: str | Path | None) -> str:
    """``image`` for efficientnet-lite0, ``timm:``/``open_clip:`` names and timm folders, else ``text``."""
    if model is None:
        return "text"
    name = str(model)
    if name == EFFICIENTNET_LITE0 or name.startswith(("timm:", "open_clip:")):
        return "image"
    folder = Path(name).expanduser()
    if folder.is_dir() and not (folder / "modules.json").is_file() and (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text())
        except (OSError, ValueError):
            return "text"
        if isinstance(config, dict) and "architecture" in config and "model_type" not in config:
            return "image"  # timm's config.json names "architecture"; transformers' has "model_type"
    return "text"


@contextmanager
def _on_cpu(encoder: TextEncoder | ImageEncoder) -> Any:
    """Run the export on the CPU; a loaded encoder goes back to its device afterwards."""
    module = encoder.model if isinstance(encoder, TextEncoder) else encoder.module
    device = encoder.device
    module.to("cpu")
    encoder.device = torch.device("cpu")
    try:
        yield
    finally:
        module.to(device)
        encoder.device = device


def _sample(sample: Sequence[str] | np.ndarray | None, text: bool) -> Any:
    if text:
        texts = list(SAMPLE_TEXTS) if sample is None else sample
        if isinstance(texts, (str, np.ndarray)) or not all(isinstance(t, str) for t in texts) or not len(texts):
            raise TypeError("a text model's sample must be a non-empty list of strings")
        return list(texts)
    if sample is None:
        return _default_images()
    images = np.asarray(sample)
    if images.ndim not in (3, 4) or not len(images):
        raise ValueError(f"an image sample must be (n, H, W), (n, H, W, C) or (n, C, H, W); got {images.shape}")
    return images


def _default_images() -> np.ndarray:
    """Fashion-MNIST test images when the dataset package is installed, else seeded random RGB pixels."""
    from adaptemb.datasets.fashion_mnist import FASHION_MNIST_DIR, read_idx

    source = FASHION_MNIST_DIR / "t10k-images-idx3-ubyte.gz"
    if source.is_file():
        return read_idx(source)[:_SAMPLE_IMAGES]
    return np.random.default_rng(0).integers(0, 256, size=(_SAMPLE_IMAGES, 32, 32, 3), dtype=np.uint8)


def _hf_tokenizer(encoder: TextEncoder) -> Any:
    return encoder.tokenizer if encoder.tokenizer is not None else encoder.model.tokenizer


def _max_length(encoder: TextEncoder) -> int | None:
    if encoder.tokenizer is None:
        length = getattr(encoder.model, "max_seq_length", None)
    else:
        length = getattr(encoder.tokenizer, "model_max_length", None)
    return int(length) if length is not None and length < 1_000_000 else None


def _serving_tokenizer(encoder: TextEncoder) -> Any:
    """The model's fast tokenizer with its truncation and padding (to the longest in a batch) switched on."""
    if importlib.util.find_spec("tokenizers") is None:
        raise ModuleNotFoundError("text export needs the tokenizers package: pip install 'adaptemb[text]'")
    from tokenizers import Tokenizer

    hf = _hf_tokenizer(encoder)
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise UnsupportedExportError(
            f"{encoder.name} has a slow (Python) tokenizer; export needs a fast tokenizer saved as tokenizer.json"
        )
    tokenizer = Tokenizer.from_str(backend.to_str())
    length = _max_length(encoder)
    if length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=length)
    pad_id = hf.pad_token_id if hf.pad_token_id is not None else 0
    tokenizer.enable_padding(
        direction=getattr(hf, "padding_side", "right"), pad_id=pad_id, pad_token=hf.pad_token or "[PAD]"
    )
    return tokenizer


def _tokenize(tokenizer: Any, texts: list[str]) -> dict[str, np.ndarray]:
    batch = tokenizer.encode_batch(texts)
    return {
        "input_ids": np.array([item.ids for item in batch], dtype=np.int64),
        "attention_mask": np.array([item.attention_mask for item in batch], dtype=np.int64),
    }


def _write_tokenizer(encoder: TextEncoder, tokenizer: Any, folder: Path) -> tuple[Path, ...]:
    """The model's tokenizer files into ``folder``; ``tokenizer.json`` truncates and pads as the export expects."""
    hf = _hf_tokenizer(encoder)
    with tempfile.TemporaryDirectory(prefix=".adaptemb-tokenizer-", dir=folder) as tmp:
        written = [Path(name).name for name in hf.save_pretrained(tmp)]
        tokenizer.save(str(Path(tmp) / "tokenizer.json"))
        names = sorted({*written, "tokenizer.json"})
        for name in names:
            source = Path(tmp) / name
            if source.is_file():
                data = source.read_bytes()
                atomic_write(folder / name, lambda dest, data=data: dest.write_bytes(data))
    return tuple(folder / name for name in names if (folder / name).is_file())


def _value_types(values: Any) -> dict[str, str]:
    import onnx

    described = {}
    for value in values:
        tensor = value.type.tensor_type
        dims = [d.dim_param or str(d.dim_value) for d in tensor.shape.dim]
        described[value.name] = f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name} ({', '.join(dims)})"
    return described


def _thresholds(quantized: bool) -> dict[str, float]:
    if quantized:
        return {"min_active_agreement": QUANTIZED_MIN_AGREEMENT, "min_cosine": QUANTIZED_MIN_COSINE}
    return {"min_agreement": MIN_AGREEMENT, "atol": ATOL}


def _metadata(
    encoder: TextEncoder | ImageEncoder, modality: str, compressor: Compressor, budget: int, codes: Codes,
    model: Any, parity: EncoderParity, report: QuantizationReport | None, tokenizer: Any,
) -> dict[str, str]:
    if isinstance(encoder, TextEncoder):
        padding = tokenizer.padding or {}
        preprocessing: dict[str, Any] = {
            "tokenizer": "tokenizer.json (beside this file; tokenizers.Tokenizer.from_file)",
            "max_length": _max_length(encoder),
            "truncation": "longest_first" if _max_length(encoder) else None,
            "padding": f"{padding.get('direction', 'right')}, to the longest text of the batch, id {padding.get('pad_id', 0)}",
            "inputs": "input_ids and attention_mask from the tokenizer, int64 (batch, sequence)",
        }
    else:
        preprocessing = {
            "layout": "pixel_values float32 (batch, 3, size, size), channels RGB",
            "size": encoder.image_size,
            "steps": [
                "uint8 values / 255 (float images are taken as already in [0, 1])",
                "grey (n, H, W) repeated to 3 channels; (n, H, W, C) moved to (n, C, H, W); extra channels dropped",
                (f"resize to {encoder.image_size}x{encoder.image_size}: bilinear, antialias, align_corners=False "
                 "(torch.nn.functional.interpolate)"),
                "subtract mean, divide by std, per channel",
            ],
            "mean": list(encoder.mean),
            "std": list(encoder.std),
            "python": "adaptemb.load_image_encoder(...).preprocess(images)",
        }
    return {
        "adaptemb.format": ENCODER_FORMAT,
        "adaptemb.format_version": ENCODER_FORMAT_VERSION,
        "adaptemb.version": __version__,
        "method": compressor.name,
        "config": compressor.config.model_dump_json(),
        "k": str(budget),
        "code_kind": codes.kind,
        "code_dim": str(codes.dim),
        "embedding_dim": str(compressor.dim),
        "modality": modality,
        "backbone": encoder.name,
        "pooling": "the backbone's pooled output, L2-normalised (what encode(normalize=True) returns)",
        "inputs": json.dumps(_value_types(model.graph.input)),
        "outputs": json.dumps(_value_types(model.graph.output)),
        "preprocessing": json.dumps(preprocessing),
        "parity": json.dumps({**asdict(parity), **_thresholds(parity.quantized)}),
        "quantization": json.dumps(report.as_dict() if report is not None else None),
    }
