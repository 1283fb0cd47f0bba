"""adaptemb: compress frozen embeddings, fit once, encode at any budget."""

from adaptemb._version import __version__
from adaptemb.api import compress, fit, get_compressor, list_compressors, load
from adaptemb.codes import BinaryCodes, BinarySparseCodes, Codes, DenseCodes, QuantizedCodes, SparseCodes
from adaptemb.compressor import Budgets, Compressor, CompressorConfig
from adaptemb.data import load_embeddings
from adaptemb.devices import resolve_device
from adaptemb.errors import (
    AdaptembError,
    CorruptFileError,
    DuplicateCompressorError,
    InvalidConfigError,
    NotFittedError,
    UnknownCompressorError,
)
from adaptemb.hookspecs import hookimpl
from adaptemb.linalg import principal_components
from adaptemb.losses import cosine_distance, info_nce, normalized_mse
from adaptemb.registry import (
    CompressorInfo,
    CompressorRegistry,
    get_registry,
    register_plugin,
    unregister_plugin,
)
from adaptemb.serialization import load_codes, save_codes
from adaptemb.train import FitReport, TrainingConfig, train
from adaptemb.validation import as_matrix

__all__ = [
    "AdaptembError",
    "BinaryCodes",
    "BinarySparseCodes",
    "Budgets",
    "Codes",
    "Compressor",
    "CompressorConfig",
    "CompressorInfo",
    "CompressorRegistry",
    "CorruptFileError",
    "DenseCodes",
    "DuplicateCompressorError",
    "FitReport",
    "InvalidConfigError",
    "NotFittedError",
    "QuantizedCodes",
    "SparseCodes",
    "TrainingConfig",
    "UnknownCompressorError",
    "__version__",
    "as_matrix",
    "compress",
    "cosine_distance",
    "fit",
    "get_compressor",
    "get_registry",
    "hookimpl",
    "info_nce",
    "list_compressors",
    "load",
    "load_codes",
    "load_embeddings",
    "normalized_mse",
    "principal_components",
    "register_plugin",
    "resolve_device",
    "save_codes",
    "train",
    "unregister_plugin",
]
