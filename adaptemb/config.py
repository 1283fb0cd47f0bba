"""``CompressorConfig``, the base of every method's configuration, and the message for parameters it refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic

from adaptemb.errors import did_you_mean


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
