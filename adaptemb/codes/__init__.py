"""Code types: what a compressor emits, one module per kind. Each knows its exact storage and how to score
against its own kind; ``base`` holds the ``Codes`` contract every kind implements.

Storage accounting is exact and split in two:

* ``row_nbytes``: bytes that grow with the number of vectors (the per-row payload);
* ``shared_nbytes``: bytes stored once for all rows (for example int8 scales).

``nbytes`` is their sum and equals the bytes of the arrays ``to_arrays()`` returns, which is what
``adaptemb.save_codes`` writes. ``bytes_per_vector`` is ``row_nbytes / len(codes)``.

Each kind owns its other forms too, so that nothing outside the kinds (and their index backends) asks which kind
it holds: ONNX outputs (``onnx_outputs`` / ``onnx_graph`` / ``onnx_arrays`` / ``onnx_values``), the parity check's
view of them (``parity_arrays`` / ``parity_set_bits`` / ``parity_vectors``), the columns of a streamed shard
(``row_columns`` / ``from_row_columns``), and the rows and queries of a vector database (``vector_form`` /
``vector_rows`` / ``compact_vector_rows`` / ``vector_quantization`` / ``sign_bits`` / ``store_query``). Scoring goes
a block of documents at a time through ``blockwise_scores``.
"""

from adaptemb.codes.base import (
    SCORE_BLOCK_ROWS,
    Codes,
    RowColumn,
    blockwise_scores,
    decoded_inner_products,
    index_dtype,
)
from adaptemb.codes.binary import BinaryCodes, pack_signs, unpack_signs
from adaptemb.codes.binary_sparse import BinarySparseCodes
from adaptemb.codes.dense import DenseCodes
from adaptemb.codes.packed_sparse import PackedSparseCodes
from adaptemb.codes.projected import ProjectedQueries
from adaptemb.codes.quantized import QuantizedCodes
from adaptemb.codes.sparse import SparseCodes

__all__ = [
    "SCORE_BLOCK_ROWS",
    "BinaryCodes",
    "BinarySparseCodes",
    "Codes",
    "DenseCodes",
    "PackedSparseCodes",
    "ProjectedQueries",
    "QuantizedCodes",
    "RowColumn",
    "SparseCodes",
    "blockwise_scores",
    "decoded_inner_products",
    "index_dtype",
    "pack_signs",
    "unpack_signs",
]
