"""Saving and loading fitted compressors (safetensors) and codes (npz). Data only, never pickle.

A compressor file is one safetensors file: the fitted tensors plus string metadata
``format="adaptemb.compressor"``, ``format_version``, ``method``, ``config`` (JSON), ``dim`` and
``adaptemb_version``. A codes file is an ``.npz`` holding the arrays of ``Codes.to_arrays()`` and a
JSON header in ``__adaptemb__`` (``format="adaptemb.codes"``, ``kind``, ``dim``, ``n``). Every write
goes to a temporary file in the target folder and is renamed into place, so a failed write leaves
nothing behind.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydantic
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from adaptemb._version import __version__
from adaptemb.codes import Codes
from adaptemb.compressor import Compressor
from adaptemb.errors import CorruptFileError

COMPRESSOR_FORMAT = "adaptemb.compressor"
CODES_FORMAT = "adaptemb.codes"
FORMAT_VERSION = "1"
_CODES_HEADER = "__adaptemb__"


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and rename the result onto ``path``; remove it on any failure."""
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(f"{target} is a directory; give a file path")
    if not target.parent.exists():
        raise FileNotFoundError(f"folder {target.parent} does not exist")
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_compressor(compressor: Compressor, path: str | Path) -> Path:
    """Write a fitted compressor to one safetensors file."""
    metadata = {
        "format": COMPRESSOR_FORMAT,
        "format_version": FORMAT_VERSION,
        "method": compressor.name,
        "config": compressor.config.model_dump_json(),
        "dim": str(compressor.dim),
        "adaptemb_version": __version__,
    }
    tensors = compressor.state_tensors()
    return atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


def load_compressor(path: str | Path) -> Compressor:
    """Load a compressor file, checking it is one adaptemb wrote for a registered method."""
    from adaptemb.registry import get_registry

    source = _existing_file(path)
    metadata, tensors = _read_safetensors(source)
    if metadata.get("format") != COMPRESSOR_FORMAT:
        raise CorruptFileError(
            f"{source} is a safetensors file but not an adaptemb compressor "
            f"(its metadata has no format={COMPRESSOR_FORMAT!r}); save compressors with Compressor.save"
        )
    if metadata.get("format_version") != FORMAT_VERSION:
        raise CorruptFileError(
            f"{source} uses compressor format version {metadata.get('format_version')!r}; "
            f"this adaptemb ({__version__}) reads version {FORMAT_VERSION}"
        )
    cls = get_registry().get(metadata.get("method", "<missing>"))
    try:
        config = cls.Config.model_validate_json(metadata["config"])
        dim = int(metadata["dim"])
        compressor = cls(config=config)
        compressor.restore(dim, tensors)
    except (KeyError, ValueError, pydantic.ValidationError, RuntimeError) as err:
        raise CorruptFileError(f"{source} holds a damaged {cls.name!r} compressor: {err}") from None
    return compressor


def save_codes(codes: Codes, path: str | Path) -> Path:
    """Write codes to an ``.npz`` file (arrays plus a JSON header)."""
    header = json.dumps(
        {"format": CODES_FORMAT, "format_version": FORMAT_VERSION, "kind": codes.kind,
         "dim": codes.dim, "n": len(codes), "adaptemb_version": __version__}
    )
    arrays = {**codes.to_arrays(), _CODES_HEADER: np.array(header)}

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)

    return atomic_write(path, write)


def load_codes(path: str | Path) -> Codes:
    """Load codes written by ``save_codes``."""
    from adaptemb.registry import get_registry

    get_registry()  # plugins may define their own code kinds
    source = _existing_file(path)
    try:
        with np.load(source, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise CorruptFileError(f"{source} is not a readable .npz codes file: {err}") from None
    if _CODES_HEADER not in arrays:
        raise CorruptFileError(f"{source} is an .npz file but not adaptemb codes (no {_CODES_HEADER} header)")
    try:
        header = json.loads(str(arrays.pop(_CODES_HEADER)))
        cls = Codes.for_kind(header["kind"])
        codes = cls.from_arrays(arrays, int(header["dim"]))
    except (KeyError, ValueError, TypeError) as err:
        raise CorruptFileError(f"{source} holds damaged codes: {err}") from None
    if len(codes) != header.get("n"):
        raise CorruptFileError(f"{source} declares {header.get('n')} rows but holds {len(codes)}")
    return codes


def _existing_file(path: str | Path) -> Path:
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no such file: {source}")
    return source


def _read_safetensors(source: Path) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    try:
        with safe_open(str(source), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 - safe_open is not a dict
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise CorruptFileError(f"{source} is not a valid safetensors file ({err})") from None
    return metadata, tensors
