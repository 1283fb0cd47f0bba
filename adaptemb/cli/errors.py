"""Turning expected failures into one-line messages and exit code 2 (no traceback)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from adaptemb.errors import AdaptembError

_F = TypeVar("_F", bound=Callable[..., Any])
USER_ERRORS = (AdaptembError, ValueError, TypeError, KeyError, FileNotFoundError, IsADirectoryError, ModuleNotFoundError)


def friendly_errors(command: _F) -> _F:
    """Run a CLI command; a user error prints ``error: <message>`` to stderr and exits with 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as err:
            message = str(err.args[0]) if isinstance(err, KeyError) and not isinstance(err, AdaptembError) else str(err)
            print(f"error: {message}", file=sys.stderr)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]
