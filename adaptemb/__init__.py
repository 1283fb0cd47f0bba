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
from adaptemb.compose.levels import fit_levels
from adaptemb.compose.planes import fit_planes
from adaptemb.compose.rotation import (
    ITQ_MAX_RANK,
    ITQ_SAMPLE_ROWS,
    Rotation,
    fit_rotation,
    hadamard_rotation,
    itq_rotation,
    random_rotation,
    walsh_hadamard,
)
from adaptemb.config import CompressorConfig, parse_params
from adaptemb.data import load_embeddings
from adaptemb.devices import resolve_device
from adaptemb.encoder_export import EncoderExport, export_encoder
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
from adaptemb.index_build import build_index_from_shards
from adaptemb.indexing import CompressedIndex, Rerank
from adaptemb.inputs import INPUT_KINDS, InputKind, IntegerEmbeddings, scale_offset_from_ranges
from adaptemb.linalg import has_direction, principal_components, unit_rows
from adaptemb.losses import cosine_distance, info_nce, normalized_mse
from adaptemb.method import Compressor
from adaptemb.onnx.parity import EncoderParity, compare_codes
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
from adaptemb.vectordb import (
    EngineIndex,
    export_codes,
    milvus_client,
    qdrant_client,
    release_milvus_lite,
    search_milvus,
    search_qdrant,
)

__all__ = [
    "INPUT_KINDS",
    "ITQ_MAX_RANK",
    "ITQ_SAMPLE_ROWS",
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
    "EncoderParity",
    "EngineIndex",
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
    "Rotation",
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
    "build_index_from_shards",
    "compare_codes",
    "compress",
    "cosine_distance",
    "decoded_inner_products",
    "encode_files",
    "export_codes",
    "export_encoder",
    "fit",
    "fit_levels",
    "fit_planes",
    "fit_rotation",
    "get_compressor",
    "get_index_registry",
    "get_registry",
    "hadamard_rotation",
    "has_direction",
    "hookimpl",
    "index_dtype",
    "info_nce",
    "itq_rotation",
    "list_compressors",
    "load",
    "load_codes",
    "load_embeddings",
    "load_index",
    "milvus_client",
    "normalized_mse",
    "parse_params",
    "principal_components",
    "qdrant_client",
    "random_rotation",
    "read_code_shards",
    "register_plugin",
    "release_milvus_lite",
    "resolve_device",
    "save_codes",
    "scale_offset_from_ranges",
    "search_milvus",
    "search_qdrant",
    "set_threads",
    "train",
    "unit_rows",
    "unregister_plugin",
    "walsh_hadamard",
]
