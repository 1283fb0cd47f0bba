"""Composed codes: a projection, an optional orthogonal rotation, then a quantiser, as one method ``"a+b"``.

The registry resolves ``"svd+rabitq"`` to ``composed_class(SVDCompressor, RaBitQCompressor)`` for any method
declaring ``role = "projection"`` followed by any declaring ``role = "quantizer"`` (``set_composer``, installed on
import). See ``adaptemb.compose.compressor`` for what the composition does and ``adaptemb.compose.config`` for
its configuration.
"""

from __future__ import annotations

import functools

from adaptemb.compose.compressor import ComposedCompressor, default_byte_ladder
from adaptemb.compose.config import ComposedConfig, composed_config
from adaptemb.compose.rotation import Rotation, fit_rotation, itq_rotation, random_rotation
from adaptemb.registry import COMPOSE_SEPARATOR, set_composer

__all__ = [
    "ComposedCompressor",
    "ComposedConfig",
    "Rotation",
    "composed_class",
    "default_byte_ladder",
    "fit_rotation",
    "itq_rotation",
    "random_rotation",
]


@functools.cache
def composed_class(projection: type, quantizer: type) -> type[ComposedCompressor]:
    """The method class of ``projection`` followed by ``quantizer`` (one class per pair, so configs compare equal)."""
    name = f"{projection.name}{COMPOSE_SEPARATOR}{quantizer.name}"
    title = "".join(part.capitalize() for part in name.split(COMPOSE_SEPARATOR))
    attributes = {
        "__doc__": f"Composed code: the {projection.name} projection, an optional rotation, then {quantizer.name} codes.",
        "__module__": __name__,
        "name": name,
        "Projection": projection,
        "Quantizer": quantizer,
        "Config": composed_config(name, projection.Config, quantizer.Config),
        "fit_inputs": projection.fit_inputs | quantizer.fit_inputs,
        # the contract fits every composition through a stored rotation (tests/test_contract.py also runs one without)
        "test_params": {"projection": dict(projection.test_params), "quantizer": dict(quantizer.test_params),
                        "rotation": "random"},
    }
    return type(f"{title}Compressor", (ComposedCompressor,), attributes)


set_composer(composed_class)
