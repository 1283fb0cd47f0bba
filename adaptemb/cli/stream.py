"""``adaptemb encode`` (stream embedding files of any size through a fitted compressor into parquet shards)
and ``adaptemb export-codes`` (codes into a vector database)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from adaptemb.api import load_codes
from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.models import KeyOption, Side, console
from adaptemb.streaming import encode_files, read_code_shards
from adaptemb.vectordb import export_codes


@app.command("encode")
@friendly_errors
def encode_command(
    inputs: Annotated[list[Path], typer.Option("--input", "-i", help="Embedding files (.npy, .parquet, .safetensors), "
                                               "read in the order given; repeat for several shards.")],
    compressor: Annotated[Path, typer.Option("--compressor", "--model", help="A fitted compressor file from `adaptemb fit`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the code shards (part-*.parquet) and manifest.json.")],
    k: Annotated[int | None, typer.Option("--k", "-k", help="Budget: active dims per code (default: the method's).")] = None,
    side: Annotated[Side, typer.Option("--side", help="doc: document codes; query: query codes (encode_queries).")] = Side.doc,
    key: KeyOption = None,
    shard_rows: Annotated[int, typer.Option("--shard-rows", help="Rows per output shard (the unit of resume).")] = 262_144,
    batch_rows: Annotated[int, typer.Option("--batch-rows", help="Rows encoded at a time (bounds memory).")] = 16_384,
    engine: Annotated[str, typer.Option("--engine", help="local: this process; ray: Ray Data actors (pip install 'adaptemb\\[ray]').")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="A Ray cluster (e.g. ray://head:10001); default: start Ray here.")] = None,
) -> None:
    """Encode embedding files shard by shard with bounded memory; re-run the same command to resume."""
    result = encode_files(inputs, compressor, out, k=k, side=side.value, key=key, shard_rows=shard_rows,
                          batch_rows=batch_rows, engine=engine, ray_address=ray_address)  # type: ignore[arg-type]
    console.print(
        f"encoded {result.rows:,} rows in {result.seconds:.1f} s ({result.rows_per_second:,.0f} rows/s): "
        f"{result.shards_written} shards written, {result.shards_skipped} already done, in {result.out}"
    )


@app.command("export-codes")
@friendly_errors
def export_codes_command(
    codes_path: Annotated[Path, typer.Option("--codes", help="Codes: an .npz from `adaptemb compress` or a folder from `adaptemb encode`.")],
    to: Annotated[str, typer.Option("--to", help="The vector database: qdrant or milvus.")] = "qdrant",
    location: Annotated[str, typer.Option("--location", help="Qdrant: a local folder (embedded), :memory:, or a server URL. "
                                          "Milvus: a local file ending in .db (Milvus Lite) or a server URI "
                                          "(http://host:19530).")] = ":memory:",
    collection: Annotated[str, typer.Option("--collection", help="Collection to create.")] = "adaptemb",
    recreate: Annotated[bool, typer.Option("--recreate", help="Replace the collection if it exists.")] = False,
) -> None:
    """Write codes into a vector database collection (ids = row numbers): Qdrant or Milvus (the qdrant / milvus extra)."""
    if codes_path.is_dir():
        codes, ids = read_code_shards(codes_path, ids=True)
    else:
        codes, ids = load_codes(codes_path), None
    export_codes(codes, to=to, location=location, collection=collection, ids=ids, recreate=recreate)
    console.print(f"wrote {len(codes):,} {codes.kind} codes into {to} collection {collection!r} at {location}")
