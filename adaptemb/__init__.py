"""adaptemb: compress frozen embeddings, fit once, encode at any budget."""

from adaptemb._version import __version__
from adaptemb.ann import AnnConfig, AnnIndex, CellScorer
from adaptemb.api import compress, fit, get_compressor, list_compressors, load, load_codes, load_index
from adaptemb.batches import Batches, StreamBatches, TensorBatches
from adaptemb.budgets import Budgets, ByteBudgets
from adaptemb.codes import (
    BinaryCodes,
    BinarySparseCodes,
    Codes,
    DenseCodes,
    PackedSparseCodes,
    ProjectedQueries,
    QuantizedCodes,
    SparseCodes,
    blockwise_scores,
    decoded_inner_products,
    index_dtype,
)
from adaptemb.config import CompressorConfig, parse_params
from adaptemb.data import load_embeddings
from adaptemb.devices import resolve_device
from adaptemb.errors import (
    AdaptembError,
    AdaptembWarning,
    CorruptFileError,
    DuplicateCompressorError,
    DuplicateIndexError,
    InvalidConfigError,
    NotFittedError,
    UnknownCompressorError,
    UnsupportedExportError,
    ZeroRowsWarning,
)
from adaptemb.index import Index, SearchResult
from adaptemb.index.bound import CompressedIndex, Rerank
from adaptemb.inputs import INPUT_KINDS, InputKind, IntegerEmbeddings, scale_offset_from_ranges
from adaptemb.linalg import has_direction, principal_components, unit_rows
from adaptemb.losses import cosine_distance, info_nce, normalized_mse
from adaptemb.method import Compressor
from adaptemb.onnx.encoder import EncoderExport, export_encoder
from adaptemb.registry import (
    CompressorInfo,
    CompressorRegistry,
    IndexRegistry,
    adds_compressors,
    adds_index_backends,
    build_index,
    get_index_registry,
    get_registry,
    hookimpl,
    register_plugin,
    unregister_plugin,
)
from adaptemb.rows import RowStream
from adaptemb.serialization import save_codes
from adaptemb.streaming import EncodeResult, encode_files, read_code_shards
from adaptemb.threads import set_threads
from adaptemb.train import Checkpoints, FitReport, TrainingConfig, train
from adaptemb.validation import as_matrix

__all__ = [
    "INPUT_KINDS",
    "AdaptembError",
    "AdaptembWarning",
    "AnnConfig",
    "AnnIndex",
    "Batches",
    "BinaryCodes",
    "BinarySparseCodes",
    "Budgets",
    "ByteBudgets",
    "CellScorer",
    "Checkpoints",
    "Codes",
    "CompressedIndex",
    "Compressor",
    "CompressorConfig",
    "CompressorInfo",
    "CompressorRegistry",
    "CorruptFileError",
    "DenseCodes",
    "DuplicateCompressorError",
    "DuplicateIndexError",
    "EncodeResult",
    "EncoderExport",
    "FitReport",
    "Index",
    "IndexRegistry",
    "InputKind",
    "IntegerEmbeddings",
    "InvalidConfigError",
    "NotFittedError",
    "PackedSparseCodes",
    "ProjectedQueries",
    "QuantizedCodes",
    "Rerank",
    "RowStream",
    "SearchResult",
    "SparseCodes",
    "StreamBatches",
    "TensorBatches",
    "TrainingConfig",
    "UnknownCompressorError",
    "UnsupportedExportError",
    "ZeroRowsWarning",
    "__version__",
    "adds_compressors",
    "adds_index_backends",
    "as_matrix",
    "blockwise_scores",
    "build_index",
    "compress",
    "cosine_distance",
    "decoded_inner_products",
    "encode_files",
    "export_encoder",
    "fit",
    "get_compressor",
    "get_index_registry",
    "get_registry",
    "has_direction",
    "hookimpl",
    "index_dtype",
    "info_nce",
    "list_compressors",
    "load",
    "load_codes",
    "load_embeddings",
    "load_index",
    "normalized_mse",
    "parse_params",
    "principal_components",
    "read_code_shards",
    "register_plugin",
    "resolve_device",
    "save_codes",
    "scale_offset_from_ranges",
    "set_threads",
    "train",
    "unit_rows",
    "unregister_plugin",
]
