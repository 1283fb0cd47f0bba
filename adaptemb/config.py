"""``CompressorConfig``, the base of every method's configuration, the message for parameters it refuses, and
``parse_params``, which reads parameters written as text (``-p k=64`` on the command line, a benchmark's flags)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pydantic

from adaptemb.errors import InvalidConfigError, did_you_mean


class CompressorConfig(pydantic.BaseModel):
    """Base of every method's configuration. Unknown fields are errors, values are bounded, and types
    are strict: ``k=True``, ``k=32.0`` or ``k="32"`` are refused rather than read as an integer."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True)

    seed: int = pydantic.Field(0, ge=0, description="Random seed; equal seeds give identical codes.")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _numpy_scalars_as_python(cls, data: Any) -> Any:
        """numpy scalars (``np.int64(32)`` from an array) count as the Python number they hold."""
        if isinstance(data, dict):
            return {key: value.item() if isinstance(value, np.generic) else value for key, value in data.items()}
        return data


def config_error_message(method: str, config: type[CompressorConfig], err: pydantic.ValidationError) -> str:
    """What ``method`` says when ``config`` refuses parameters: each problem (an unknown name with its closest
    valid one), then every valid parameter with its default."""
    valid = ", ".join(f"{name}={field.default!r}" for name, field in config.model_fields.items())
    problems = []
    for item in err.errors():
        field = ".".join(str(p) for p in item["loc"]) or "config"
        if item["type"] == "extra_forbidden":
            problems.append(f"unknown parameter {field!r}{did_you_mean(field, config.model_fields)}")
        else:
            problems.append(f"{field}: {item['msg']} (got {item.get('input')!r})")
    return f"invalid parameters for {method}: {'; '.join(problems)}. Valid parameters (defaults): {valid}"


def parse_params(items: Iterable[str]) -> dict[str, Any]:
    """``["k=64", "values=int8", "prefixes=[16,32]"]`` -> ``{"k": 64, "values": "int8", "prefixes": [16, 32]}``:
    each value is read as JSON when it parses, else kept as text. An item without ``NAME=`` is an
    ``InvalidConfigError``."""
    params: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise InvalidConfigError(f"parameter {item!r} must look like NAME=VALUE, e.g. k=64", parameter=name.strip() or None,
                                     value=item, valid="NAME=VALUE")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        params[name.strip()] = value
    return params
