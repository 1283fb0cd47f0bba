"""A composition's stages: what each prepared code width holds, and its form in the file.

A stage is the transform applied to the projected rows (a rotation, a rotation and the 2-bit lift of
``adaptemb.compose.levels`` or the 3-bit lift of ``adaptemb.compose.planes``, or nothing) and the quantiser fitted
after it. Stages are keyed by code width: the projection rank at 1 bit per dimension, twice the rank at 2, three
times at 3. In the file: ``ranks`` (the widths, ascending), ``two_bit_widths`` and ``three_bit_widths`` (only where
some stage keeps 2 or 3 bits), and per width ``rank{w}.quantizer.*`` and the transform's tensors under ``rank{w}.``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from adaptemb.compose.levels import SignMagnitude
from adaptemb.compose.planes import SignAdditiveMagnitude
from adaptemb.compose.rotation import Rotation
from adaptemb.method import Compressor
from adaptemb.serialization import split_prefix

Transform = Rotation | SignMagnitude | SignAdditiveMagnitude | None
"""What a stage applies to the projected rows before its quantiser: a rotation, a rotation and the 2- or 3-bit lift,
or nothing."""
Stage = tuple[Transform, Compressor]


def transformed_documents(transform: Transform, y: torch.Tensor) -> torch.Tensor:
    """Projected document rows through a stage's transform."""
    return y if transform is None else transform.documents(y)


def bits_of(transform: Transform) -> int:
    """Bits per dimension of a stage: 2 or 3 for a lift, else 1."""
    return 2 if isinstance(transform, SignMagnitude) else 3 if isinstance(transform, SignAdditiveMagnitude) else 1


def rank_of(width: int, transform: Transform) -> int:
    """The projection rank of the stage of code width ``width`` (a half of it for a 2-bit stage, a third for 3)."""
    return width // bits_of(transform)


def rotation_of(transform: Transform) -> Rotation | None:
    """The stage's rotation (the one inside a 2- or 3-bit lift), or None."""
    return transform.rotation if isinstance(transform, (SignMagnitude, SignAdditiveMagnitude)) else transform


def stage_tensors(stages: dict[int, Stage], lists_unrotated: bool) -> dict[str, torch.Tensor]:
    """The stages' tensors as the file holds them (see the module docstring); with ``lists_unrotated`` (a config
    that may rotate before sign bits) the widths left unrotated (by ``rotation="auto"`` or a query sample) are
    listed in ``unrotated_widths``, so that a width whose rotation is missing is an error, not a guess."""
    state = {"ranks": torch.tensor(sorted(stages), dtype=torch.int64)}
    unrotated = [width for width, (transform, _) in sorted(stages.items())
                 if lists_unrotated and rotation_of(transform) is None]
    if unrotated:  # absent from files before query choices, and from those with none
        state["unrotated_widths"] = torch.tensor(unrotated, dtype=torch.int64)
    two_bit = [width for width, (transform, _) in sorted(stages.items()) if bits_of(transform) == 2]
    if two_bit:  # absent from files before 2-bit stages, and from those with none
        state["two_bit_widths"] = torch.tensor(two_bit, dtype=torch.int64)
    three_bit = [width for width, (transform, _) in sorted(stages.items()) if bits_of(transform) == 3]
    if three_bit:  # absent from files before 3-bit stages, and from those with none
        state["three_bit_widths"] = torch.tensor(three_bit, dtype=torch.int64)
    for width, (transform, quantizer) in stages.items():
        state.update({f"rank{width}.quantizer.{key}": t for key, t in quantizer.state_tensors().items()})
        state.update({f"rank{width}.{key}": t for key, t in (transform.tensors() if transform else {}).items()})
    return state


def stages_from_tensors(tensors: dict[str, torch.Tensor], rotation_kind: Callable[[int], str], lists_unrotated: bool,
                        new_quantizer: Callable[[], Compressor]) -> dict[int, Stage]:
    """The stages ``stage_tensors`` saved; ``rotation_kind(rank)`` is the config's rotation at a rank (where the
    file lists its unrotated widths, every other width holds its rotation: files from before ``rotation="auto"``
    left small ranks unrotated hold their ITQ matrices there).
    ``ValueError`` for widths that are not distinct, ascending and positive, or a 2-bit width that is not one of
    them or is odd, or a 3-bit width that is not one of them or not a multiple of 3."""
    widths = [int(r) for r in tensors["ranks"].tolist()]
    if not widths or widths != sorted(set(widths)) or widths[0] < 1:
        raise ValueError(f"ranks must be distinct ascending positive ranks; got {widths}")
    two_bit = [int(w) for w in tensors["two_bit_widths"].tolist()] if "two_bit_widths" in tensors else []
    if not set(two_bit) <= {w for w in widths if w % 2 == 0}:
        raise ValueError(f"two_bit_widths must be even widths among the ranks {widths}; got {two_bit}")
    three_bit = [int(w) for w in tensors["three_bit_widths"].tolist()] if "three_bit_widths" in tensors else []
    if not set(three_bit) <= {w for w in widths if w % 3 == 0} - set(two_bit):
        raise ValueError(f"three_bit_widths must be multiples of 3 among the ranks {widths}, none a 2-bit width; got {three_bit}")
    unrotated = {int(w) for w in tensors["unrotated_widths"].tolist()} if "unrotated_widths" in tensors else set()
    if not unrotated <= set(widths):
        raise ValueError(f"unrotated_widths must be among the ranks {widths}; got {sorted(unrotated)}")
    stages: dict[int, Stage] = {}
    for width in widths:
        own, bits = split_prefix(tensors, f"rank{width}."), 2 if width in two_bit else 3 if width in three_bit else 1
        rank = width // bits
        kind = rotation_kind(rank)
        chose_none = kind == "pairs" and "center" not in own  # rotation='pairs' chose none at this rank
        # the stored tensors say which rotation (files of rotation='auto' from before Hadamard hold ITQ matrices)
        unrotated_kind = (kind == "none" and not lists_unrotated) or chose_none or width in unrotated
        rotation = None if unrotated_kind else Rotation.from_tensors(own, rank)
        quantizer = new_quantizer()
        quantizer.restore(width, split_prefix(own, "quantizer."))
        transform = (SignMagnitude.from_tensors(own, rank, rotation) if bits == 2 else
                     SignAdditiveMagnitude.from_tensors(own, rank, rotation) if bits == 3 else rotation)
        stages[width] = (transform, quantizer)
    return stages
