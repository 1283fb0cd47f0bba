"""``adaptemb encode`` (stream embedding files of any size through a fitted compressor into parquet shards)
and ``adaptemb export-codes`` (codes into a vector database)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from adaptemb.api import load_codes
from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.options import (
    BudgetOption,
    BytesOption,
    CompressorOption,
    KeyOption,
    OldCompressorOption,
    check_one_budget,
    chosen,
    deprecated_option,
    flag,
)
from adaptemb.cli.output import console, plural
from adaptemb.config import parse_params
from adaptemb.errors import InvalidConfigError
from adaptemb.streaming import Engine, Side, encode_files, read_code_shards
from adaptemb.vectordb import EngineIndex, export_codes
from adaptemb.vectordb.export import VectorDB

INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as shells report it."""


@app.command("encode")
@friendly_errors
def encode_command(
    inputs: Annotated[list[Path], typer.Option("--input", "-i", help="Embedding files (.npy, .npz, .parquet, "
                                               ".safetensors, .fvecs, .bvecs, .ivecs), read in the order given; repeat for "
                                               "several files.")],
    compressor: CompressorOption = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Folder for the code shards (part-*.parquet) and manifest.json; created if needed.")] = None,
    k: BudgetOption = None,
    nbytes: BytesOption = None,
    side: Annotated[Side, typer.Option("--side", help="doc: document codes; query: query codes (encode_queries).")] = "doc",
    key: KeyOption = None,
    shard_rows: Annotated[int, typer.Option("--shard-rows", min=1, help="Rows per output shard (the unit of resume).")] = 262_144,
    batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, help="Rows encoded at a time (bounds memory).")] = 16_384,
    engine: Annotated[Engine, typer.Option("--engine", help="local: this process; ray: Ray Data actors "
                                           "(pip install 'adaptemb\\[ray]').")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="A Ray cluster (e.g. ray://head:10001); default: start Ray here.")] = None,
    old_model: OldCompressorOption = None,
    old_out: Annotated[Path | None, deprecated_option("-o", replacement="--out")] = None,
) -> None:
    """Encode embedding files shard by shard with bounded memory; re-run the same command to resume."""
    path = chosen(compressor, old_model, new="--compressor/-c", old="--model")
    folder = chosen(out, old_out, new="--out", old="-o")
    check_one_budget(k, nbytes)
    try:
        result = encode_files(inputs, path, folder, k=k, bytes=nbytes, side=side,
                              key=key, shard_rows=shard_rows, batch_rows=batch_rows, engine=engine,
                              ray_address=ray_address)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the shards written so far are kept in {folder}; run the same command again to "
              f"resume where it stopped:\n  {shlex.join(['adaptemb', *sys.argv[1:]])}", file=sys.stderr)
        raise typer.Exit(code=INTERRUPTED) from None
    picked = f" at k={result.k} (the largest within {nbytes} bytes)" if nbytes is not None else ""
    console.print(
        f"encoded {plural(result.rows, 'row')}{picked} in {result.seconds:.1f} s "
        f"({result.rows_per_second:,.0f} rows/s): "
        f"{plural(result.shards_written, 'shard')} written, {result.shards_skipped:,} already done, in {result.out}"
    )


@app.command("export-codes")
@friendly_errors
def export_codes_command(
    codes_path: Annotated[Path, typer.Option("--codes", help="Codes: an .npz from `adaptemb compress` or a folder from `adaptemb encode`.")],
    location: Annotated[str, typer.Option("--location", help="Where the collection lives. Qdrant: a local folder "
                                          "(embedded, created if needed) or a server URL (http(s)://host:6333). "
                                          "Milvus: a local file ending in .db (Milvus Lite) or a server URI "
                                          "(http://host:19530).")],
    to: Annotated[VectorDB, typer.Option("--to", help="The vector database (the qdrant / milvus extra).")] = "qdrant",
    collection: Annotated[str, typer.Option("--collection", help="Collection to create.")] = "adaptemb",
    recreate: Annotated[bool, flag("recreate", "Replace the collection if it exists (default: refuse).")] = False,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", metavar="<name>", help="The environment variable that holds the server's credential "
        "(default: QDRANT_API_KEY for Qdrant, MILVUS_TOKEN for Milvus: an API key or user:password). The NAME, "
        "never the key: no option takes the key itself.")] = None,
    ca_cert: Annotated[Path | None, typer.Option(
        "--ca-cert", help="A PEM CA bundle to verify an https:// server's certificate against "
        "(default: the public CAs; SSL_CERT_FILE for Qdrant, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH for Milvus).")] = None,
    index: Annotated[str | None, typer.Option(
        "--index", metavar="<type>", help="The engine's own index over the codes: 'approximate' (the engine's "
        "approximate index for the codes' vector type) or a type (Milvus: SPARSE_INVERTED_INDEX, SPARSE_WAND, "
        "BIN_IVF_FLAT, HNSW, IVF_RABITQ, ...; Qdrant: HNSW, sparse); a type that does not fit the codes is refused "
        "with those that do (default: Milvus servers exact, Qdrant its defaults).")] = None,
    index_params: Annotated[list[str] | None, typer.Option(
        "--index-param", metavar="NAME=VALUE", help="A build parameter of --index (repeatable), e.g. nlist=1024, "
        "M=16; unknown names are refused with the type's.")] = None,
) -> None:
    """Write codes into a vector database collection (ids = row numbers): Qdrant or Milvus.

    Credentials (a server URL only) come from the environment: the Qdrant API key from QDRANT_API_KEY,
    the Milvus token (an API key, or user:password) from MILVUS_TOKEN, or either from the variable
    --api-key-env names; unset, none is sent. The key is never printed. https:// locations verify the
    server's certificate; a key sent over plain http:// to another machine prints a warning.
    """
    if codes_path.is_dir():
        codes, ids = read_code_shards(codes_path, ids=True)
    else:
        codes, ids = load_codes(codes_path), None
    result = export_codes(codes, to=to, location=location, collection=collection, ids=ids, recreate=recreate,
                          api_key_env=api_key_env, ca_cert=ca_cert, index=_engine_index(index, index_params or []))
    console.print(str(result))


def _engine_index(index: str | None, params: list[str]) -> EngineIndex | None:
    """``--index`` and its ``--index-param`` items as an ``EngineIndex`` (None: the engine's default)."""
    if index is None:
        if params:
            raise InvalidConfigError("--index-param needs --index (the type whose build parameters they are)",
                                     parameter="index-param", value=params[0], valid="--index TYPE --index-param NAME=VALUE")
        return None
    return EngineIndex(type=index, build=parse_params(params))
