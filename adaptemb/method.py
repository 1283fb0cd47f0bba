"""``Compressor``, the class every method subclasses (``adaptemb.Compressor``): the core contract composed with
what a fitted compressor does with its codes and its state.

* ``CompressorCore`` (``adaptemb.compressor``): config, declared capabilities, ``fit``, ``encode`` /
  ``encode_queries``, ``decode``, ``score``, budgets, state tensors, and the hooks a method implements;
* ``Indexing`` (``adaptemb.indexing``): ``index``, ``search``, ``index_options``, ``query_budget``;
* ``OnnxExport`` (``adaptemb.onnx.head``): ``exportable``, ``encoder``, ``encoder_arrays``, ``export_onnx``;
* ``Persistence`` (``adaptemb.serialization``): ``save``, ``load``, ``from_saved``, ``file_metadata``.

The core imports none of them; this module, above them all, is the one place they meet.
"""

from __future__ import annotations

from adaptemb.compressor import CompressorCore
from adaptemb.indexing import Indexing
from adaptemb.onnx.head import OnnxExport
from adaptemb.serialization import Persistence


class Compressor(Persistence, OnnxExport, Indexing, CompressorCore):
    """Fit on frozen embeddings once, then encode at any supported budget ``k``; index, save and export.

    A method subclasses this class (``from adaptemb import Compressor``): it sets ``name``, ``Config`` and
    ``budget_help``, declares its capabilities and implements the hooks ``CompressorCore`` lists.
    """
