"""What the methods without a budget share (``int8``, ``binary``): every dimension is kept, so there is one code
size, and their codes decode to their own dense form."""

from __future__ import annotations

from typing import ClassVar

import torch

from adaptemb import Budgets, Codes


class Unbudgeted:
    """Mixin, listed before ``Compressor``: the budgets of a method that always keeps all ``dim`` dims, and decoding
    as ``codes.to_dense()`` (``BinaryCodes``: ±1, ``QuantizedCodes``: ``offset + scale · code``), so it ``decodes``."""

    dim: int | None
    decodes: ClassVar[bool] = True

    def _budgets(self) -> Budgets:
        assert self.dim is not None
        return Budgets.unbudgeted(self.dim)

    def _decode(self, codes: Codes) -> torch.Tensor:
        return torch.from_numpy(codes.to_dense())
