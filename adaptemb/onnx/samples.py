"""The inputs an exported encoder is checked on: built-in texts and images, or the caller's own.

``SAMPLE_TEXTS`` covers short and long texts, punctuation, accents, emoji, an empty text and one longer than
any model's maximum length. ``sample_images()`` are the first 16 test images of Fashion-MNIST, shipped with
the package (``sample_images.npz``; Fashion-MNIST: Copyright 2017 Zalando SE, MIT licence,
https://github.com/zalandoresearch/fashion-mnist), so a check needs no dataset installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
TRACE_TEXTS = ("an example sentence", "another, slightly longer example sentence to trace with")
"""What a text backbone is traced on (two texts of different lengths: batch and sequence stay dynamic)."""
SAMPLE_IMAGES_FILE = Path(__file__).with_name("sample_images.npz")


def sample_images() -> np.ndarray:
    """The default image sample: 16 Fashion-MNIST test images, (16, 28, 28) uint8 grey."""
    with np.load(SAMPLE_IMAGES_FILE, allow_pickle=False) as archive:
        return archive["images"]


def parity_sample(sample: Sequence[str] | np.ndarray | None, text: bool) -> Any:
    """The inputs to check on: ``sample`` checked for the modality, or the built-in texts / images."""
    if text:
        texts = list(SAMPLE_TEXTS) if sample is None else sample
        if isinstance(texts, (str, np.ndarray)) or not all(isinstance(t, str) for t in texts) or not len(texts):
            raise TypeError("a text model's sample must be a non-empty list of strings")
        return list(texts)
    if sample is None:
        return sample_images()
    images = np.asarray(sample)
    if images.ndim not in (3, 4) or not len(images):
        raise ValueError(f"an image sample must be (n, H, W), (n, H, W, C) or (n, C, H, W); got {images.shape}")
    return images
