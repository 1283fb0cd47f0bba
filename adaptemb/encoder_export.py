"""One ONNX graph from what a service holds (token ids or image pixels) to the compressed code.

``export_encoder`` composes a backbone (the text or image encoders of :mod:`adaptemb.encoders`) with a
fitted compressor's head (``Compressor.encoder(k)``, the module ``Compressor.export_onnx`` exports alone)
into one graph:

* text: ``input_ids`` and ``attention_mask`` (int64, (batch, sequence)) from the tokenizer saved beside
  the ``.onnx`` file (``tokenizer.json``, with the model's truncation and padding switched on);
* images: ``pixel_values`` (float32, (batch, 3, size, size)), the preprocessing of
  ``ImageEncoder.preprocess`` (recorded in the file's metadata);

through the backbone's pooled, L2-normalised embedding and the head, to the code in its storage form
(which each code kind declares: ``Codes.onnx_outputs``). Batch and sequence axes are dynamic.

The backbone and the head are exported separately and joined (``adaptemb.onnx.compose``), so
``quantize="dynamic"`` can quantise the backbone alone (``adaptemb.onnx.quantize``) while the head stays
exact. Before anything is written the float graph runs under onnxruntime on sample inputs and must reproduce
the torch pipeline (``compressor.encode`` of the encoder's embeddings) at the float bar of
``adaptemb.onnx.parity``. A quantised graph is measured in its turn and held to the quantised bar, written
either way, and reported as failed when it misses that bar. The numbers go into the file's metadata.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from adaptemb._version import __version__
from adaptemb.api import load
from adaptemb.codes import Codes
from adaptemb.encoders import ImageEncoder, TextEncoder
from adaptemb.errors import UnsupportedExportError
from adaptemb.method import Compressor
from adaptemb.onnx import compose as graphs
from adaptemb.onnx import parity as bars
from adaptemb.onnx.backbones import (
    BackboneGraph,
    Modality,
    on_cpu,
    preprocessing,
    resolve_model,
    write_tokenizer,
)
from adaptemb.onnx.parity import EncoderParity, ParityCheck
from adaptemb.onnx.quantize import QuantizationReport, measure, quantize_backbone
from adaptemb.onnx.samples import parity_sample
from adaptemb.onnx.sessions import require_onnx
from adaptemb.onnx.storage import StorageHead, storage_arrays
from adaptemb.registry import get_registry
from adaptemb.serialization import atomic_write, is_a_directory
from adaptemb.threads import compute_threads

ENCODER_FORMAT = "adaptemb.encoder"
ENCODER_FORMAT_VERSION = "1"
_HEAD_TRACE_ROWS = 8


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
    them) is what parity is checked on (default: ``SAMPLE_TEXTS`` / 16 Fashion-MNIST test images shipped
    with adaptemb). ``quantize="dynamic"`` writes the graph with its backbone quantised to int8 and measures
    what that changed. ``include_embedding`` adds the float embedding as an output ``embedding`` (for
    asymmetric scoring or rescoring). Text exports also write the tokenizer (``tokenizer.json`` and its
    companions) into the folder of ``path``; missing folders are created.
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
    fitted = _as_compressor(compressor)
    budget = fitted.budgets().resolve(k, fitted.name)  # NotFittedError before any model loads
    if not fitted.exportable:
        raise UnsupportedExportError(
            f"{fitted.export_refusal()}; methods with an encoder: {', '.join(_exportable_methods()) or 'none'}"
        )
    encoder, kind = resolve_model(model, modality, weights=weights, image_size=image_size)
    with on_cpu(encoder), compute_threads() as threads:
        job = _Job(encoder, kind, fitted, budget, parity_sample(sample, kind == "text"), threads)
        return job.run(target, quantize, include_embedding)


class _Job:
    """One export: the backbone, the compressor's head, the sample and what the torch pipeline gave for it."""

    def __init__(self, encoder: TextEncoder | ImageEncoder, modality: str, compressor: Any, budget: int,
                 items: Any, threads: int) -> None:
        self.encoder, self.modality, self.compressor, self.budget = encoder, modality, compressor, budget
        self.items, self.threads = items, threads
        self.backbone = BackboneGraph.of(encoder, items)
        self.embeddings, self.codes = self.pipeline()
        self.head = StorageHead(compressor.encoder(budget), self.codes.kind, self.codes.dim).eval()
        expected = storage_arrays(self.codes, self.head.head.output_names)
        self.check = ParityCheck(self.backbone.feeds, expected, self.codes, threads)

    def pipeline(self) -> tuple[np.ndarray, Codes]:
        """The torch pipeline on the sample: the encoder's embeddings, then ``compressor.encode``."""
        embedded = self.encoder.encode(self.items, progress=False)
        if embedded.shape[1] != self.compressor.dim:
            raise ValueError(
                f"{self.encoder.name} gives {embedded.shape[1]}-d embeddings, but the {self.compressor.name} "
                f"compressor was fitted on d={self.compressor.dim}; fit it on this model's embeddings"
            )
        return embedded, self.compressor.encode(embedded, k=self.budget)

    def run(self, target: Path, quantize: str | None, include_embedding: bool) -> EncoderExport:
        output_names = (*self.head.output_names, *((graphs.EMBEDDING_OUTPUT,) if include_embedding else ()))
        with tempfile.TemporaryDirectory(prefix="adaptemb-export-") as tmp:
            work = Path(tmp)
            self._export_parts(work)
            model = self._compose(work / "backbone.onnx", work, include_embedding)
            float_path = work / "encoder.onnx"
            graphs.save_model(model, float_path)
            parity = self.check.require(float_path, "the exported ONNX encoder does not reproduce the torch pipeline")
            report, float_parity = None, None
            if quantize == "dynamic":
                quantize_backbone(work / "backbone.onnx", work / "backbone.int8.onnx")
                model = self._compose(work / "backbone.int8.onnx", work, include_embedding)
                graphs.save_model(model, work / "encoder.int8.onnx")
                report = measure(float_path, work / "encoder.int8.onnx", self.check, output_names, self.pipeline,
                                 parity)
                parity, float_parity = report.parity, parity  # the result describes the graph written
            metadata = self._describe(model, output_names, parity, report)
            atomic_write(target, lambda tmp_path: graphs.save_model(model, tmp_path))
        text = isinstance(self.encoder, TextEncoder)
        tokenizer_files = write_tokenizer(self.encoder, self.backbone.tokenizer, target.parent) if text else ()
        return EncoderExport(
            path=target, method=self.compressor.name, k=self.budget, modality=self.modality,
            backbone=self.encoder.name, inputs=json.loads(metadata["inputs"]), outputs=json.loads(metadata["outputs"]),
            parity=parity, size_bytes=target.stat().st_size, tokenizer_files=tokenizer_files, quantization=report,
            metadata=metadata, float_parity=float_parity,
        )

    def _export_parts(self, work: Path) -> None:
        """The backbone and the head as separate graphs, ``backbone.onnx`` and ``head.onnx`` in ``work``."""
        backbone = self.backbone
        graphs.export_module(backbone.module.eval(), backbone.trace, work / "backbone.onnx", backbone.inputs,
                             [graphs.LINK], axes=backbone.axes)
        head_rows = torch.from_numpy(self.embeddings[:_HEAD_TRACE_ROWS].copy())
        if len(head_rows) < 2:
            head_rows = head_rows.repeat(2, 1)
        graphs.export_module(self.head, (head_rows,), work / "head.onnx", [graphs.HEAD_INPUT],
                             list(self.head.output_names))

    def _compose(self, backbone: Path, work: Path, include_embedding: bool) -> Any:
        return graphs.compose(graphs.load_model(backbone), graphs.load_model(work / "head.onnx"),
                              self.backbone.inputs, self.head.output_names, include_embedding)

    def _describe(self, model: Any, output_names: Sequence[str], parity: EncoderParity,
                  report: QuantizationReport | None) -> dict[str, str]:
        """Write the metadata, producer and doc string into ``model``; the metadata."""
        metadata = self._metadata(model, parity, report)
        for key, value in metadata.items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        model.producer_name, model.producer_version = "adaptemb", __version__
        model.doc_string = (
            f"adaptemb encoder: {self.encoder.name} ({self.modality}) + {self.compressor.name} at k={self.budget}; "
            f"inputs {', '.join(self.backbone.inputs)}; outputs {', '.join(output_names)}"
        )
        return metadata

    def _metadata(self, model: Any, parity: EncoderParity, report: QuantizationReport | None) -> dict[str, str]:
        compressor = self.compressor
        return {
            "adaptemb.format": ENCODER_FORMAT,
            "adaptemb.format_version": ENCODER_FORMAT_VERSION,
            "adaptemb.version": __version__,
            "method": compressor.name,
            "config": compressor.config.model_dump_json(),
            "k": str(self.budget),
            "code_kind": self.codes.kind,
            "code_dim": str(self.codes.dim),
            "embedding_dim": str(compressor.dim),
            "modality": self.modality,
            "backbone": self.encoder.name,
            "pooling": "the backbone's pooled output, L2-normalised (what encode(normalize=True) returns)",
            "inputs": json.dumps(graphs.value_types(model.graph.input)),
            "outputs": json.dumps(graphs.value_types(model.graph.output)),
            "preprocessing": json.dumps(preprocessing(self.encoder, self.backbone.tokenizer)),
            "parity": json.dumps({**asdict(parity), **_thresholds(parity.quantized)}),
            "quantization": json.dumps(report.as_dict() if report is not None else None),
        }


def _thresholds(quantized: bool) -> dict[str, float]:
    if quantized:
        return {"min_active_agreement": bars.QUANTIZED_MIN_AGREEMENT, "min_cosine": bars.QUANTIZED_MIN_COSINE}
    return {"min_agreement": bars.MIN_AGREEMENT, "atol": bars.ATOL}


def _exportable_methods() -> list[str]:
    """Registered methods that declare ``exportable`` (a property counts: some of their configurations export)."""
    registry = get_registry()
    return sorted(name for name in registry.names() if getattr(registry.get(name), "exportable", False) is not False)


def _as_compressor(compressor: Compressor | str | Path) -> Any:
    if isinstance(compressor, Compressor):
        return compressor
    if isinstance(compressor, (str, Path)):
        return load(compressor)
    raise TypeError(f"compressor must be a fitted Compressor or the path of a saved one; got {type(compressor).__name__}")
