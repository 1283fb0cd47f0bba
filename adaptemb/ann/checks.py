"""Refusing codes another compressor wrote: the documents of an approximate index and the codes of its rerank store
must be the index's compressor's own."""

from __future__ import annotations

from typing import Any

import numpy as np

from adaptemb.codes import Codes
from adaptemb.errors import InvalidConfigError


def check_own_codes(compressor: Any, codes: Codes, budget: int | None, what: str) -> None:
    """One clear error when ``codes`` cannot be ``compressor``'s: another kind than the one it encodes, or codes its
    queries (one probe query encoded at ``budget``) cannot be scored against (another width, another space)."""
    kind = getattr(compressor, "doc_kind", None)
    if isinstance(kind, str) and codes.kind != kind:
        raise InvalidConfigError(f"{what} are {codes.kind} codes of dim {codes.dim}, but {compressor.name} encodes "
                                 f"{kind} codes: pass codes from this compressor's encode()")
    probe = np.random.default_rng(0).standard_normal((1, compressor.dim)).astype(np.float32)
    probe /= np.linalg.norm(probe)
    try:
        scores = np.asarray(compressor.score(compressor.encode_queries(probe, k=budget), codes[:1]))
    except (ValueError, TypeError, RuntimeError, IndexError) as err:
        raise InvalidConfigError(f"{what} ({codes.kind} codes of dim {codes.dim}) are not {compressor.name}'s: its "
                                 f"queries cannot be scored against them ({err}); pass codes from this compressor's "
                                 "encode()") from None
    if scores.shape != (1, 1):
        raise InvalidConfigError(f"{what} ({codes.kind} codes of dim {codes.dim}) are not {compressor.name}'s: one "
                                 f"query against one code scored {scores.shape}")
