"""``csr``: Contrastive Sparse Representation, a TopK sparse autoencoder whose codes serve any k.

The plugin (entry point ``adaptemb_plugins.csr``) is this package; its parts:

* ``compressor``: ``CSRCompressor`` (fit orchestration, ``encode`` at any k or byte budget, asymmetric scoring,
  the ONNX heads) and the ``register_compressors`` hook;
* ``config``: ``CSRConfig``, the settings, and what training derives from them (loss settings, k annealing);
* ``model``: ``CSRModel``, the torch module ``encode`` needs and the only part a saved compressor rebuilds;
* ``objective``: ``CSRObjective``, the training loss, dead-latent counters and decoder constraint (fit only);
* ``supervision``: the fine-tune on ``pairs`` / ``labels`` after the unsupervised fit;
* ``heads``: the models fine-tuned for the small k of byte budgets (``byte_budgets``);
* ``values``: how code values are stored (per-feature codebooks) and which (k, value bits) fills a byte budget.

See ``docs/methods/csr.md``.
"""

from adaptemb_plugins.csr.compressor import CSRCompressor, register_compressors
from adaptemb_plugins.csr.config import CSRConfig

__all__ = ["CSRCompressor", "CSRConfig", "register_compressors"]
