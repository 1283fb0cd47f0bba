"""Exceptions raised by adaptemb. Each subclasses the built-in a caller would expect to catch."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class AdaptembError(Exception):
    """Base class for errors specific to adaptemb."""


class UnknownCompressorError(AdaptembError, KeyError, ValueError):
    """A method name that no registered plugin provides."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(name)

    def __str__(self) -> str:
        hint = did_you_mean(self.name, self.available)
        listing = ", ".join(self.available) if self.available else "none (no plugin is loaded)"
        return f"unknown compressor {self.name!r}{hint}; available: {listing}"


class UnknownCompositionError(UnknownCompressorError):
    """A ``"projection+quantizer"`` name whose parts are not a registered projection and quantiser."""

    def __init__(self, name: str, problem: str, projections: Iterable[str], quantizers: Iterable[str]) -> None:
        self.problem, self.projections, self.quantizers = problem, sorted(projections), sorted(quantizers)
        super().__init__(name, [f"{p}+{q}" for p in self.projections for q in self.quantizers])

    def __str__(self) -> str:
        return (f"unknown compressor {self.name!r}: {self.problem}. A composed method is 'projection+quantizer'; "
                f"projections: {', '.join(self.projections) or 'none'}; quantizers: {', '.join(self.quantizers) or 'none'}")


class DuplicateCompressorError(AdaptembError, ValueError):
    """Two plugins registered the same method name."""


class DuplicateIndexError(AdaptembError, ValueError):
    """Two plugins registered an index backend under one name or for one (query, document) kind pair."""


class InvalidConfigError(AdaptembError, ValueError):
    """A parameter a method does not have, or a value outside its bounds (a budget ``k`` included).

    The message names the parameter, the value given and what is valid; ``parameter``, ``value`` and
    ``valid`` hold them too where the raiser knows them (None otherwise)."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None,
                 valid: str | None = None) -> None:
        super().__init__(message)
        self.parameter, self.value, self.valid = parameter, value, valid


class InvalidConfigTypeError(InvalidConfigError, TypeError):
    """An ``InvalidConfigError`` for a value of the wrong type where callers have caught ``TypeError``
    (a budget ``k=True`` or ``k="4"`` given to ``encode``)."""


class NotFittedError(AdaptembError, RuntimeError):
    """A compressor was used before fit()."""


class CorruptFileError(AdaptembError, ValueError):
    """A file that is not what adaptemb wrote, or was damaged."""


class UnsupportedExportError(AdaptembError, NotImplementedError):
    """An export that cannot be made: an ONNX export of a method or model that declares no encoder
    (``exportable`` is False), or a form a code kind does not have (``Codes.vector_rows``, ``row_columns``)."""


class AdaptembWarning(UserWarning):
    """A warning adaptemb itself issues (the command line prints these as one ``warning:`` line)."""


class ZeroRowsWarning(AdaptembWarning):
    """A fit left out all-zero rows (and pairs holding one): the method encodes each row's direction
    (``normalizes_rows``) and a zero row has none. Issued once per fit, with the count; the fit report's
    ``zero_rows_skipped`` (and ``zero_pairs_skipped``) hold the numbers. Such rows still encode, to the empty
    code of the method's kind."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return " (did you mean 'x'?)" for the closest choice (compared case-insensitively), or "" when none is close."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""
