"""The engines' own indexes over exported codes: which Milvus index type or Qdrant index fits the vector type a kind
is stored as, with the engine's knobs (build parameters at export, search parameters at search) and their defaults.

The fit follows what the codes' kind declares, never its name: a kind with ``sparse_vectors`` is stored as a sparse
vector (Milvus ``SPARSE_FLOAT_VECTOR``, Qdrant sparse vector), one whose ``vector_quantization`` is ``"sign_bits"`` as
packed bits on a Milvus server (``BINARY_VECTOR``) and as ±1 floats elsewhere, and every other dense form as floats.
``EngineIndex(type=..., build={...})`` (or just the type's name, or ``"approximate"``: the engine's approximate index
for that vector type) is passed to ``export_codes(..., index=...)``; ``search_params={...}`` to ``search_milvus`` /
``search_qdrant`` overrides the type's search defaults. Unknown types, knobs, and a type that does not fit the
codes' vector type are refused with the ones that fit.

What the local modes do, found by trying (Milvus Lite 3.2.2, qdrant-client 1.20 local mode): Milvus Lite builds
``FLAT``, ``IVF_FLAT``, ``HNSW`` and ``IVF_SQ8`` (through faiss) and takes ``SPARSE_INVERTED_INDEX`` but scores
sparse fields exactly (it refuses a ``drop_ratio_search`` other than 0); it holds no ``BINARY_VECTOR`` (so no
``BIN_*`` index) and refuses ``SPARSE_WAND``; it accepts an ``IVF_RABITQ`` request but fails to build it and searches every row, so
adaptemb refuses those types there with the server they need. Qdrant's local mode stores the HNSW and quantisation
settings (``get_collection`` reports them) but searches every point exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from adaptemb.codes import Codes

SPARSE_FIELD, BITS_FIELD, FLOAT_FIELD = "SPARSE_FLOAT_VECTOR", "BINARY_VECTOR", "FLOAT_VECTOR"
"""The Milvus vector types codes are stored as."""
QDRANT_SPARSE, QDRANT_DENSE = "sparse vector", "dense vector"
"""The Qdrant vector types codes are stored as."""
APPROXIMATE = "approximate"
"""``index="approximate"``: the engine's approximate index for the codes' vector type (``APPROXIMATE_TYPES``)."""
HNSW_EF_FLOOR = 64
"""A Milvus ``HNSW`` search explores at least this many candidates (``ef``; never fewer than the hits asked)."""
_AUTO = "auto"


@dataclass(frozen=True)
class EngineIndexType:
    """One index type of an engine: the vector types it indexes, its metric, its knobs and their defaults."""

    engine: str
    name: str
    fields: tuple[str, ...]
    metric: str | None
    build: Mapping[str, Any] = field(default_factory=dict)
    """Build parameters and their defaults (``"auto"``: computed from the rows, see ``auto_nlist``)."""
    search: Mapping[str, Any] = field(default_factory=dict)
    """Search parameters and their defaults (None: the engine's own default)."""
    approximate: bool = True
    local: str = "builds"
    """What the local mode (Milvus Lite, Qdrant's local mode) does with it: ``builds``, ``exact`` (takes the
    request, searches every row) or ``server`` (refused there: a server only)."""


_MILVUS = (
    EngineIndexType("milvus", "SPARSE_INVERTED_INDEX", (SPARSE_FIELD,), "IP", {"drop_ratio_build": 0.0, "inverted_index_algo": None},
                    {"drop_ratio_search": 0.0}, local="exact"),
    EngineIndexType("milvus", "SPARSE_WAND", (SPARSE_FIELD,), "IP", {"drop_ratio_build": 0.0}, {"drop_ratio_search": 0.0},
                    local="server"),
    EngineIndexType("milvus", "BIN_FLAT", (BITS_FIELD,), "HAMMING", approximate=False, local="server"),
    EngineIndexType("milvus", "BIN_IVF_FLAT", (BITS_FIELD,), "HAMMING", {"nlist": _AUTO}, {"nprobe": 16}, local="server"),
    EngineIndexType("milvus", "FLAT", (FLOAT_FIELD,), "IP", approximate=False),
    EngineIndexType("milvus", "IVF_FLAT", (FLOAT_FIELD,), "IP", {"nlist": _AUTO}, {"nprobe": 16}),
    EngineIndexType("milvus", "IVF_SQ8", (FLOAT_FIELD,), "IP", {"nlist": _AUTO}, {"nprobe": 16}),
    EngineIndexType("milvus", "HNSW", (FLOAT_FIELD,), "IP", {"M": 16, "efConstruction": 200}, {"ef": None}),
    EngineIndexType("milvus", "IVF_RABITQ", (FLOAT_FIELD,), "IP", {"nlist": _AUTO, "refine": True, "refine_type": "SQ8"},
                    {"nprobe": 16, "rbq_query_bits": 0, "refine_k": 1.0}, local="server"),
)
_QDRANT = (
    EngineIndexType("qdrant", "SPARSE_INVERTED", (QDRANT_SPARSE,), "dot", {"full_scan_threshold": None, "on_disk": None},
                    approximate=False, local="exact"),
    EngineIndexType("qdrant", "HNSW", (QDRANT_DENSE,), "dot",
                    {"m": 16, "ef_construct": 100, "full_scan_threshold": None, "quantization": _AUTO},
                    {"hnsw_ef": None, "exact": False, "rescore": True, "oversampling": 4.0}, local="exact"),
)
ENGINE_INDEX_TYPES: dict[str, dict[str, EngineIndexType]] = {
    "milvus": {kind.name: kind for kind in _MILVUS}, "qdrant": {kind.name: kind for kind in _QDRANT}}
"""Every index type adaptemb builds, by engine and name."""
APPROXIMATE_TYPES: dict[str, dict[str, str]] = {
    "milvus": {SPARSE_FIELD: "SPARSE_INVERTED_INDEX", BITS_FIELD: "BIN_IVF_FLAT", FLOAT_FIELD: "HNSW"},
    "qdrant": {QDRANT_SPARSE: "SPARSE_INVERTED", QDRANT_DENSE: "HNSW"},
}
"""``index="approximate"``: the type chosen for each vector type (Qdrant's sparse index is exact: it has no other)."""
QUANTIZATION_CHOICES = (_AUTO, "none")
"""Qdrant ``HNSW``'s ``quantization``: ``auto`` (the kind's ``vector_quantization``: binary or int8, rescored) or none."""


class EngineIndex(BaseModel):
    """An engine index for ``export_codes(..., index=...)``: a type (``ENGINE_INDEX_TYPES``, or ``"approximate"``)
    and build parameters that override the type's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = APPROXIMATE
    build: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class ResolvedIndex:
    """The index an export asks the engine for: its type and every build parameter (defaults filled in)."""

    type: EngineIndexType
    build: dict[str, Any]

    def describe(self) -> str:
        knobs = ", ".join(f"{key}={value}" for key, value in self.build.items() if value is not None)
        return f"{self.type.name}{f' ({knobs})' if knobs else ''}"


def milvus_field(codes: Codes, server: bool, sparse_ip: bool = True) -> str:
    """The Milvus vector type ``codes`` are stored as (``sparse_ip``: the store scores sparse fields by IP)."""
    if codes.sparse_vectors and sparse_ip:
        return SPARSE_FIELD
    return BITS_FIELD if codes.vector_quantization == "sign_bits" and server else FLOAT_FIELD


def qdrant_field(codes: Codes) -> str:
    return QDRANT_SPARSE if codes.sparse_vectors else QDRANT_DENSE


def fitting_types(engine: str, vector_type: str, local: bool = False) -> list[str]:
    """The index types of ``engine`` that fit ``vector_type`` (on its local mode: those it takes)."""
    return [name for name, kind in ENGINE_INDEX_TYPES[engine].items()
            if vector_type in kind.fields and not (local and kind.local == "server")]


def auto_nlist(rows: int) -> int:
    """IVF cells for ``rows`` rows: 4·sqrt(rows), between 1 and Milvus' 65,536 and at most one per 39 rows (faiss'
    k-means wants 39 training points a centroid)."""
    return int(max(1, min(65_536, round(4 * math.sqrt(max(rows, 1))), rows // 39)))


def resolve_index(engine: str, vector_type: str, index: EngineIndex | str, rows: int, kind: str,
                  local: bool, server_vector_type: str | None = None) -> ResolvedIndex:
    """The type and build parameters ``index`` asks for, checked against the codes' ``vector_type`` (``kind``: the
    codes' kind, for the message; ``server_vector_type``: what a server would store them as, when the local mode
    stores them otherwise); ``ValueError`` naming what fits for a type that does not fit, an unknown type or knob,
    or a type the local mode does not take."""
    index = EngineIndex(type=index) if isinstance(index, str) else index
    name = APPROXIMATE_TYPES[engine][vector_type] if index.type == APPROXIMATE else index.type.upper()
    types = ENGINE_INDEX_TYPES[engine]
    fits = fitting_types(engine, vector_type, local)
    where = f"{'Milvus Lite' if engine == 'milvus' else 'Qdrant local mode'}" if local else engine.capitalize()
    if name not in types:
        raise ValueError(f"unknown {engine.capitalize()} index type {index.type!r}; for {kind} codes "
                         f"({vector_type}) on {where}: {', '.join([APPROXIMATE, *fits])}")
    chosen = types[name]
    if local and (chosen.local == "server" or vector_type not in chosen.fields) \
            and (server_vector_type or vector_type) in chosen.fields:
        raise ValueError(f"{name} needs a {engine.capitalize()} server: {where} does not build it; give a server URI "
                         f"as the location, or one of {', '.join(fits)}")
    if vector_type not in chosen.fields:
        raise ValueError(f"{name} does not fit {kind} codes, which {engine.capitalize()} stores as {vector_type} "
                         f"(it indexes {', '.join(chosen.fields)}); fitting index types: {', '.join(fits)}")
    return ResolvedIndex(chosen, _knobs(chosen, "build", chosen.build, index.build, rows))


def search_knobs(chosen: EngineIndexType, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """The search parameters of ``chosen``: its defaults, overridden by ``given`` (unknown keys refused)."""
    return _knobs(chosen, "search", chosen.search, given or {}, 0)


def _knobs(chosen: EngineIndexType, side: str, defaults: Mapping[str, Any], given: Mapping[str, Any],
           rows: int) -> dict[str, Any]:
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        valid = ", ".join(defaults) or "none"
        raise ValueError(f"unknown {side} parameter {unknown[0]!r} for {chosen.engine.capitalize()} {chosen.name}; "
                         f"valid: {valid}")
    knobs = {**defaults, **given}
    if knobs.get("nlist") == _AUTO:
        knobs["nlist"] = auto_nlist(rows)
    if chosen.engine == "qdrant" and knobs.get("quantization", _AUTO) not in QUANTIZATION_CHOICES:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_CHOICES)}; got {knobs['quantization']!r}")
    return knobs


def milvus_request(resolved: ResolvedIndex, lite: bool = False) -> dict[str, Any]:
    """The index a Milvus collection is created with: ``add_index``'s ``index_type``, ``metric_type`` and ``params``
    (the build parameters set, None ones left to the server). pymilvus sends each parameter as a key of its own, as
    a server reads them; Milvus Lite 3.2.2 reads them only from one JSON ``params`` key (the older clients' form) and
    silently builds with its defaults otherwise (measured: IVF_FLAT with 128 cells, not the 38 asked), so for Lite
    they go there as well."""
    params = {key: value for key, value in resolved.build.items() if value is not None}
    if lite and params:
        params = {**params, "params": dict(params)}
    return {"index_type": resolved.type.name, "metric_type": resolved.type.metric, "params": params}


def exact_milvus_index(vector_type: str) -> ResolvedIndex:
    """The index a Milvus server gets when none is asked for: exact (``FLAT``, ``BIN_FLAT``, or the sparse inverted
    index with nothing dropped)."""
    name = {SPARSE_FIELD: "SPARSE_INVERTED_INDEX", BITS_FIELD: "BIN_FLAT", FLOAT_FIELD: "FLAT"}[vector_type]
    chosen = ENGINE_INDEX_TYPES["milvus"][name]
    return ResolvedIndex(chosen, _knobs(chosen, "build", chosen.build, {}, 0))


def milvus_search_params(chosen: EngineIndexType | None, given: Mapping[str, Any] | None, limit: int) -> dict[str, Any]:
    """The ``params`` of a Milvus search of ``limit`` hits in a collection indexed by ``chosen`` (None: no index):
    the type's search defaults overridden by ``given``; an ``HNSW`` ``ef`` left unset is ``max(64, limit)``."""
    if chosen is None:
        if given:
            raise ValueError(f"the collection has no index, so no search parameter applies (got {sorted(given)}); "
                             "export it with index=... to tune its search")
        return {}
    knobs = search_knobs(chosen, given)
    if "ef" in knobs and knobs["ef"] is None:
        knobs["ef"] = max(HNSW_EF_FLOOR, limit)
    return {key: value for key, value in knobs.items() if value is not None}
