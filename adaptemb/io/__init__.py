"""Reading embedding files, one reader per format, shared by ``load_embeddings``, streaming encode, fitting
from files and dataset loading: a file that loads also streams, with the same dtypes.

``open_rows(path, key=None)`` picks the reader by suffix and returns a :class:`RowSource` (``shape``,
``dtype``, ``len()``, ``rows(start, stop)``, ``batches(start, stop, batch_rows)``, ``read_all()``).
Formats: ``.npy``, ``.npz``, ``.safetensors`` (float16/32/64, bfloat16 widened exactly to float32, integers),
``.parquet`` (a list / large_list / fixed_size_list column) and the ANN-benchmark ``.fvecs`` (float32),
``.bvecs`` (uint8) and ``.ivecs`` (int32). Integer dtypes are returned as stored; nothing is unpickled.
"""

from adaptemb.io.base import NameNeededError, RowSource, pick_name
from adaptemb.io.parquet import list_column_rows, vector_columns
from adaptemb.io.readers import SINGLE_ARRAY_SUFFIXES, SUPPORTED_SUFFIXES, open_rows, read_arrays

__all__ = [
    "SINGLE_ARRAY_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "NameNeededError",
    "RowSource",
    "list_column_rows",
    "open_rows",
    "pick_name",
    "read_arrays",
    "vector_columns",
]
