"""Device choice, in one place for training, encoding, indexes and the bench."""

from __future__ import annotations

from typing import Literal, get_args

import torch

Device = Literal["auto", "cpu", "cuda"]
"""Where to fit, encode and search: auto (CUDA when torch sees a GPU), cpu or cuda."""
DEVICE_CHOICES: tuple[str, ...] = get_args(Device)


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` (or ``None``) → CUDA when torch sees a GPU, else CPU.

    ``"cpu"``, ``"cuda"`` and ``"cuda:N"`` are taken as given; asking for CUDA on a machine without
    it, or for any other device, is a ``ValueError`` that says what is valid.
    """
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = str(device)
    if name not in DEVICE_CHOICES and not name.startswith("cuda:"):
        raise ValueError(f"unknown device {name!r}; use one of {', '.join(DEVICE_CHOICES)} (or cuda:N)")
    resolved = torch.device(name)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for, but torch sees no CUDA GPU; use 'cpu' or 'auto'")
    return resolved
