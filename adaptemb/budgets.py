"""Budgets: what ``k`` a fitted compressor encodes at, and the search from a byte budget to a ``k``.

``Budgets`` says which ``k`` are valid and resolves a requested one (with errors that name the valid ones);
``largest_budget_within`` finds the largest ``k`` whose codes fit a number of bytes per vector, the search
``Compressor.budget_for_bytes`` (what ``adaptemb bench --bytes`` maps byte budgets through) delegates to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
import pydantic

from adaptemb.errors import InvalidConfigError, InvalidConfigTypeError
from adaptemb.validation import check_budget


def byte_budget_tuple(value: Any) -> tuple[int, ...] | None:
    """A config's ``byte_budgets`` as given (one number, or a list or tuple of them) as a tuple of whole bytes, each
    >= 1; None stays None; anything else is refused, saying what is valid."""
    if value is None:
        return None
    items = (value,) if isinstance(value, (int, float)) else tuple(value)
    if not items or any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in items):
        raise ValueError(f"byte_budgets must be whole numbers of bytes >= 1 (e.g. 16 or [10, 16, 32]); got {value!r}")
    return tuple(int(b) for b in items)


ByteBudgets = Annotated[tuple[int, ...] | None, pydantic.BeforeValidator(byte_budget_tuple)]
"""The type of a config's ``byte_budgets`` (the budgets ``fit(..., bytes=...)`` passes)."""


@dataclass(frozen=True)
class Budgets:
    """The budgets ``k`` (active dims per code) a fitted compressor can encode at.

    ``values``: where only some ``k`` in ``low..high`` are valid (e.g. 4-, 6- and 8-bit scalar
    quantisation), exactly those; None means every integer in the range. ``bounds_active``: whether ``k``
    bounds the active dims of a code (False where it counts something else: bits per dimension,
    sub-quantisers). ``per_fit``: the budget is fixed when fitting (the config's ``k``); encoding at
    another ``k`` needs another fit (``adaptemb bench`` refits such a method per budget).
    """

    low: int
    high: int
    default: int
    values: tuple[int, ...] | None = None
    bounds_active: bool = True
    per_fit: bool = False

    @classmethod
    def unbudgeted(cls, dim: int) -> Budgets:
        """The budgets of a method without one: it always keeps all ``dim`` dims."""
        return cls(low=dim, high=dim, default=dim)

    @property
    def fixed(self) -> bool:
        """True for methods without a budget: they always keep ``high`` dims."""
        return self.low == self.high

    def describe(self) -> str:
        """One line for people: ``k=1..384 (default 384)``, ``k=4, 6, 8 (default 8)`` or ``k=32 (this fit only)``."""
        if self.per_fit and self.fixed:
            return f"k={self.high} (this fit only; another k needs another fit)"
        valid = ", ".join(map(str, self.values)) if self.values is not None else f"{self.low}..{self.high}"
        return f"k={valid} (default {self.default})"

    def options(self) -> list[int]:
        """Every valid budget, ascending."""
        return list(self.values) if self.values is not None else list(range(self.low, self.high + 1))

    def allows(self, k: int) -> bool:
        """True when ``k`` is a valid budget."""
        return self.low <= k <= self.high and (self.values is None or k in self.values)

    def resolve(self, k: int | None, method: str) -> int:
        """Return the budget to use for a requested ``k`` (``None`` means the default); ``InvalidConfigError``
        naming ``k``, the value and the valid budgets otherwise (also a ``TypeError`` for a non-integer)."""
        if k is None:
            return self.default
        is_int = isinstance(k, (int, np.integer)) and not isinstance(k, bool)
        bad = functools.partial(InvalidConfigError, parameter="k", value=k, valid=self.describe())
        if self.fixed and is_int and k != self.high and self.per_fit:
            raise bad(f"this {method} was fitted for k={self.high} only; got k={k!r}: fit another {method} "
                      f"with k={k!r} to encode at that budget")
        if self.fixed and is_int and k != self.high:
            raise bad(f"{method} has no budget: it always keeps all {self.high} dims; "
                      f"pass k=None (or k={self.high}), got k={k!r}")
        try:
            budget = check_budget(k, low=self.low, high=self.high, method=method)
        except TypeError as err:
            raise InvalidConfigTypeError(str(err), parameter="k", value=k, valid=self.describe()) from None
        except ValueError as err:
            raise bad(str(err)) from None
        if self.values is not None and budget not in self.values:
            raise bad(f"k={budget} is not a budget of {method}: valid budgets are "
                      f"{', '.join(str(v) for v in self.values)}")
        return budget


def largest_budget_within(nbytes: float, options: Sequence[int], size: Callable[[int], float]) -> int | None:
    """The largest of ``options`` (ascending) whose ``size(k)`` (bytes per vector) is at most ``nbytes``, or None
    when even the smallest takes more. Assumes size grows with ``k``: a binary search, ``size`` called about
    log2(len(options)) + 1 times."""
    if size(options[0]) > nbytes:
        return None
    low, high = 0, len(options) - 1  # options[low] fits; find the last option that fits
    while low < high:
        middle = (low + high + 1) // 2
        if size(options[middle]) <= nbytes:
            low = middle
        else:
            high = middle - 1
    return options[low]
