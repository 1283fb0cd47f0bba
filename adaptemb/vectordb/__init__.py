"""Codes into a vector database people already run: Qdrant or Milvus.

``export_codes(codes, to="qdrant" | "milvus", location=...)`` writes one row per code (id = row number,
or the ``ids`` given, plus an optional payload dict per row) into a new collection with one vector
named ``codes``, in batches of 1,000 rows; ``search_qdrant`` / ``search_milvus`` query such a
collection and return ``(scores, ids)`` as ``Index.search`` does: with query codes (``encode_queries``
output), or with raw float queries through the fitted compressor (``compressor=comp``, ``k=`` the budget
the documents were encoded at), which is how an asymmetric method is searched: a composition's rotated
float query against its binary or int8 codes, csr's query vector over its latents against its sparse codes.
Through a compressor the search first checks, on a few queries, that the database's scores are the
compressor's own, and refuses the search otherwise (bsa's cosine scoring divides by document norms no
database holds); so the database returns ``comp.index(codes).search(queries)``'s top list.

``location`` is required: a place that outlives the call (a local folder or ``.db`` file, created with
its parent folders, or a server URL), or a client you opened and keep (then it stays open). ``":memory:"``
is refused: the rows would vanish when the call returns. A client ``export_codes`` opens itself is closed
before it returns (Milvus Lite's in-process server for that file is stopped too, releasing the file's
lock), so any other process can open the collection at once.

**Qdrant** (``pip install 'adaptemb[qdrant]'``; ``location``: a local folder for the embedded mode, or an
``http(s)://`` URL; ``qdrant_client(":memory:")`` for a client to export into and search in this process).
Payload = the point's payload. Every dense vector is scored by ``Distance.DOT``.

==============================  ====================================================================
codes                           Qdrant vector (similarity)
==============================  ====================================================================
``sparse``, ``packed_sparse``   sparse vector of the stored (dequantised) values; csr's query vector
(csr)                           goes as a sparse vector of all its latents, its offset added after
``binary_sparse`` (bsa)         sparse vector of ones on the active features (dot = overlap count)
``dense`` (svd, mrl, cllr)      float32 dense vector
``binary`` (binary,             float32 ±1 vector (dot with ±1 queries = d − 2·Hamming; with a
``svd+binary``, ...)            composition's float query, adaptemb's score), with Qdrant's binary
                                quantisation (1 bit in RAM, 8-bit asymmetric query encoding, the ±1
                                vectors on disk rescore 4x ``top_k`` candidates; Qdrant >= 1.15)
``int8`` (int8, ``svd+int8``)   float32 vector of the dequantised values ``offset + scale·code`` (dot =
                                adaptemb's int8 score), with Qdrant's int8 scalar quantisation in RAM
                                and rescoring; ``compact=True``: uint8 ``code + 128`` instead, whose
                                dot product only approximates (measured on the built-in dataset,
                                2,000 documents, 60 queries: 55 % of int8's top-10, 8.5 % of
                                svd+int8's), and which a search through the compressor refuses
==============================  ====================================================================

The embedded local mode keeps no quantised form: it searches the float32 vectors exactly.

**Milvus** (``pip install 'adaptemb[milvus]'``; ``location``: a local file path ending in ``.db`` for
Milvus Lite, no server, or an ``http(s)://`` URI of a server). Ids are the ``INT64`` primary key ``id``;
the payload goes into dynamic fields (its keys may not be ``id`` or ``codes``). Every vector is scored by
inner product (``IP``) exhaustively, so the database ranks as adaptemb does. On a server the collection
gets the index below and is loaded (the server keeps it loaded for every client). Milvus Lite gets no
index: Lite searches an unindexed collection by brute force (exact) and opens it loaded in every process,
while an indexed one opens released in each new process until that process calls ``load_collection``; so
``MilvusClient("codes.db").search(...)`` works from a fresh process with pymilvus alone.

==============================  ====================================================================
codes                           Milvus field (metric ``IP``; index on a server)
==============================  ====================================================================
``sparse``, ``packed_sparse``   ``SPARSE_FLOAT_VECTOR`` of the stored non-zero values plus one balance
(csr)                           entry at index ``dim`` (``SPARSE_INVERTED_INDEX``, ``drop_ratio_build``
                                and ``drop_ratio_search`` 0: exact) [1] [2]
``binary_sparse`` (bsa)         ``SPARSE_FLOAT_VECTOR`` of ones on the active features, plus the
                                balance entry (IP = overlap count; as above) [1] [2]
``dense`` (svd, mrl, cllr)      ``FLOAT_VECTOR`` float32 (``FLAT``)
``binary`` (binary,             server: ``BINARY_VECTOR`` of the packed bits (``BIN_FLAT``,
``svd+binary``, ...)            ``HAMMING``): 10x ``top_k`` candidates by Hamming distance to the
                                query's sign bits, rescored with the query; Milvus Lite (no
                                ``BINARY_VECTOR``): ``FLOAT_VECTOR`` of ±1 (``FLAT``), exact
``int8`` (int8, ``svd+int8``)   ``FLOAT_VECTOR`` of the dequantised values ``offset + scale·code``
                                (``FLAT``): IP is adaptemb's int8 similarity, the same ranking
==============================  ====================================================================

[1] Milvus Lite before 3.2.2 scores every ``SPARSE_FLOAT_VECTOR`` field by BM25, whatever metric the
index or the search names. Against such a Milvus Lite (found from the server version) sparse and
binary-sparse codes are stored densified instead: ``FLOAT_VECTOR`` of width ``dim`` (``FLAT``, IP), the
same scores at ``dim`` floats a row. ``search_milvus`` queries whichever field the collection holds.

[2] Milvus takes non-negative sparse weights only, queries included; csr's query vector is signed. The
balance entry of a row is ``ceiling − sum(row)`` (the same ``ceiling`` for every row), and a signed query
``q`` is sent as ``q + c`` with ``c`` at the balance index: Milvus' inner product is ``<q, doc> + c·ceiling``,
ranked as ``<q, doc>``; the scores are recomputed from the returned rows (``adaptemb.vectordb.milvus_rows``).
A symmetric sparse query has nothing at that index: its inner product is unchanged.

**Credentials** (a server URL only). The Qdrant API key comes from ``$QDRANT_API_KEY`` and the Milvus token
from ``$MILVUS_TOKEN`` (an API key, or ``user:password``; pymilvus itself reads no token variable), or from
the variable ``api_key_env`` names, or from ``api_key`` (a ``pydantic.SecretStr`` or a string, wrapped at
once). The key is held as a ``SecretStr``: it is in no ``repr``, message or ``CodesExport``, and an error
the client raises that shows it is re-raised without it. A server that refuses the key (or wants one)
raises ``CredentialError``; one that cannot be reached (or whose TLS certificate does not verify) raises
``ServerUnreachableError``. ``https`` locations verify the server's certificate (httpx and gRPC defaults,
never turned off): against the public CAs, ``$SSL_CERT_FILE`` (Qdrant) / ``$GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``
(Milvus), or the PEM file ``ca_cert`` names. A key sent over plain ``http://`` (or ``tcp://``) to a host
that is not this machine draws an ``InsecureTransportWarning``: it travels unencrypted.

Each code kind says how it is stored (``Codes.vector_form``, ``vector_rows``, ``compact_vector_rows``;
``ProjectedQueries.query_vector_rows`` for csr's queries; the tables above are what the built-in kinds give);
this package maps those rows onto the store. Codes with no vector form (RaBitQ, PQ, SQ and TurboQuant codes,
``svd+rabitq`` included: their scores are faiss' estimators, no database computes them) are refused with the
list of kinds that have one. Modules: ``common`` (names, errors, checks), ``credentials``, ``guard`` (client
errors made safe), ``queries`` (query vectors and the check of a search through a compressor), ``qdrant``,
``milvus`` and ``milvus_rows``, ``export`` (``export_codes``).

A sparse index only returns documents that share a feature with the query: a query with fewer than
``top_k`` such documents gets the rest padded (id -1, score -inf).
"""

from adaptemb.vectordb.common import (
    DEFAULT_KEY_ENV,
    ID_FIELD,
    VECTOR_NAME,
    CredentialError,
    InsecureTransportWarning,
    ServerUnreachableError,
    VectorDBError,
    vector_kinds,
)
from adaptemb.vectordb.engine_index import (
    APPROXIMATE_TYPES,
    ENGINE_INDEX_TYPES,
    EngineIndex,
    EngineIndexType,
    fitting_types,
    milvus_field,
    qdrant_field,
)
from adaptemb.vectordb.export import MEMORY_REFUSED, CodesExport, export_codes
from adaptemb.vectordb.milvus import milvus_client, release_milvus_lite, search_milvus
from adaptemb.vectordb.qdrant import qdrant_client, search_qdrant
from adaptemb.vectordb.queries import StoreQueries, store_queries

__all__ = [
    "APPROXIMATE_TYPES",
    "DEFAULT_KEY_ENV",
    "ENGINE_INDEX_TYPES",
    "ID_FIELD",
    "MEMORY_REFUSED",
    "VECTOR_NAME",
    "CodesExport",
    "CredentialError",
    "EngineIndex",
    "EngineIndexType",
    "InsecureTransportWarning",
    "ServerUnreachableError",
    "StoreQueries",
    "VectorDBError",
    "export_codes",
    "fitting_types",
    "milvus_client",
    "milvus_field",
    "qdrant_client",
    "qdrant_field",
    "release_milvus_lite",
    "search_milvus",
    "search_qdrant",
    "store_queries",
    "vector_kinds",
]
