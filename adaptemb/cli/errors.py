"""Turning every failure into one ``error:`` line and exit code 2 (the traceback only with ``--debug``)."""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from adaptemb.errors import AdaptembError, AdaptembWarning

_F = TypeVar("_F", bound=Callable[..., Any])
USER_ERRORS = (AdaptembError, ValueError, TypeError, KeyError, OSError, ModuleNotFoundError)
"""Errors that describe the user's input or machine (bad value, missing file, full disk, no permission)."""
_CLI_CONTROL = (typer.Exit, typer.Abort, typer.TyperException)
"""typer's own control flow (an exit, Ctrl-C, a usage error): passed on for typer to handle."""

_debug = False
_PYTHON_SHOWWARNING = warnings.showwarning


def set_debug(enabled: bool) -> None:
    """Show full tracebacks instead of one ``error:`` line (``adaptemb --debug`` or ``ADAPTEMB_DEBUG=1``);
    set on every invocation, so it does not outlive one command."""
    global _debug
    _debug = enabled or os.environ.get("ADAPTEMB_DEBUG", "") not in ("", "0")


def error_message(err: BaseException) -> str:
    """The one line a user sees for ``err``."""
    if isinstance(err, KeyError) and not isinstance(err, AdaptembError) and err.args:
        return str(err.args[0])
    if isinstance(err, OSError) and err.strerror and not isinstance(err, ModuleNotFoundError):
        where = f": {err.filename}" if err.filename else ""
        return f"{err.strerror}{where}"
    if isinstance(err, USER_ERRORS):
        return str(err)
    return f"unexpected {type(err).__name__}: {err} (rerun with --debug for the traceback, and report it)"


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """adaptemb's own warnings as one ``warning:`` line (where in the library it came from is of no use on the
    command line); any other as Python shows it."""
    if issubclass(category, AdaptembWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


def friendly_errors(command: _F) -> _F:
    """Run a CLI command; any failure prints ``error: <message>`` to stderr and exits with 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return command(*args, **kwargs)
        except _CLI_CONTROL:
            raise
        except Exception as err:
            if _debug:
                raise
            print(f"error: {error_message(err)}", file=sys.stderr)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]
