"""Backbones for export: which model (text or image), its torch module as a graph, its inputs and tokenizer.

``resolve_model`` loads a text or image encoder of :mod:`adaptemb.encoders` (guessing the modality from the
name or folder); ``BackboneGraph.of`` wraps it as the module to export (token ids and mask, or normalised
pixels, in; the L2-normalised embedding ``encode`` returns, out) with the sample inputs to check it on. Text
exports write the model's fast tokenizer (``tokenizer.json``, truncation and padding on) beside the graph.
"""

from __future__ import annotations

import importlib.util
import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from adaptemb.encoders import (
    ImageEncoder,
    ModelNotFoundError,
    TextEncoder,
    load_image_encoder,
    load_text_encoder,
)
from adaptemb.encoders.image import EFFICIENTNET_LITE0
from adaptemb.encoders.text import MINILM_NAMES
from adaptemb.errors import UnsupportedExportError
from adaptemb.onnx.samples import TRACE_TEXTS
from adaptemb.serialization import atomic_write

Modality = Literal["auto", "text", "image"]
TEXT_INPUTS = ("input_ids", "attention_mask")
IMAGE_INPUTS = ("pixel_values",)


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
class BackboneGraph:
    """A backbone ready to export: its module, input names and axes, what to trace it on, and the sample as
    the graph's inputs (``feeds``); text backbones carry the serving tokenizer."""

    module: torch.nn.Module
    inputs: tuple[str, ...]
    axes: tuple[str, ...]
    trace: tuple[torch.Tensor, ...]
    feeds: dict[str, np.ndarray]
    tokenizer: Any = None

    @classmethod
    def of(cls, encoder: TextEncoder | ImageEncoder, items: Any) -> BackboneGraph:
        """``encoder`` wrapped for export, with ``items`` (texts or images) as its inputs."""
        if isinstance(encoder, TextEncoder):
            tokenizer = serving_tokenizer(encoder)
            trace = tuple(torch.from_numpy(a) for a in tokenize(tokenizer, list(TRACE_TEXTS)).values())
            return cls(TextBackbone(encoder), TEXT_INPUTS, ("batch", "sequence"), trace,
                       tokenize(tokenizer, list(items)), tokenizer)
        with torch.no_grad():
            pixels = encoder.preprocess(torch.from_numpy(np.asarray(items))).cpu()
        trace = (pixels[:2].clone() if len(pixels) > 1 else pixels.repeat(2, 1, 1, 1),)  # batch 1 would be static
        return cls(ImageBackbone(encoder), IMAGE_INPUTS, ("batch",), trace, {"pixel_values": pixels.numpy()})


# -- which model ----------------------------------------------------------------------------------


def resolve_model(
    model: str | Path | TextEncoder | ImageEncoder | None, modality: Modality, *, weights: str | Path | None,
    image_size: int | None,
) -> tuple[TextEncoder | ImageEncoder, str]:
    """The encoder ``model`` names (loaded on the CPU) and its modality, ``"text"`` or ``"image"``."""
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
    kind = modality if modality != "auto" else guess_modality(model)
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


def guess_modality(model: str | Path | None) -> str:
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
def on_cpu(encoder: TextEncoder | ImageEncoder) -> Iterator[None]:
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


def preprocessing(encoder: TextEncoder | ImageEncoder, tokenizer: Any) -> dict[str, Any]:
    """How a service prepares the graph's inputs, for the file's metadata."""
    if isinstance(encoder, TextEncoder):
        padding = tokenizer.padding or {}
        return {
            "tokenizer": "tokenizer.json (beside this file; tokenizers.Tokenizer.from_file)",
            "max_length": max_length(encoder),
            "truncation": "longest_first" if max_length(encoder) else None,
            "padding": f"{padding.get('direction', 'right')}, to the longest text of the batch, id {padding.get('pad_id', 0)}",
            "inputs": "input_ids and attention_mask from the tokenizer, int64 (batch, sequence)",
        }
    return {
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


# -- the tokenizer --------------------------------------------------------------------------------


def _hf_tokenizer(encoder: TextEncoder) -> Any:
    return encoder.tokenizer if encoder.tokenizer is not None else encoder.model.tokenizer


def max_length(encoder: TextEncoder) -> int | None:
    """The model's maximum sequence length (None: no limit the tokenizer knows of)."""
    if encoder.tokenizer is None:
        length = getattr(encoder.model, "max_seq_length", None)
    else:
        length = getattr(encoder.tokenizer, "model_max_length", None)
    return int(length) if length is not None and length < 1_000_000 else None


def serving_tokenizer(encoder: TextEncoder) -> Any:
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
    length = max_length(encoder)
    if length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=length)
    pad_id = hf.pad_token_id if hf.pad_token_id is not None else 0
    tokenizer.enable_padding(
        direction=getattr(hf, "padding_side", "right"), pad_id=pad_id, pad_token=hf.pad_token or "[PAD]"
    )
    return tokenizer


def tokenize(tokenizer: Any, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64, (batch, sequence)) of ``texts``."""
    batch = tokenizer.encode_batch(list(texts))
    return {
        "input_ids": np.array([item.ids for item in batch], dtype=np.int64),
        "attention_mask": np.array([item.attention_mask for item in batch], dtype=np.int64),
    }


def write_tokenizer(encoder: TextEncoder, tokenizer: Any, folder: Path) -> tuple[Path, ...]:
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
