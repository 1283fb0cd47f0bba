"""``cllr``: Contrastive Learning with Low-dimensional Reconstruction, a learned low-rank / sparse projection.

The plugin (entry point ``adaptemb_plugins.cllr``) is this package; its parts:

* ``compressor``: ``CLLRCompressor`` and ``CLLRConfig`` (fit orchestration, encode, stored values) and the
  ``register_compressors`` hook;
* ``model``: the objective and its proximal optimisation (what the fit minimises);
* ``nesting``: the prefix-nesting stage that trains short prefixes to stand alone.

Stored values (dense float or int8) come from ``adaptemb_plugins.value_storage``. See ``docs/methods/cllr.md``.
"""

from adaptemb_plugins.cllr.compressor import CLLRCompressor, CLLRConfig, register_compressors

__all__ = ["CLLRCompressor", "CLLRConfig", "register_compressors"]
