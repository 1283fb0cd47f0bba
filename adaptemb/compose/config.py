"""A composition's configuration: its own settings, and each part's own pydantic config, nested.

``get_compressor("cllr+binary", projection=dict(rank=128), quantizer=dict(threshold="zero"))`` is the nested form.
The flat form ``get_compressor("cllr+binary", rank=128)`` routes a name the composition itself does not have to
the one part whose config has it; a name both parts have must be nested, a name neither has is an
``InvalidConfigError``. The composition's ``seed`` is every part's seed unless the part's own config sets one.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic import Field

from adaptemb.budgets import ByteBudgets
from adaptemb.compose.rotation import (
    DEFAULT_ITQ_ITERATIONS,
    ITQ_MAX_RANK,
    LEADING_UNROTATED,
    NO_ROTATION_MAX_RANK,
)
from adaptemb.config import CompressorConfig, config_error_message
from adaptemb.errors import InvalidConfigError, did_you_mean

PARTS = ("projection", "quantizer")
ROTATIONS = ("auto", "random", "itq", "itq-tail", "hadamard", "none", "pairs")


class ComposedConfig(CompressorConfig):
    """Settings of the composition itself; ``composed_config`` adds the two parts' configs."""

    k: int | None = Field(None, ge=1, description="Projection rank encode() uses by default (a rank the fit prepared); "
                          "None: the largest prepared rank.")
    byte_budgets: ByteBudgets = Field(
        None, description="Bytes per vector the fit prepares a projection rank for (the largest rank whose codes fit "
        "each); None: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... up to the code of the full rank, which is always prepared.")
    rotation: Literal["auto", "random", "itq", "itq-tail", "hadamard", "none", "pairs"] = Field(
        "auto", description="Orthogonal rotation of the centred projected rows before the quantiser: a seeded random "
        "matrix, ITQ (learned, from the random one), a randomized Hadamard transform (seeded; r signs per round "
        "stored, O(r log r) per row) or none; itq-tail: the leading itq_tail_unrotated directions (at most a quarter of the rank) unrotated, ITQ on the rest; "
        f"auto: before sign-bit quantisers (binary) none up to rank {NO_ROTATION_MAX_RANK}, itq-tail up to rank "
        f"{ITQ_MAX_RANK} and Hadamard above (a query sample does not judge it), else none; "
        "pairs: per rank, whichever of random, itq and none (above that rank hadamard and none) ranks the fit pairs' documents best (MRR of the float "
        "pair queries among the fit rows' codes); needs pairs, and parts that learn nothing from them.")
    bits_per_dim: Literal["auto", 1, 2] = Field(
        "auto", description="Bits per rotated dimension before a sign-bit quantiser (binary): 1 (its sign); 2 (sign "
        "and magnitude, Lloyd-Max levels, coded as two sign planes: the code of width w holds rank w / 2); auto: 1 bit "
        "up to the full rank, 2 bits on a larger rank past it, and 3 bits (sign and two additive magnitude planes) "
        "past twice the full rank, e.g. 128 B of 384-d rows (1 bit measured better wherever the rank allows it, "
        "docs/results.md; a query sample, fit(x, queries=...), is measured but does not choose). Stages past the full "
        "rank score the float query uncentred after svd. Other quantisers: 1 (auto means 1).")
    itq_iterations: int = Field(DEFAULT_ITQ_ITERATIONS, ge=1, description="ITQ's alternations of signs and rotation (at most: it stops when no sign changes).")
    itq_tail_unrotated: int = Field(
        LEADING_UNROTATED, ge=0, description="itq-tail (rotation='itq-tail', and auto's choice above rank "
        f"{NO_ROTATION_MAX_RANK}): the leading projected directions kept unrotated (at most a quarter of the rank); "
        "0 is ITQ. More rank relevant documents better on the 768-d stand-in and find less of the float top-10 "
        "(benchmarks/rotation_head_tradeoff.py).")
    float_queries: bool = Field(
        True, description="Score the float query (through projection and rotation) against the quantised documents "
        "where the quantiser or an index backend can; False: queries are quantised like documents.")


def queries_choose(config: ComposedConfig) -> bool:
    """True when a composition takes a sample of queries (``fit(x, queries=...)``) under ``config``: with
    ``bits_per_dim="auto"``, unless ``rotation="pairs"`` chooses by the pairs. The sample is measured (each width's
    recall of its float top-10, in the fit report) but no longer changes the stages: ``adaptemb.compose.query_choice``
    says why."""
    return config.rotation != "pairs" and config.bits_per_dim == "auto"


def composed_config(name: str, projection: type[CompressorConfig],
                    quantizer: type[CompressorConfig]) -> type[ComposedConfig]:
    """The config class of one composition: ``ComposedConfig`` with the parts' configs as ``projection`` and
    ``quantizer`` (their defaults by default)."""
    title = "".join(part.capitalize() for part in name.split("+"))
    return pydantic.create_model(  # type: ignore[call-overload, no-any-return]
        f"{title}Config", __base__=ComposedConfig,
        projection=(projection, Field(default_factory=projection, description=f"The projection's {projection.__name__}.")),
        quantizer=(quantizer, Field(default_factory=quantizer, description=f"The quantiser's {quantizer.__name__}.")))


def make_composed_config(composed: Any, params: dict[str, Any]) -> ComposedConfig:
    """Validate ``params`` (nested or flat, see the module docstring) into ``composed.Config``; every error is an
    ``InvalidConfigError`` naming the composition, the part and the parameter."""
    parts = {"projection": composed.Projection, "quantizer": composed.Quantizer}
    own_names = set(composed.Config.model_fields) - set(PARTS)
    own = {key: value for key, value in params.items() if key in own_names}
    given = {part: _part_params(composed.name, part, params.get(part, {})) for part in PARTS}
    for key, value in params.items():
        if key not in own_names and key not in PARTS:
            part = _home(composed, key, parts, own_names)
            if key in given[part]:
                raise InvalidConfigError(f"{composed.name}: {key!r} is given twice, flat and in {part}=dict(...)",
                                         parameter=key, value=value)
            given[part][key] = value
    configs = {}
    for part, cls in parts.items():
        settings = {"seed": own.get("seed", 0), **given[part]}
        try:
            configs[part] = cls.make_config(**settings)
        except InvalidConfigError as err:
            raise InvalidConfigError(f"{composed.name}, its {part} {cls.name}: {err}", parameter=part if err.parameter is None else f"{part}.{err.parameter}",
                                     value=err.value, valid=err.valid) from None
    try:
        return composed.Config(**own, **configs)  # type: ignore[no-any-return]
    except pydantic.ValidationError as err:
        raise InvalidConfigError(config_error_message(composed.name, composed.Config, err)) from None


def _part_params(name: str, part: str, value: Any) -> dict[str, Any]:
    """A part's nested parameters as a dict (a dict, or a config object of that part)."""
    if isinstance(value, CompressorConfig):
        return dict(value)
    if not isinstance(value, dict):
        raise InvalidConfigError(f"{name}: {part} must be a dict of the {part}'s parameters or its config object; "
                                 f"got {type(value).__name__}", parameter=part, value=value)
    return dict(value)


def _home(composed: Any, key: str, parts: dict[str, Any], own_names: set[str]) -> str:
    """The part a flat parameter belongs to: the one whose config has it."""
    homes = [part for part, cls in parts.items() if key in cls.Config.model_fields]
    if len(homes) == 1:
        return homes[0]
    projection, quantizer = parts["projection"].name, parts["quantizer"].name
    if homes:
        raise InvalidConfigError(f"{composed.name}: both the projection {projection} and the quantizer {quantizer} have "
                                 f"{key!r}; pass it nested, projection=dict({key}=...) or quantizer=dict({key}=...)",
                                 parameter=key)
    known = own_names | {n for cls in parts.values() for n in cls.Config.model_fields}
    valid = "; ".join([f"{composed.name}: {', '.join(sorted(own_names))}"] + [
        f"{part} {cls.name}: {', '.join(sorted(set(cls.Config.model_fields) - {'seed'}))}" for part, cls in parts.items()])
    raise InvalidConfigError(f"invalid parameters for {composed.name}: unknown parameter {key!r}{did_you_mean(key, known)}: "
                             f"neither the composition nor its projection {projection} or quantizer {quantizer} has it. "
                             f"Valid: {valid}", parameter=key, valid=valid)


def part_settings(config: CompressorConfig) -> dict[str, Any]:
    """A part's settings as compared when a composition shares its fit: everything but how it shows progress."""
    return config.model_dump(exclude={"progress"})
