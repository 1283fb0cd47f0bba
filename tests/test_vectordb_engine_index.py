"""The engines' own indexes over exported codes (``export_codes(..., index=...)``): the index each kind's declared
vector form gets, the request the engine reports back (Milvus Lite's ``describe_index``, Qdrant local mode's
``get_collection``), the search knobs, and the refusals naming what fits. Index types only a server builds are
checked as the request adaptemb sends, and against a real server when ``$ADAPTEMB_MILVUS_URI`` /
``$ADAPTEMB_QDRANT_URL`` name one (skipped otherwise)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vectordb_support import needs_milvus, needs_qdrant, opened

import adaptemb
from adaptemb.vectordb import (
    APPROXIMATE_TYPES,
    EngineIndex,
    export_codes,
    fitting_types,
    milvus_client,
    milvus_field,
    qdrant_client,
    qdrant_field,
    search_milvus,
    search_qdrant,
    vector_kinds,
)
from adaptemb.vectordb.engine_index import auto_nlist, milvus_request, resolve_index

DOCS, QUERIES = 1_500, 40
MILVUS_URI, QDRANT_URL = os.environ.get("ADAPTEMB_MILVUS_URI"), os.environ.get("ADAPTEMB_QDRANT_URL")
START = ("start one with Milvus' `bash standalone_embed.sh start` (docker; see docs/guide.md, 'Approximate search in "
         "Milvus and Qdrant') and set ADAPTEMB_MILVUS_URI=http://localhost:19530")
needs_milvus_server = pytest.mark.skipif(not MILVUS_URI, reason=f"needs a Milvus server in $ADAPTEMB_MILVUS_URI; {START}")
needs_qdrant_server = pytest.mark.skipif(not QDRANT_URL, reason="needs a Qdrant server in $ADAPTEMB_QDRANT_URL; start one "
                                         "with `docker run -d -p 6333:6333 qdrant/qdrant` and set "
                                         "ADAPTEMB_QDRANT_URL=http://localhost:6333")


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((DOCS + QUERIES, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x[:DOCS], x[DOCS:]


@pytest.fixture(scope="module")
def coded(data: tuple[np.ndarray, np.ndarray]) -> dict[str, tuple[adaptemb.Compressor, adaptemb.Codes, adaptemb.Codes]]:
    """method -> (compressor, document codes, symmetric query codes)."""
    docs, queries = data
    out = {}
    for method in ("svd", "binary", "int8", "csr"):
        comp = adaptemb.fit(docs, method, **adaptemb.get_registry().get(method).test_params)
        out[method] = (comp, comp.encode(docs), comp.encode(queries))
    return out


def recall(found: np.ndarray, comp: adaptemb.Compressor, queries: adaptemb.Codes, docs: adaptemb.Codes) -> float:
    """recall@k of ``found`` against the exact top-k by the compressor's own scores, ties counted as hits (a found id
    scoring at least the exact k-th score: short codes tie often)."""
    scores = np.asarray(comp.score(queries, docs), np.float64)
    kth = -np.sort(-scores, axis=1)[:, found.shape[1] - 1]
    hits = np.take_along_axis(scores, np.maximum(found, 0), axis=1) >= kth[:, None] - 1e-5
    return float((hits & (found >= 0)).mean())


def test_every_vector_kind_has_an_approximate_index_in_both_engines() -> None:
    """The choice follows the vector type a kind declares (no kind named): each one resolves ``approximate``."""
    for kind in vector_kinds():
        codes_class = adaptemb.Codes.for_kind(kind)
        sparse = codes_class.vector_form == "sparse"
        milvus_types = {"SPARSE_FLOAT_VECTOR"} if sparse else {"FLOAT_VECTOR"} | (
            {"BINARY_VECTOR"} if codes_class.vector_quantization == "sign_bits" else set())
        for vector_type in milvus_types:
            assert APPROXIMATE_TYPES["milvus"][vector_type] in fitting_types("milvus", vector_type), (kind, vector_type)
        qdrant_type = "sparse vector" if sparse else "dense vector"
        assert APPROXIMATE_TYPES["qdrant"][qdrant_type] in fitting_types("qdrant", qdrant_type), kind


def test_the_vector_type_follows_the_declared_form(coded: dict[str, Any]) -> None:
    assert milvus_field(coded["csr"][1], server=True) == "SPARSE_FLOAT_VECTOR"
    assert milvus_field(coded["binary"][1], server=True) == "BINARY_VECTOR"
    assert milvus_field(coded["binary"][1], server=False) == "FLOAT_VECTOR"  # Milvus Lite holds no BINARY_VECTOR
    assert milvus_field(coded["int8"][1], server=True) == "FLOAT_VECTOR"
    assert qdrant_field(coded["csr"][1]) == "sparse vector" and qdrant_field(coded["svd"][1]) == "dense vector"


def test_server_only_requests_are_built_as_milvus_documents_them(coded: dict[str, Any]) -> None:
    """What a server is sent for the index types Milvus Lite does not build (checked against a server below)."""
    bits = resolve_index("milvus", "BINARY_VECTOR", "approximate", 10_000, "binary", local=False)
    assert milvus_request(bits) == {"index_type": "BIN_IVF_FLAT", "metric_type": "HAMMING", "params": {"nlist": 256}}
    assert auto_nlist(10_000) == 256 and auto_nlist(1_000) == 25 and auto_nlist(10) == 1 and auto_nlist(10**12) == 65_536
    assert milvus_request(bits, lite=True)["params"] == {"nlist": 256, "params": {"nlist": 256}}  # Lite's JSON form
    rabitq = resolve_index("milvus", "FLOAT_VECTOR", EngineIndex(type="ivf_rabitq", build={"nlist": 64, "refine_type": "FP16"}),
                           5_000, "dense", local=False)
    assert milvus_request(rabitq) == {"index_type": "IVF_RABITQ", "metric_type": "IP",
                                      "params": {"nlist": 64, "refine": True, "refine_type": "FP16"}}
    wand = resolve_index("milvus", "SPARSE_FLOAT_VECTOR", "SPARSE_WAND", 5_000, "sparse", local=False)
    assert milvus_request(wand) == {"index_type": "SPARSE_WAND", "metric_type": "IP", "params": {"drop_ratio_build": 0.0}}


@needs_milvus
@pytest.mark.parametrize("method", ["svd", "binary", "int8"])
def test_milvus_lite_searches_the_approximate_index_of_a_dense_form(method: str, coded: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    """IVF_FLAT on Milvus Lite (faiss), searched on the index right after the export in the same client (one probed
    cell of 38 misses much of the exact top-10, every cell finds it) and reported back by describe_index; HNSW loaded
    again in a fresh client, its wide search close to exact."""
    comp, docs, queries = coded[method]
    location = str(tmp_path / "codes.db")
    client = milvus_client(location)
    try:
        written = export_codes(docs, to="milvus", location=client, index="IVF_FLAT")
        assert written.vector.endswith("IVF_FLAT (nlist=38) index, loaded")  # 1,500 rows: at most one cell per 39
        described = client.describe_index("adaptemb", client.list_indexes("adaptemb")[0])
        assert (described["index_type"], described["metric_type"], described["params"]) == ("IVF_FLAT", "IP", {"nlist": 38})
        one = recall(search_milvus(client, "adaptemb", queries, 10, search_params={"nprobe": 1})[1], comp, queries, docs)
        every = recall(search_milvus(client, "adaptemb", queries, 10, search_params={"nprobe": 38})[1], comp, queries, docs)
    finally:
        client.close()
    assert one < 0.9 and every >= 0.99, (one, every)
    export_codes(docs, to="milvus", location=location, recreate=True, index=EngineIndex(type="HNSW", build={"M": 8}))
    with opened("milvus", location) as client:  # a fresh client: the collection is released until search_milvus loads it
        described = client.describe_index("adaptemb", client.list_indexes("adaptemb")[0])
        assert (described["index_type"], described["metric_type"]) == ("HNSW", "IP")
        assert described["params"] == {"M": 8, "efConstruction": 200}
        wide = recall(search_milvus(client, "adaptemb", queries, 10, search_params={"ef": 400})[1], comp, queries, docs)
    assert wide >= 0.97


@needs_milvus
def test_milvus_lite_sparse_index_is_the_inverted_index_searched_exactly(coded: dict[str, Any], tmp_path: Path) -> None:
    comp, docs, queries = coded["csr"]
    location = str(tmp_path / "codes.db")
    written = export_codes(docs, to="milvus", location=location, index="approximate")
    assert "SPARSE_INVERTED_INDEX (drop_ratio_build=0.0) index (Milvus Lite scores sparse fields exactly)" in written.vector
    with opened("milvus", location) as client:
        described = client.describe_index("adaptemb", client.list_indexes("adaptemb")[0])
        assert (described["index_type"], described["metric_type"]) == ("SPARSE_INVERTED_INDEX", "IP")
        assert described["params"] == {"drop_ratio_build": 0.0}
        _, ids = search_milvus(client, "adaptemb", queries, 10, search_params={"drop_ratio_search": 0.0})
        from pymilvus import MilvusException

        with pytest.raises(MilvusException, match="only drop_ratio_search=0 is supported"):  # Lite's own refusal
            search_milvus(client, "adaptemb", queries, 10, search_params={"drop_ratio_search": 0.3})
    assert recall(ids, comp, queries, docs) == 1.0


@needs_milvus
def test_milvus_refuses_an_index_that_does_not_fit_naming_those_that_do(coded: dict[str, Any], tmp_path: Path) -> None:
    location = str(tmp_path / "codes.db")
    csr_codes, binary_codes, svd_codes = coded["csr"][1], coded["binary"][1], coded["svd"][1]
    with pytest.raises(ValueError, match=r"BIN_IVF_FLAT does not fit .* SPARSE_FLOAT_VECTOR .*fitting index types: "
                                         r"SPARSE_INVERTED_INDEX$"):
        export_codes(csr_codes, to="milvus", location=location, index="BIN_IVF_FLAT")
    with pytest.raises(ValueError, match="BIN_IVF_FLAT needs a Milvus server: Milvus Lite does not build it"):
        export_codes(binary_codes, to="milvus", location=location, index="BIN_IVF_FLAT")
    for server_only in ("IVF_RABITQ", "SPARSE_WAND"):
        codes = csr_codes if server_only == "SPARSE_WAND" else svd_codes
        with pytest.raises(ValueError, match=f"{server_only} needs a Milvus server"):
            export_codes(codes, to="milvus", location=location, index=server_only)
    with pytest.raises(ValueError, match="unknown build parameter 'nprobe' for Milvus IVF_FLAT; valid: nlist"):
        export_codes(svd_codes, to="milvus", location=location, index=EngineIndex(type="IVF_FLAT", build={"nprobe": 4}))
    with pytest.raises(ValueError, match="unknown Milvus index type 'DISKANN'; .*: approximate, FLAT, IVF_FLAT"):
        export_codes(svd_codes, to="milvus", location=location, index="DISKANN")
    export_codes(svd_codes, to="milvus", location=location)  # no index: Milvus Lite searches every row
    with opened("milvus", location) as client, \
            pytest.raises(ValueError, match="the collection has no index, so no search parameter applies"):
        search_milvus(client, "adaptemb", coded["svd"][2], 10, search_params={"ef": 64})


@needs_qdrant
def test_qdrant_local_mode_stores_the_hnsw_and_quantisation_asked_for(coded: dict[str, Any]) -> None:
    """Qdrant's local mode keeps the settings (get_collection reports them) but searches exactly: the top-10 is the
    exact index's whatever the knobs."""
    comp, docs, queries = coded["binary"]
    client = qdrant_client(":memory:")
    written = export_codes(docs, location=client, index=EngineIndex(type="HNSW", build={"m": 32, "ef_construct": 64}))
    assert written.vector.endswith("binary quantisation in RAM (rescored), HNSW (m=32, ef_construct=64, quantization=auto) "
                                   "(local mode searches every point exactly)")
    vector = client.get_collection("adaptemb").config.params.vectors["codes"]
    assert (vector.hnsw_config.m, vector.hnsw_config.ef_construct) == (32, 64)
    assert vector.quantization_config.binary is not None
    _, ids = search_qdrant(client, "adaptemb", queries, 10, search_params={"hnsw_ef": 16, "oversampling": 2.0})
    assert recall(ids, comp, queries, docs) >= 0.99  # exact; only ties may differ
    export_codes(docs, location=client, recreate=True, index=EngineIndex(type="HNSW", build={"quantization": "none"}))
    assert client.get_collection("adaptemb").config.params.vectors["codes"].quantization_config is None


@needs_qdrant
def test_qdrant_sparse_index_knobs_and_refusals(coded: dict[str, Any]) -> None:
    _, docs, queries = coded["csr"]
    client = qdrant_client(":memory:")
    export_codes(docs, location=client, index=EngineIndex(type="approximate", build={"full_scan_threshold": 500}))
    sparse = client.get_collection("adaptemb").config.params.sparse_vectors["codes"]
    assert sparse.index.full_scan_threshold == 500
    with pytest.raises(ValueError, match="unknown search parameter 'hnsw_ef' for Qdrant SPARSE_INVERTED; valid: none"):
        search_qdrant(client, "adaptemb", queries, 10, search_params={"hnsw_ef": 64})
    with pytest.raises(ValueError, match="HNSW does not fit .* sparse vector .*fitting index types: SPARSE_INVERTED$"):
        export_codes(docs, location=client, recreate=True, index="HNSW")
    with pytest.raises(ValueError, match="quantization must be one of auto, none; got 'pq'"):
        export_codes(coded["svd"][1], location=client, recreate=True, index=EngineIndex(type="HNSW", build={"quantization": "pq"}))


# -- against real servers (skipped without one) ---------------------------------------------------------------------


@pytest.fixture()
def milvus_server() -> Iterator[Any]:
    client = milvus_client(str(MILVUS_URI))
    yield client
    client.close()


@needs_milvus_server
@pytest.mark.parametrize(("method", "index", "search"), [
    ("csr", "SPARSE_INVERTED_INDEX", {"drop_ratio_search": 0.0}), ("binary", "BIN_IVF_FLAT", {"nprobe": 25}),
    ("svd", "HNSW", {"ef": 200}), ("svd", "IVF_RABITQ", {"nprobe": 25, "refine_k": 4.0})])
def test_a_milvus_server_builds_and_reports_each_index(method: str, index: str, search: dict[str, Any],
                                                       coded: dict[str, Any], milvus_server: Any) -> None:
    comp, docs, queries = coded[method]
    collection = f"adaptemb_test_{method}_{index.lower()}"
    export_codes(docs, to="milvus", location=milvus_server, collection=collection, recreate=True, index=index)
    described = milvus_server.describe_index(collection, milvus_server.list_indexes(collection)[0])
    assert described["index_type"] == index
    _, ids = search_milvus(milvus_server, collection, queries, 10, search_params=search)
    assert recall(ids, comp, queries, docs) >= 0.9
    milvus_server.drop_collection(collection)


@needs_qdrant_server
@pytest.mark.parametrize("method", ["csr", "binary", "svd"])
def test_a_qdrant_server_builds_and_reports_each_index(method: str, coded: dict[str, Any]) -> None:
    comp, docs, queries = coded[method]
    client = qdrant_client(str(QDRANT_URL))
    collection = f"adaptemb_test_{method}"
    export_codes(docs, location=client, collection=collection, recreate=True,
                 index=EngineIndex(build={} if method == "csr" else {"m": 24, "full_scan_threshold": 10}))
    params = client.get_collection(collection).config.params
    if method != "csr":
        assert params.vectors["codes"].hnsw_config.m == 24
    _, ids = search_qdrant(client, collection, queries, 10, search_params=None if method == "csr" else {"hnsw_ef": 128})
    assert recall(ids, comp, queries, docs) >= 0.9
    client.delete_collection(collection)


@needs_milvus
def test_export_codes_cli_asks_for_the_engines_index(coded: dict[str, Any], tmp_path: Path) -> None:
    """``adaptemb export-codes --index TYPE --index-param NAME=VALUE``: Milvus Lite builds the IVF_FLAT asked for (its
    describe_index reports the nlist given); a parameter the type does not take, a type that does not fit the codes
    and a parameter without --index are each one line naming what is valid, and write no collection."""
    from typer.testing import CliRunner

    from adaptemb.cli import app

    codes_file = tmp_path / "svd.npz"
    adaptemb.save_codes(coded["svd"][1], codes_file)
    runner = CliRunner()
    base = ["export-codes", "--codes", str(codes_file), "--to", "milvus"]
    done = runner.invoke(app, [*base, "--location", str(tmp_path / "a.db"), "--index", "IVF_FLAT",
                               "--index-param", "nlist=16"], env={"COLUMNS": "200"})
    assert done.exit_code == 0 and "wrote 1,500 dense codes into milvus" in done.output, done.output
    assert "IVF_FLAT (nlist=16) index" in done.output, done.output
    with opened("milvus", str(tmp_path / "a.db")) as client:
        described = client.describe_index("adaptemb", client.list_indexes("adaptemb")[0])
    assert (described["index_type"], described["params"]) == ("IVF_FLAT", {"nlist": 16})
    refusals = {("--index", "IVF_FLAT", "--index-param", "nprobe=4"): "unknown build parameter 'nprobe' for Milvus IVF_FLAT",
                ("--index", "BIN_IVF_FLAT"): "BIN_IVF_FLAT does not fit",
                ("--index-param", "nlist=16"): "--index-param needs --index"}
    for extra, message in refusals.items():
        location = tmp_path / f"refused-{len(extra)}-{extra[1]}.db"
        result = runner.invoke(app, [*base, "--location", str(location), *extra], env={"COLUMNS": "200"})
        assert result.exit_code != 0 and message in result.output, (extra, result.output)
        assert "Traceback" not in result.output and not location.exists(), (extra, sorted(tmp_path.iterdir()))


def test_a_load_that_meets_lite_still_writing_its_index_file_is_tried_again() -> None:
    """Milvus Lite once answered load_collection with EAGAIN on an index file its background build reported done:
    that error is tried again until the deadline; any other error is raised at once, and EAGAIN past the deadline too."""
    import time

    from adaptemb.vectordb.milvus import TRANSIENT_LOAD_ERROR, _load_when_written

    class Loads:
        def __init__(self, errors: list[str]) -> None:
            self.errors, self.calls = errors, 0

        def load_collection(self, collection: str) -> None:
            self.calls += 1
            if self.errors:
                raise RuntimeError(self.errors.pop(0))

    busy = Loads([f"read error in x.idx: 0 != 1 ({TRANSIENT_LOAD_ERROR})"] * 2)
    _load_when_written(busy, "adaptemb", time.monotonic() + 10)
    assert busy.calls == 3
    with pytest.raises(RuntimeError, match="schema"):
        _load_when_written(Loads(["schema mismatch"]), "adaptemb", time.monotonic() + 10)
    late = Loads([TRANSIENT_LOAD_ERROR])
    with pytest.raises(RuntimeError, match=TRANSIENT_LOAD_ERROR):
        _load_when_written(late, "adaptemb", time.monotonic() - 1)
    assert late.calls == 1
