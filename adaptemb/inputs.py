"""Integer embeddings people already have: int8 values and packed sign bits, read only when asked for.

Providers and libraries hand out embeddings that are already quantised: int8 (Cohere's and Voyage's
``int8`` types, sentence-transformers' ``quantize_embeddings(..., precision="int8")``) and sign bits packed 8
per byte (``ubinary``: ``np.packbits(x > 0, axis=1)``, most significant bit first). adaptemb never casts an
integer array silently: every entry point that takes embeddings has ``input_kind`` (``"float"`` by default),
and this module is the one place that turns (array, ``input_kind``, ``input_scale``, ``input_offset``,
``input_dim``) into

* the float32 rows a method computes with: int8 ``values`` as ``offset + scale * values`` (``scale``
  default 1.0, ``offset`` default 0.0, each a number or one per dimension), packed bits as ±1 (bit set = +1);
* or, for a method that declares the kind in ``accepts_input_kinds``, the integers themselves
  (:class:`IntegerEmbeddings`), which that method keeps as its codes without re-quantising (``int8``: the
  given bytes with the given scale and offset; ``binary`` with ``threshold="zero"``: the given bits).
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

import numpy as np
import torch

from adaptemb.errors import InvalidConfigError
from adaptemb.validation import FLOAT_DTYPES, as_matrix, check_dim

if TYPE_CHECKING:
    from typing_extensions import Unpack

InputKind = Literal["float", "int8", "ubinary"]
INPUT_KINDS: tuple[str, ...] = ("float", "int8", "ubinary")


class InputOptions(TypedDict, total=False):
    """How the embeddings given to ``fit``, ``encode``, ``encode_queries``, ``search`` and ``compress`` are read,
    declared once: those functions take them as keyword arguments (``**inputs: Unpack[InputOptions]``) and read
    them into one ``InputSpec``."""

    input_kind: InputKind
    """``"float"`` (default), ``"int8"`` (int8 values, read as ``input_offset + input_scale * x``) or ``"ubinary"``
    (sign bits packed 8 per byte, uint8 (n, ceil(d / 8)), read as ±1)."""
    input_scale: Any
    """int8 only: the size of one step, a number or one per dimension (default 1.0)."""
    input_offset: Any
    """int8 only: the value of 0, a number or one per dimension (default 0.0)."""
    input_dim: int | None
    """ubinary only: the true dimension d when it is not 8 times the width."""


_OPTION_DEFAULTS: dict[str, Any] = {"input_kind": "float", "input_scale": None, "input_offset": None, "input_dim": None}
_Function = TypeVar("_Function", bound=Callable[..., Any])


def take_input_options(params: dict[str, Any]) -> InputOptions:
    """The input options among ``params`` (keyword arguments that hold others too: a method's config), removed from
    ``params``; ``InputSpec.of`` checks them."""
    return typing.cast(InputOptions, {name: params.pop(name) for name in _OPTION_DEFAULTS if name in params})


def takes_input_options(function: _Function) -> _Function:
    """Mark ``function`` as taking the ``InputOptions`` (as ``**inputs``, or within its ``**params``): its signature
    (``inspect.signature``, ``help``) then lists them as keyword-only parameters with their defaults, in place of
    ``**inputs`` or before ``**params``. The function itself is returned unchanged."""
    signature = inspect.signature(function)
    *head, rest = signature.parameters.values()
    if rest.kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"{function.__qualname__} takes the input options in its **keyword arguments")
    hints = typing.get_type_hints(InputOptions)
    options = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hints[name])
               for name, default in _OPTION_DEFAULTS.items()]
    function.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*head, *options, *([] if rest.name == "inputs" else [rest])])
    return function

_HOW_TO_BRING = (
    "Integer embeddings are never cast silently: pass input_kind='int8' for int8 values (with input_scale / "
    "input_offset, the dequantisation x = offset + scale * value; default 1.0 and 0.0) or input_kind='ubinary' for "
    "sign bits packed 8 per byte in uint8 (np.packbits(x > 0, axis=1))"
)


@dataclass(frozen=True)
class IntegerEmbeddings:
    """Validated integer embeddings: what a method that accepts ``kind`` as its own codes receives.

    ``values``: (n, dim) int8 for ``kind="int8"``, (n, ceil(dim / 8)) uint8 packed bits (most significant bit
    first, padding bits zero) for ``kind="ubinary"``. ``scale`` and ``offset`` (float32, (dim,)) dequantise
    int8 values, ``x = offset + scale * value``; None for bits, which stand for ±1.
    """

    kind: str
    values: np.ndarray
    dim: int
    scale: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __len__(self) -> int:
        return self.values.shape[0]

    def to_float(self) -> np.ndarray:
        """The float32 rows (n, dim) a method that does not keep these integers computes with."""
        if self.kind == "ubinary":
            return np.unpackbits(self.values, axis=1, count=self.dim).astype(np.float32) * 2.0 - 1.0
        assert self.scale is not None and self.offset is not None
        return self.values.astype(np.float32) * self.scale + self.offset


@dataclass(frozen=True)
class InputSpec:
    """What the caller said about its embeddings: ``input_kind`` and, for int8, the dequantisation."""

    kind: str = "float"
    scale: Any = None
    offset: Any = None
    dim: int | None = None

    @classmethod
    def of(cls, **inputs: Unpack[InputOptions]) -> InputSpec:
        """The spec of the input options (``InputOptions``), the combination checked: a kind adaptemb reads, and only
        the options that kind takes; a name that is no input option is a ``TypeError``."""
        unknown = sorted(set(inputs) - set(_OPTION_DEFAULTS))
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}; the input options are "
                            f"{', '.join(_OPTION_DEFAULTS)}")
        options = {**_OPTION_DEFAULTS, **inputs}
        return cls._checked(options["input_kind"], options["input_scale"], options["input_offset"],
                            options["input_dim"])

    @classmethod
    def _checked(cls, input_kind: Any, input_scale: Any, input_offset: Any, input_dim: Any) -> InputSpec:
        if not isinstance(input_kind, str) or input_kind not in INPUT_KINDS:
            raise InvalidConfigError(f"input_kind must be one of {', '.join(repr(k) for k in INPUT_KINDS)}; "
                                     f"got {input_kind!r}")
        if input_kind != "int8" and (input_scale is not None or input_offset is not None):
            what = "input_scale" if input_scale is not None else "input_offset"
            raise InvalidConfigError(f"{what} dequantises int8 values and applies only with input_kind='int8'; got it "
                                     f"with input_kind={input_kind!r}"
                                     + (" (packed bits stand for ±1)" if input_kind == "ubinary" else ""))
        if input_dim is not None:
            if input_kind != "ubinary":
                raise InvalidConfigError(f"input_dim is the true dimension of packed bits and applies only with "
                                         f"input_kind='ubinary'; got it with input_kind={input_kind!r} (an array of "
                                         "values has its dimension as its width)")
            if isinstance(input_dim, bool) or not isinstance(input_dim, (int, np.integer)) or input_dim < 1:
                raise InvalidConfigError(f"input_dim must be an integer >= 1; got {input_dim!r}")
            input_dim = int(input_dim)
        return cls(input_kind, input_scale, input_offset, input_dim)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def width_of(self, x: Any) -> int | None:
        """The dimension of embeddings ``x`` as this spec reads them (from the shape alone, nothing read: packed bits
        hold 8 a byte unless ``input_dim`` says); None when ``x`` is not a 2-D array."""
        shape = getattr(x, "shape", ())
        if len(shape) != 2:
            return None
        return int(shape[1]) if self.kind != "ubinary" else self.dim or 8 * int(shape[1])

    def read_rows(self, x: Any, *, name: str = "embeddings", dim: int | None = None) -> ReadRows:
        """``x`` read once: its integers (``read``) and, when first asked for, its validated float32 rows."""
        return ReadRows(x, self.read(x, name=name, dim=dim), name)

    def read(self, x: Any, *, name: str = "embeddings", dim: int | None = None) -> IntegerEmbeddings | None:
        """``x`` as :class:`IntegerEmbeddings`, or None for float input (validated by ``as_matrix`` as before).

        ``dim``: the dimension a fitted compressor expects (also the true dimension of packed bits when
        ``input_dim`` is not given). Raises TypeError for a dtype other than the kind's, ValueError for a
        wrong shape or scale, and for integer input with ``input_kind="float"`` a TypeError saying how to bring it.
        """
        array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) and x.dtype in (torch.int8, torch.uint8) else x
        if self.is_float:
            if _is_integer(x):
                dtype = x.dtype if isinstance(x, (np.ndarray, torch.Tensor)) else None
                raise TypeError(f"{name} must have a floating dtype ({FLOAT_DTYPES}); got {dtype}. {_HOW_TO_BRING}")
            return None
        if not isinstance(array, np.ndarray):
            given = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"input_kind={self.kind!r} needs {_wanted(self.kind)} as a numpy array or torch tensor; "
                            f"got {given}")
        if array.dtype != _DTYPES[self.kind]:
            raise TypeError(f"input_kind={self.kind!r} needs {_wanted(self.kind)}; got {name} of dtype {array.dtype}"
                            f"{_dtype_hint(self.kind, array.dtype)}")
        if array.ndim != 2:
            raise ValueError(f"{name} must be 2-D with shape (n, {'d' if self.kind == 'int8' else 'ceil(d / 8)'}); "
                             f"got shape {array.shape}")
        if array.shape[0] == 0 or array.shape[1] == 0:
            raise ValueError(f"{name} is empty: shape {array.shape}; need at least one row and one column")
        array = np.ascontiguousarray(array)
        if self.kind == "ubinary":
            return self._bits(array, name, dim)
        if dim is not None:
            check_dim(array.shape[1], dim, name)
        d = array.shape[1]
        scale = _per_dim(self.scale, d, "input_scale", default=1.0)
        if not bool((scale > 0).all()):
            raise ValueError(f"input_scale must be > 0 in every dimension (the size of one int8 step); "
                             f"got {float(scale.min()):.6g} at dimension {int(scale.argmin())}")
        offset = _per_dim(self.offset, d, "input_offset", default=0.0)
        return IntegerEmbeddings("int8", array, d, scale, offset)

    def _bits(self, packed: np.ndarray, name: str, fitted: int | None) -> IntegerEmbeddings:
        width = packed.shape[1]
        if self.dim is not None and fitted is not None and self.dim != fitted:
            raise ValueError(f"input_dim={self.dim}, but this compressor was fitted on dimension {fitted}")
        dim = self.dim or fitted or 8 * width
        if (dim + 7) // 8 != width:
            fitted_on = f"this compressor's dimension {dim}" if self.dim is None else f"input_dim={dim}"
            raise ValueError(f"{name} holds {width} bytes per row (up to {8 * width} bits), but {fitted_on} packs into "
                             f"{(dim + 7) // 8} bytes")
        padding = 8 * width - dim
        if padding and bool((packed[:, -1] & np.uint8((1 << padding) - 1)).any()):
            row = int(np.flatnonzero(packed[:, -1] & np.uint8((1 << padding) - 1))[0])
            raise ValueError(f"{name} has bits set past dimension {dim} (first at row {row}): the last {padding} bits of "
                             "each row are padding and must be 0 (as np.packbits leaves them); check input_dim")
        return IntegerEmbeddings("ubinary", packed, dim)


@dataclass
class ReadRows:
    """Embeddings read once (``InputSpec.read_rows``): ``given``, the integers of integer input (None for float input),
    and the float32 rows a method computes with, validated on first use (``floats``), never for a method that keeps
    the integers as its codes. ``fit`` and ``encode`` take one in place of an array, and read nothing again."""

    source: Any
    given: IntegerEmbeddings | None
    name: str = "embeddings"
    _floats: torch.Tensor | None = field(default=None, repr=False)

    def rows(self) -> Any:
        """The float rows before validation: float input as given, integer input dequantised."""
        return self.source if self.given is None else torch.from_numpy(self.given.to_float())

    def floats(self, dim: int | None = None) -> torch.Tensor:
        """The validated float32 (n, d) CPU rows (``as_matrix``, once), of dimension ``dim`` when given."""
        if self._floats is None:
            self._floats = as_matrix(self.rows(), name=self.name, dim=dim)
        elif dim is not None:
            check_dim(self._floats.shape[1], dim, self.name)
        return self._floats


def scale_offset_from_ranges(ranges: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(input_scale, input_offset)`` for int8 values from sentence-transformers' ``quantize_embeddings``.

    ``ranges``: the (2, d) per-dimension minimum and maximum it quantised with (its ``ranges`` argument, or
    ``np.vstack([calib.min(0), calib.max(0)])`` of its ``calibration_embeddings``). Version 6.2 (checked by the
    tests; older releases truncated toward zero instead of flooring) stores
    ``value = clip(floor((x - min) / step), 0, 255) - 128`` with ``step = (max - min) / 255`` (1 where max = min),
    so a value stands for the bucket ``[min + (value + 128) * step, min + (value + 129) * step)``; this returns
    ``scale = step`` and ``offset = min + 128.5 * step``, the bucket's centre (in a constant dimension, max = min,
    every value is -128 and ``offset = min + 128`` maps it back to exactly min). (sentence-transformers' own
    rescoring uses the bucket's lower edge, ``offset = min + 128 * step``: the same ranking for dot products of
    float queries, but not the same point for methods that encode directions.) With this scale and offset the
    ``int8`` method quantises float queries to the values sentence-transformers gives them, up to one step where
    float32 rounding lands a value on the other side of a bucket edge (0.02 % of the shipped dataset's query
    values) and for -128, which it clamps to -127.
    """
    ranges = np.asarray(ranges, dtype=np.float64)
    if ranges.ndim != 2 or ranges.shape[0] != 2 or ranges.shape[1] == 0 or not np.isfinite(ranges).all():
        raise ValueError(f"ranges must be a finite (2, d) array of per-dimension minimum and maximum; got shape "
                         f"{ranges.shape}")
    low = ranges[0].astype(np.float32)
    step = (ranges[1].astype(np.float32) - low) / np.float32(255)
    if not bool((step >= 0).all()):
        raise ValueError("ranges must have the minimum (row 0) at most the maximum (row 1) in every dimension")
    constant = step == 0  # every value is -128 and stands for exactly the minimum
    step = np.where(constant, np.float32(1), step).astype(np.float32)
    centre = np.where(constant, np.float32(128), np.float32(128.5)).astype(np.float32)
    return step, (low + centre * step).astype(np.float32)


_DTYPES = {"int8": np.dtype(np.int8), "ubinary": np.dtype(np.uint8)}


def _wanted(kind: str) -> str:
    return "an int8 array (n, d)" if kind == "int8" else "sign bits packed 8 per byte, a uint8 array (n, ceil(d / 8))"


def _dtype_hint(kind: str, dtype: np.dtype) -> str:
    if dtype.kind == "f":
        return "; float embeddings need no input_kind (it defaults to 'float')"
    if kind == "int8" and dtype == np.uint8:
        return ("; uint8 arrays are read as packed sign bits (input_kind='ubinary'); uint8 scalar codes (0..255) "
                "become int8 as (x.astype(np.int16) - 128).astype(np.int8), with input_offset raised by 128 * scale")
    if kind == "ubinary" and dtype == np.int8:
        return ("; int8 arrays are read as values (input_kind='int8'); sentence-transformers' precision='binary' "
                "(packed bits minus 128, int8) becomes ubinary as (x.astype(np.int16) + 128).astype(np.uint8)")
    return ""


def _is_integer(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "iu"
    if isinstance(x, torch.Tensor):
        return not x.dtype.is_floating_point and not x.dtype.is_complex and x.dtype != torch.bool
    return False


def _per_dim(value: Any, d: int, name: str, *, default: float) -> np.ndarray:
    """A number or a length-``d`` array as a finite float32 (d,) array."""
    if value is None:
        return np.full(d, default, dtype=np.float32)
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number or an array of {d} numbers; got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} must be finite; got {value!r}")
        return np.full(d, float(value), dtype=np.float32)
    array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a number or a numpy array / torch tensor of {d} numbers; got "
                        f"{getattr(array, 'dtype', type(value).__name__)}")
    if array.shape != (d,):
        raise ValueError(f"{name} must be a number or have shape ({d},), one per dimension; got shape {array.shape}")
    out = array.astype(np.float32)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} must be finite in float32; dimension {int(np.flatnonzero(~np.isfinite(out))[0])} is not")
    return out
