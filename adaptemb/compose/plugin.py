"""Compositions as a plugin: the registry resolves ``"projection+quantizer"`` through the factory added here.

The plugin manager registers this module first, with the core's other plugins (``BUILTIN_PLUGINS``), through
the door every method takes; nothing imports it, so no import order decides whether ``"svd+binary"`` exists.
"""

from __future__ import annotations

from adaptemb.compose.compressor import composed_class
from adaptemb.registry import CompressorRegistry, hookimpl


@hookimpl
def register_compressors(registry: CompressorRegistry) -> None:
    """Add the composer: any method declaring ``role = "projection"`` followed by any declaring
    ``role = "quantizer"`` names a composed method, ``composed_class(projection, quantizer)``."""
    registry.add_composer(composed_class)
