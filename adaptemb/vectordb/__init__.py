"""Codes into a vector database people already run: Qdrant or Milvus.

``export_codes(codes, to="qdrant" | "milvus", location=...)`` writes one row per code (id = row number,
or the ``ids`` given, plus an optional payload dict per row) into a new collection with one vector
named ``codes``, in batches of 1,000 rows; ``search_qdrant`` / ``search_milvus`` query such a
collection with query codes of the same kind and return ``(scores, ids)`` as ``Index.search`` does.

``location`` is required: a place that outlives the call (a local folder or ``.db`` file, created with
its parent folders, or a server URL), or a client you opened and keep (then it stays open). ``":memory:"``
is refused: the rows would vanish when the call returns. A client ``export_codes`` opens itself is closed
before it returns (Milvus Lite's in-process server for that file is stopped too, releasing the file's
lock), so any other process can open the collection at once.

**Qdrant** (``pip install 'adaptemb[qdrant]'``; ``location``: a local folder for the embedded mode, or an
``http(s)://`` URL; ``qdrant_client(":memory:")`` for a client to export into and search in this process).
Payload = the point's payload.

============================  ====================================================================
codes                         Qdrant vector (similarity)
============================  ====================================================================
``sparse`` (csr)              sparse vector of the stored values (dot product)
``binary_sparse`` (bsa)       sparse vector of ones on the active features (dot = overlap count)
``dense`` (svd, mrl, cllr)    float32 dense vector (``Distance.DOT``)
``binary``                    dense ±1 float32 vector (dot = d − 2·Hamming: the Hamming ranking)
``int8``                      uint8 dense vector of ``code + 128``; Qdrant's dot product of these is
                              not the dequantised inner product, so its ranking is approximate
============================  ====================================================================

**Milvus** (``pip install 'adaptemb[milvus]'``; ``location``: a local file path ending in ``.db`` for
Milvus Lite, no server, or an ``http(s)://`` URI of a server). Ids are the ``INT64`` primary key ``id``;
the payload goes into dynamic fields (its keys may not be ``id`` or ``codes``). Every vector is scored by
inner product (``IP``) exhaustively, so the database ranks as adaptemb does. On a server the collection
gets the index below and is loaded (the server keeps it loaded for every client). Milvus Lite gets no
index: Lite searches an unindexed collection by brute force (exact) and opens it loaded in every process,
while an indexed one opens released in each new process until that process calls ``load_collection``; so
``MilvusClient("codes.db").search(...)`` works from a fresh process with pymilvus alone.

============================  ====================================================================
codes                         Milvus field (metric ``IP``; index on a server)
============================  ====================================================================
``sparse`` (csr)              ``SPARSE_FLOAT_VECTOR`` of the stored non-zero values
                              (``SPARSE_INVERTED_INDEX``, ``drop_ratio_build`` and
                              ``drop_ratio_search`` 0: no entry dropped, exact) [1]
``binary_sparse`` (bsa)       ``SPARSE_FLOAT_VECTOR`` of ones on the active features
                              (IP = overlap count; as above) [1]
``dense`` (svd, mrl, cllr)    ``FLOAT_VECTOR`` float32 (``FLAT``)
``binary``                    ``FLOAT_VECTOR`` of ±1 (IP = d − 2·Hamming: the Hamming ranking;
                              ``FLAT``); Milvus Lite has no ``BINARY_VECTOR`` / ``HAMMING``
``int8``                      ``FLOAT_VECTOR`` of the dequantised values ``offset + scale·code``
                              (``FLAT``): IP is adaptemb's int8 similarity, the same ranking
============================  ====================================================================

[1] Milvus Lite before 3.2.2 scores every ``SPARSE_FLOAT_VECTOR`` field by BM25, whatever metric the
index or the search names. Against such a Milvus Lite (found from the server version) sparse and
binary-sparse codes are stored densified instead: ``FLOAT_VECTOR`` of width ``dim`` (``FLAT``, IP), the
same scores at ``dim`` floats a row. ``search_milvus`` queries whichever field the collection holds.

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
the tables above are what the built-in kinds give); this package maps those rows onto the store. Modules:
``common`` (names, errors, checks), ``credentials``, ``guard`` (client errors made safe), ``qdrant``,
``milvus``, ``export`` (``export_codes``).

Both databases score symmetrically (query codes against document codes, as ``Codes.similarity`` does);
an asymmetric method's default search (csr / bsa with a dense projected query) is not something a vector
database computes. A sparse index only returns documents that share a feature with the query: a query
with fewer than ``top_k`` such documents gets the rest padded (id -1, score -inf).
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
from adaptemb.vectordb.export import MEMORY_REFUSED, CodesExport, export_codes
from adaptemb.vectordb.milvus import milvus_client, release_milvus_lite, search_milvus
from adaptemb.vectordb.qdrant import qdrant_client, search_qdrant

__all__ = [
    "DEFAULT_KEY_ENV",
    "ID_FIELD",
    "MEMORY_REFUSED",
    "VECTOR_NAME",
    "CodesExport",
    "CredentialError",
    "InsecureTransportWarning",
    "ServerUnreachableError",
    "VectorDBError",
    "export_codes",
    "milvus_client",
    "qdrant_client",
    "release_milvus_lite",
    "search_milvus",
    "search_qdrant",
    "vector_kinds",
]
