"""Code types: what a compressor emits, one module per kind. Each knows its exact storage and how to score
against its own kind; ``base`` holds the ``Codes`` contract every kind implements.

Storage accounting is exact and split in two:

* ``row_nbytes``: bytes that grow with the number of vectors (the per-row payload);
* ``shared_nbytes``: bytes stored once for all rows (for example int8 scales).

``nbytes`` is their sum and equals the bytes of the arrays ``to_arrays()`` returns, which is what
``adaptemb.save_codes`` writes. ``bytes_per_vector`` is ``row_nbytes / len(codes)``.
"""

from adaptemb.codes.base import Codes, index_dtype
from adaptemb.codes.binary import BinaryCodes
from adaptemb.codes.binary_sparse import BinarySparseCodes
from adaptemb.codes.dense import DenseCodes
from adaptemb.codes.projected import ProjectedQueries
from adaptemb.codes.quantized import QuantizedCodes
from adaptemb.codes.sparse import SparseCodes

__all__ = [
    "BinaryCodes",
    "BinarySparseCodes",
    "Codes",
    "DenseCodes",
    "ProjectedQueries",
    "QuantizedCodes",
    "SparseCodes",
    "index_dtype",
]
