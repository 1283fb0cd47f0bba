"""``bsa``: Binary Sparsity Alignment, binary sparse codes from a sigmoid autoencoder.

The plugin (entry point ``adaptemb_plugins.bsa``) is this package; its parts:

* ``compressor``: ``BSACompressor`` and ``BSAConfig`` (fit, the natural and fixed-k encodes, scoring), the
  training objective (``BSAObjective``, ``LossWeights``) and the ``register_compressors`` hook;
* ``model``: ``BSAModel``, the torch module ``encode`` needs (sigmoid encoder, linear decoder), and the
  fixed-k encoder ONNX exports.

See ``docs/methods/bsa.md``.
"""

from adaptemb_plugins.bsa.compressor import BSACompressor, BSAConfig, register_compressors

__all__ = ["BSACompressor", "BSAConfig", "register_compressors"]
