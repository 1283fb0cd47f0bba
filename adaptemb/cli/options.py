"""One option vocabulary for every command.

``--compressor/-c`` names a fitted compressor file, ``--backbone`` an encoder model, ``-o/--output`` one
file to write and ``--out`` a folder; boolean options come as ``--flag/--no-flag``; closed choices are the library's Literal types.
Spellings that were replaced keep working for one release: they are hidden from ``--help`` and print a
one-line deprecation note (``deprecated``) when used.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import numpy as np
import typer

from adaptemb.inputs import InputKind
from adaptemb.serialization import existing_file

if TYPE_CHECKING:
    from adaptemb.method import Compressor

_T = TypeVar("_T")


Quantize = Literal["none", "dynamic"]
"""ONNX quantisation of an exported backbone."""


def flag(name: str, help: str, *short: str) -> Any:
    """A boolean option spelt ``--name/--no-name`` (no ``<bool>`` value is shown: none is taken)."""
    return typer.Option(f"--{name}/--no-{name}", *short, help=help, metavar="")


def deprecated_option(*spellings: str, replacement: str) -> Any:
    """A hidden option that still accepts an old spelling for one release."""
    return typer.Option(*spellings, hidden=True, help=f"Deprecated: use {replacement}.")


def deprecated(old: str, new: str) -> None:
    """Print the one-line deprecation note for an old spelling that was used."""
    print(f"note: {old} is deprecated and will be removed in the next release; use {new}", file=sys.stderr)


def chosen(value: _T | None, old_value: _T | None, *, new: str, old: str, required: bool = True) -> _T | None:
    """The value of an option that has a deprecated spelling: the new one, else the old one (with a note);
    both given is an error, neither given is one when ``required``."""
    if value is not None and old_value is not None:
        raise ValueError(f"{old} is the deprecated spelling of {new}: give only {new}")
    if old_value is not None:
        deprecated(old, new)
        return old_value
    if value is None and required:
        raise ValueError(f"missing option {new}")
    return value


CompressorOption = Annotated[
    Path | None, typer.Option("--compressor", "-c", help="A fitted compressor file from `adaptemb fit`.")
]
OldCompressorOption = Annotated[Path | None, deprecated_option("--model", replacement="--compressor/-c")]
BackboneOption = Annotated[str | None, typer.Option(
    "--backbone", help="Encoder model: a sentence-transformers or transformers folder (default: the bundled "
    "all-MiniLM-L6-v2), efficientnet-lite0, timm:NAME, open_clip:NAME (with --weights) or a saved timm folder.")]
OldBackboneOption = Annotated[str | None, deprecated_option("--model", replacement="--backbone")]
TextBackboneOption = Annotated[str | None, typer.Option(
    "--backbone", help="Text model that embeds text data (a BEIR folder or a .jsonl file of texts): a "
    "sentence-transformers or transformers folder (default: the bundled all-MiniLM-L6-v2).")]
InputOption = Annotated[Path, typer.Option(
    "--input", "-i", help="Embeddings: .npy, .npz, .safetensors, .parquet, .fvecs, .bvecs or .ivecs.")]
KeyOption = Annotated[
    str | None, typer.Option("--key", help="Array name in an .npz/.safetensors file, or vector column of a .parquet.")
]
BudgetOption = Annotated[int | None, typer.Option(
    "--k", "-k", help="Budget: active dims per code (default: the method's).")]
BytesOption = Annotated[int | None, typer.Option(
    "--bytes", "-b", min=1, help="Byte budget instead of -k: the largest budget k whose codes take at most this many "
    "bytes per vector (what encode(x, bytes=B) picks).")]
ByteBudgetsOption = Annotated[str | None, typer.Option(
    "--bytes", help="Bytes per vector to fit for, one number or a comma list (e.g. 10,16,32), for methods fitted for "
    "byte budgets (csr, compositions such as svd+binary); then encode with -b/--bytes.")]
InputKindOption = Annotated[InputKind, typer.Option(
    "--input-kind", help="What the input values are: float embeddings, or int8 / ubinary (sign bits packed 8 per "
    "byte) embeddings as providers return them; never guessed from the dtype (guide: 'Integer embeddings').")]
InputScaleOption = Annotated[str | None, typer.Option(
    "--input-scale", help="--input-kind int8: x = offset + scale * value; a number or an .npy of d scales (default 1).")]
InputOffsetOption = Annotated[str | None, typer.Option(
    "--input-offset", help="--input-kind int8: the offset, a number or an .npy of d offsets (default 0).")]
InputDimOption = Annotated[int | None, typer.Option(
    "--input-dim", min=1, help="--input-kind ubinary: the true dimension when it is not 8 x the bytes per row.")]


def parse_ints(text: str, what: str) -> list[int]:
    """``"16,64"`` → ``[16, 64]``; a clear error for anything else."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{what} must be a comma-separated list of integers, e.g. 16,64; got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{what} must list positive integers; got {text!r}")
    return values


def check_one_budget(k: int | None, nbytes: int | None) -> None:
    """``-k`` and ``-b`` both choose the budget: giving both is an error."""
    if k is not None and nbytes is not None:
        raise ValueError(f"give -k/--k (the method's budget) or -b/--bytes (bytes per vector, which picks k), not "
                         f"both; got -k {k} and -b {nbytes}")


def budget_within(compressor: Compressor, k: int | None, nbytes: int | None) -> int | None:
    """The budget ``-k`` / ``-b`` choose: ``k``, or the one ``compressor.encode(x, bytes=nbytes)`` uses (resolved
    once, by the same path)."""
    check_one_budget(k, nbytes)
    return k if nbytes is None else compressor.budget_within_bytes(nbytes)


def number_or_array(text: str | None, option: str) -> float | np.ndarray | None:
    """An ``--input-scale`` / ``--input-offset`` value: a number, or an .npy file of one value per dimension."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    path = Path(text)
    if path.suffix.lower() != ".npy":
        raise ValueError(f"{option} must be a number or an .npy file of one value per dimension; got {text!r}")
    return np.load(existing_file(path), allow_pickle=False)


def input_options(kind: InputKind, scale: str | None, offset: str | None, dim: int | None) -> dict[str, Any]:
    """The ``input_kind`` keyword arguments of ``fit`` / ``encode`` from the command-line options (only those given,
    so a float run passes none and the library checks the combination)."""
    options: dict[str, Any] = {"input_kind": kind}
    for name, value in (("input_scale", number_or_array(scale, "--input-scale")),
                        ("input_offset", number_or_array(offset, "--input-offset")), ("input_dim", dim)):
        if value is not None:
            options[name] = value
    return options
