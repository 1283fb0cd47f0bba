"""Composed codes: a projection, an optional orthogonal rotation, then a quantiser, as one method ``"a+b"``.

The registry resolves ``"svd+rabitq"`` to ``composed_class(SVDCompressor, RaBitQCompressor)`` for any method
declaring ``role = "projection"`` followed by any declaring ``role = "quantizer"``: ``adaptemb.compose.plugin``, a
built-in plugin, adds that factory to the registry. See ``adaptemb.compose.compressor`` for what the composition does and ``adaptemb.compose.config`` for
its configuration.
"""

from __future__ import annotations

from adaptemb.compose.choice import default_byte_ladder
from adaptemb.compose.compressor import ComposedCompressor, composed_class
from adaptemb.compose.config import ComposedConfig
from adaptemb.compose.levels import SignMagnitude, fit_levels
from adaptemb.compose.planes import SignAdditiveMagnitude, fit_planes
from adaptemb.compose.rotation import (
    DenseRotation,
    HadamardRotation,
    Rotation,
    fit_rotation,
    hadamard_rotation,
    itq_rotation,
    random_rotation,
)

__all__ = [
    "ComposedCompressor",
    "ComposedConfig",
    "DenseRotation",
    "HadamardRotation",
    "Rotation",
    "SignAdditiveMagnitude",
    "SignMagnitude",
    "composed_class",
    "default_byte_ladder",
    "fit_levels",
    "fit_planes",
    "fit_rotation",
    "hadamard_rotation",
    "itq_rotation",
    "random_rotation",
]

