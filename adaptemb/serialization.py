"""Files: atomic writes, safetensors files with a JSON-string header, and codes ``.npz`` files. Data only, never pickle.

This module knows file formats, not methods. ``Persistence`` (``save``, ``load``, ``from_saved``,
``file_metadata``, mixed into the public ``Compressor``) writes and reads a compressor through the core's
``state_tensors`` / ``restore``; which method a file names is looked up above it (``adaptemb.load``,
``adaptemb.load_index``).

* A compressor file is one safetensors file: the fitted tensors plus string metadata
  ``format="adaptemb.compressor"``, ``format_version``, ``method``, ``config`` (JSON), ``dim``,
  ``adaptemb_version`` and ``tensors`` (JSON: each tensor's dtype and shape, checked at load together
  with finiteness, so a tensor changed after writing is refused by name). An index file (``format="adaptemb.index"``) adds the document codes and the
  backend's arrays under prefixes.
* A codes file is an ``.npz`` holding the arrays of ``Codes.to_arrays()`` and a JSON header in
  ``__adaptemb__`` (``format="adaptemb.codes"``, ``kind``, ``dim``, ``n``).

Every write goes to a temporary file in the target folder (created with its missing parents) and is
renamed into place, so a failed write leaves nothing behind, not even the folders it created; a full disk
is one ``OSError(ENOSPC)`` naming the target, whatever library wrote the bytes. A folder where a file is
read or written is ``IsADirectoryError`` naming it. Every
safetensors read takes the header and the tensors from one read of the file, so a concurrent atomic
replace can never mix two files.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import stat
import struct
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import pydantic
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_torch_bytes
from safetensors.torch import save_file

from adaptemb._version import __version__
from adaptemb.codes import Codes
from adaptemb.errors import CorruptFileError

COMPRESSOR_FORMAT = "adaptemb.compressor"
INDEX_FORMAT = "adaptemb.index"
CODES_FORMAT = "adaptemb.codes"
FORMAT_VERSION = "1"
_CODES_HEADER = "__adaptemb__"
_MANIFEST = "tensors"


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_path)`` and rename the result onto ``path``; remove it on any failure.

    Missing parent folders are created first (the temporary file lives in the target's own folder, so the
    rename stays atomic); when the write fails, the folders this call created are removed again if they
    are still empty. A file that ``path`` replaces keeps its permission bits (a private 0600 model stays
    private).

    ``IsADirectoryError`` when ``path`` is a folder; a full disk (or quota), however the writing library
    reports it (``OSError``, ``SafetensorError``, an ONNX or Arrow error), is ``OSError(errno.ENOSPC,
    "No space left on device: the disk is full", path)`` with the library's error as its cause."""
    target = Path(path)
    if target.is_dir():
        raise is_a_directory(target)
    created = make_parents(target)
    try:
        mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_current_umask()
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except BaseException as err:
        remove_empty_folders(created)
        _raise_if_disk_full(err, target)
        raise
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600: keep a replaced file's mode, else the usual permissions
        os.replace(tmp, target)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        remove_empty_folders(created)
        _raise_if_disk_full(err, target)
        raise
    return target


DISK_FULL = "No space left on device: the disk is full"
_DISK_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_DISK_FULL_WORDS = ("no space left on device", "disk quota exceeded", "storagefull", "os error 28")


def _raise_if_disk_full(err: BaseException, target: Path) -> None:
    """Raise the one disk-full ``OSError`` naming ``target`` when ``err`` (or an error it came from) says the
    disk or the quota is full; return otherwise."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        full = (isinstance(cause, OSError) and cause.errno in _DISK_FULL_ERRNOS) or any(
            words in str(cause).lower() for words in _DISK_FULL_WORDS)
        if full:
            raise OSError(errno.ENOSPC, DISK_FULL, str(target)) from err
        cause = cause.__cause__ or cause.__context__


def is_a_directory(path: str | Path) -> IsADirectoryError:
    """The error for a folder given where a file is read or written: ``Is a directory: PATH`` on the command line."""
    return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))


def make_parents(path: str | Path) -> list[Path]:
    """Create the missing folders above ``path``; return the ones created, outermost first.

    ``NotADirectoryError`` when something above ``path`` is a file."""
    folder = Path(path).parent
    missing: list[Path] = []
    while not folder.exists():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder: {Path(path)} cannot be written below it")
    created = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:  # made meanwhile by another writer: not ours to remove
            if not folder.is_dir():
                raise
            continue
        created.append(folder)
    return created


def remove_empty_folders(folders: list[Path]) -> None:
    """Remove ``folders`` (as ``make_parents`` returned them), innermost first, while they are empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:  # not empty (another writer's file) or already gone: leave it and what is above
            return


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- safetensors ------------------------------------------------------------------------------------


def write_tensors(path: str | Path, tensors: Mapping[str, np.ndarray | torch.Tensor], metadata: Mapping[str, str]) -> Path:
    """Write named tensors (numpy or torch, CPU) and string metadata to one safetensors file, atomically."""
    arrays, seen = {}, set()
    for name, tensor in tensors.items():
        array = _as_torch(tensor)
        if array.numel() and array.untyped_storage().data_ptr() in seen:  # safetensors refuses shared memory
            array = array.clone()
        seen.add(array.untyped_storage().data_ptr())
        arrays[name] = array
    manifest = {name: [str(t.dtype).removeprefix("torch."), list(t.shape)] for name, t in arrays.items()}
    header = {**metadata, _MANIFEST: json.dumps(manifest, sort_keys=True)}
    return atomic_write(path, lambda tmp: save_file(arrays, str(tmp), metadata=header))


def read_tensors(path: str | Path) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """The metadata and tensors of a safetensors file, both taken from a single read of the file."""
    source = existing_file(path)
    try:
        data = source.read_bytes()
        metadata = _header_metadata(data)
        tensors = load_torch_bytes(data)
    except (SafetensorError, OSError, ValueError, TypeError, RuntimeError, struct.error) as err:
        raise CorruptFileError(f"{source} is not a valid safetensors file ({err})") from None
    return metadata, tensors


def _header_metadata(data: bytes) -> dict[str, str]:
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        raise ValueError(f"header length {size} exceeds the file")
    header = json.loads(data[8 : 8 + size])
    if not isinstance(header, dict):
        raise TypeError("header is not a JSON object")
    metadata = header.get("__metadata__") or {}
    return {str(k): str(v) for k, v in metadata.items()}


def read_adaptemb_file(path: str | Path, expected: str, what: str) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """``read_tensors`` plus a check that adaptemb wrote the file as ``expected`` in a readable version."""
    metadata, tensors = read_tensors(path)
    if metadata.get("format") != expected:
        raise CorruptFileError(
            f"{path} is a safetensors file but not an adaptemb {what} (its metadata has no format={expected!r})"
        )
    if metadata.get("format_version") != FORMAT_VERSION:
        raise CorruptFileError(
            f"{path} uses {what} format version {metadata.get('format_version')!r}; "
            f"this adaptemb ({__version__}) reads version {FORMAT_VERSION}"
        )
    check_tensors(path, metadata, tensors)
    return metadata, tensors


def check_tensors(path: str | Path, metadata: Mapping[str, str], tensors: Mapping[str, torch.Tensor]) -> None:
    """Refuse, naming the tensor, one whose dtype or shape differs from what the writer recorded
    (``write_tensors``' manifest) or that holds NaN or infinite values."""
    manifest = _manifest(path, metadata)
    if manifest is not None and set(manifest) != set(tensors):
        raise CorruptFileError(
            f"{path} holds tensors {sorted(tensors)} but was written with {sorted(manifest)}"
        )
    for name, tensor in tensors.items():
        found = [str(tensor.dtype).removeprefix("torch."), list(tensor.shape)]
        if manifest is not None and manifest[name] != found:
            (dtype, shape), (want_dtype, want_shape) = found, manifest[name]
            raise CorruptFileError(
                f"{path}: tensor {name!r} is {dtype} of shape {tuple(shape)}, but was written as "
                f"{want_dtype} of shape {tuple(want_shape)}"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CorruptFileError(f"{path}: tensor {name!r} holds NaN or infinite values")


def _manifest(path: str | Path, metadata: Mapping[str, str]) -> dict[str, list] | None:
    """The dtype and shape per tensor recorded at write time (None for files written before it was)."""
    if _MANIFEST not in metadata:
        return None
    try:
        manifest = json.loads(metadata[_MANIFEST])
        if not isinstance(manifest, dict) or not all(isinstance(v, list) and len(v) == 2 for v in manifest.values()):
            raise ValueError("not a mapping of name -> [dtype, shape]")
    except ValueError as err:
        raise CorruptFileError(f"{path} has a damaged tensor manifest ({err})") from None
    return manifest


def check_shapes(path: str | Path, tensors: Mapping[str, torch.Tensor], expected: Mapping[str, tuple[int | str, ...]],
                 what: str) -> None:
    """Refuse a tensor whose shape differs from ``expected`` (a method's declared shapes for its config and dim:
    an int is an exact size, a string a size the fit chose, one size in every tensor naming it), or a declared
    tensor the file lacks, with ``CorruptFileError("{path}: {what}: tensor 'x' has shape (31,), expected (32,)")``.
    Tensors not declared are left to the method."""
    sizes: dict[str, tuple[int, str]] = {}  # a named size -> (its value, the tensor that set it)
    for name, shape in expected.items():
        if name not in tensors:
            raise CorruptFileError(f"{path}: {what}: tensor {name!r} of shape {_shape_text(shape, sizes)} is missing")
        found = tuple(int(size) for size in tensors[name].shape)
        want = [sizes[size][0] if isinstance(size, str) and size in sizes else size for size in shape]
        if len(found) != len(shape) or any(isinstance(w, int) and w != f for w, f in zip(want, found)):
            raise CorruptFileError(
                f"{path}: {what}: tensor {name!r} has shape {found}, expected {_shape_text(shape, sizes)}")
        for size, value in zip(shape, found):
            if isinstance(size, str):
                sizes.setdefault(size, (value, name))


def _shape_text(shape: tuple[int | str, ...], sizes: Mapping[str, tuple[int, str]]) -> str:
    """``(32,)``, ``(h, 32) with h=64 as in 'enc_weight'`` or ``(r, 32)``: a shape as ``check_shapes`` words it."""
    text = f"({', '.join(str(size) for size in shape)}{',' if len(shape) == 1 else ''})"
    named = [f"{size}={sizes[size][0]} as in {sizes[size][1]!r}" for size in dict.fromkeys(shape)
             if isinstance(size, str) and size in sizes]
    return f"{text} with {', '.join(named)}" if named else text


def split_prefix(tensors: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors named ``prefix + name``, keyed by ``name``."""
    return {name[len(prefix) :]: t for name, t in tensors.items() if name.startswith(prefix)}


def _as_torch(tensor: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(tensor, np.ndarray):
        array = np.ascontiguousarray(tensor)
        return torch.from_numpy(array if array.flags.writeable else array.copy())
    return tensor.detach().cpu().contiguous()


# -- compressors ------------------------------------------------------------------------------------


class SavedCompressor(Protocol):
    """What ``Persistence`` uses of the compressor it is mixed into (``CompressorCore`` provides it)."""

    name: ClassVar[str]
    Config: ClassVar[type[pydantic.BaseModel]]
    config: pydantic.BaseModel
    dim: int | None

    def __init__(self, config: Any = None, **params: Any) -> None: ...

    def _require_fitted(self) -> None: ...

    def state_tensors(self) -> dict[str, torch.Tensor]: ...

    def restore(self, dim: int, tensors: dict[str, torch.Tensor]) -> None: ...

    def _state_shapes(self, dim: int) -> dict[str, tuple[int | str, ...]] | None: ...

    def file_metadata(self) -> dict[str, str]: ...

    def encode(self, x: Any, k: int | None = None) -> Codes: ...

    def encode_queries(self, x: Any, k: int | None = None) -> Codes: ...

    def _check_restored(self, source: str | Path) -> None: ...


_Saved = TypeVar("_Saved", bound=SavedCompressor)


class Persistence:
    """A compressor as one safetensors file: the ``save``, ``load``, ``from_saved`` and ``file_metadata`` of the
    public ``Compressor``. The file holds ``state_tensors()`` and the metadata (format, method, config, dim,
    version); loading rebuilds the config, checks the tensors' declared shapes (``_state_shapes``), restores
    them and encodes a test row, so a file that does not fit its config fails at load, naming what is wrong."""

    def file_metadata(self: SavedCompressor) -> dict[str, str]:
        """The string metadata a saved compressor carries (format, method, config, dim, version)."""
        self._require_fitted()
        return {
            "format": COMPRESSOR_FORMAT,
            "format_version": FORMAT_VERSION,
            "method": self.name,
            "config": self.config.model_dump_json(),
            "dim": str(self.dim),
            "adaptemb_version": __version__,
        }

    def save(self: SavedCompressor, path: str | Path) -> Path:
        """Write this fitted compressor to one safetensors file (atomically) and return its path."""
        return write_tensors(path, self.state_tensors(), self.file_metadata())

    @classmethod
    def load(cls: type[_Saved], path: str | Path) -> _Saved:  # noqa: PYI019 (typing.Self is 3.11+)
        """Load a ``cls`` compressor saved by ``save``; ``adaptemb.load(path)`` loads any method by name."""
        if inspect.isabstract(cls):
            raise TypeError("Compressor.load needs a method class (e.g. SVDCompressor.load); use adaptemb.load(path)")
        metadata, tensors = read_adaptemb_file(path, COMPRESSOR_FORMAT, "compressor")
        if metadata.get("method") != cls.name:
            raise TypeError(f"{path} holds a {metadata.get('method')!r} compressor, not {cls.name!r}")
        return cls.from_saved(metadata, tensors, source=path)  # type: ignore[attr-defined, no-any-return]

    @classmethod
    def from_saved(cls: type[_Saved], metadata: dict[str, str], tensors: dict[str, torch.Tensor], *,  # noqa: PYI019
                   source: str | Path = "<memory>") -> _Saved:
        """Rebuild a compressor from the metadata and tensors of a file ``save`` wrote."""
        unfit = f"the saved {cls.name} tensors do not fit its config and dim={metadata.get('dim')}"
        try:
            config = cls.Config.model_validate_json(metadata["config"])
            dim = int(metadata["dim"])
            compressor = cls(config=config)
            check_shapes(source, tensors, compressor._state_shapes(dim) or {}, unfit)
            compressor.restore(dim, tensors)
        except CorruptFileError:
            raise
        except RuntimeError as err:  # torch's words (e.g. a copy between two shapes): kept as the cause only
            raise CorruptFileError(f"{source}: {unfit}") from err
        except (KeyError, ValueError, TypeError, pydantic.ValidationError, json.JSONDecodeError) as err:
            raise CorruptFileError(f"{source} holds a damaged {cls.name!r} compressor: {err}") from None
        compressor._check_restored(source)
        return compressor

    def _check_restored(self: SavedCompressor, source: str | Path) -> None:
        """Encode one test row as document and as query: tensors whose shapes or values do not fit the
        config and ``dim`` fail here, at load, with a ``CorruptFileError``, not later in a user's encode."""
        assert self.dim is not None
        row = torch.full((1, self.dim), self.dim**-0.5)
        try:
            arrays = {**self.encode(row).to_arrays(), **self.encode_queries(row).to_arrays()}
        except (RuntimeError, ValueError, TypeError, IndexError, KeyError) as err:  # its words: the cause only
            raise CorruptFileError(f"{source}: the saved {self.name} tensors do not fit its config and dim={self.dim} "
                                   "(encoding a test row failed)") from err
        for name, array in arrays.items():
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise CorruptFileError(f"{source}: the saved {self.name} compressor encodes a test row to non-finite {name!r}")


# -- codes files ------------------------------------------------------------------------------------


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


def read_codes(path: str | Path) -> Codes:
    """Codes written by ``save_codes`` (their kind must be defined: ``adaptemb.load_codes`` loads plugins first)."""
    source = existing_file(path)
    try:
        with np.load(source, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise CorruptFileError(f"{source} is not a readable .npz codes file: {err}") from None
    if _CODES_HEADER not in arrays:
        raise CorruptFileError(f"{source} is an .npz file but not adaptemb codes (no {_CODES_HEADER} header)")
    try:
        header = json.loads(str(arrays.pop(_CODES_HEADER)))
    except ValueError as err:
        raise CorruptFileError(f"{source} has a damaged codes header: {err}") from None
    _check_codes_header(source, header)
    try:
        cls = Codes.for_kind(header["kind"])
        codes = cls.from_arrays(arrays, int(header["dim"]))
    except (KeyError, ValueError, TypeError) as err:
        raise CorruptFileError(f"{source} holds damaged codes: {err}") from None
    if len(codes) != header.get("n"):
        raise CorruptFileError(f"{source} declares {header.get('n')} rows but holds {len(codes)}")
    return codes


def _check_codes_header(source: Path, header: object) -> None:
    if not isinstance(header, dict) or header.get("format") != CODES_FORMAT:
        raise CorruptFileError(f"{source} is an .npz file but not adaptemb codes (its header has no format={CODES_FORMAT!r})")
    if header.get("format_version") != FORMAT_VERSION:
        raise CorruptFileError(
            f"{source} uses codes format version {header.get('format_version')!r}; "
            f"this adaptemb ({__version__}) reads version {FORMAT_VERSION}"
        )


def existing_file(path: str | Path, missing: str | None = None) -> Path:
    """``path`` as a Path; ``IsADirectoryError`` for a folder, else ``FileNotFoundError``, each naming it (``missing``:
    the message for a missing file instead of ``no such file: PATH``, e.g. where to get it)."""
    source = Path(path)
    if source.is_dir():
        raise is_a_directory(source)
    if not source.is_file():
        raise FileNotFoundError(missing or f"no such file: {source}")
    return source
