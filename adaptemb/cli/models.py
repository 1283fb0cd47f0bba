"""Commands that manage compressors: plugins, fit, compress, export-onnx, export-encoder, info."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from adaptemb.api import fit as fit_compressor
from adaptemb.api import list_compressors, load
from adaptemb.cli.app import app
from adaptemb.cli.errors import friendly_errors
from adaptemb.cli.options import (
    BackboneOption,
    BudgetOption,
    ByteBudgetsOption,
    BytesOption,
    CompressorOption,
    InputDimOption,
    InputKindOption,
    InputOffsetOption,
    InputOption,
    InputScaleOption,
    KeyOption,
    OldBackboneOption,
    OldCompressorOption,
    Quantize,
    budget_within,
    chosen,
    deprecated,
    flag,
    input_options,
    parse_ints,
)
from adaptemb.cli.output import console, plural, print_report, write_json
from adaptemb.config import parse_params
from adaptemb.data import load_embeddings
from adaptemb.onnx.backbones import Modality
from adaptemb.progress import progress_bar
from adaptemb.rows import RowStream
from adaptemb.serialization import save_codes
from adaptemb.streaming import Engine, Side

PARITY_FAILED = 1
"""Exit code of export-encoder when the graph it wrote misses its parity bar (errors exit with 2)."""
COMPRESS_ROWS = 65_536
"""Rows ``compress`` encodes at a time (``Compressor.encode``'s own batch: the codes are the same)."""
ParamOption = Annotated[
    list[str] | None,
    typer.Option("--param", "-p", help="A method parameter as NAME=VALUE (repeatable), e.g. -p k=64."),
]


@app.command("plugins")
@friendly_errors
def plugins_command() -> None:
    """List the registered compressors, what their budget means and which package registered each."""
    table = Table(title="adaptemb compressors")
    for column in ("method", "budget k", "summary", "registered by"):
        table.add_column(column)
    for info in list_compressors():
        source = f"{info.source.package} {info.source.version}" if info.source.package else info.source.plugin
        table.add_row(info.name, info.budgets, info.summary, source)
    console.print(table)


@app.command("fit")
@friendly_errors
def fit_command(
    method: Annotated[str, typer.Option("--method", "-m", help="Registered method name (see `adaptemb plugins`).")],
    input_path: InputOption,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the fitted compressor (.safetensors).")],
    param: ParamOption = None,
    nbytes: ByteBudgetsOption = None,
    key: KeyOption = None,
    stream: Annotated[bool, flag("stream", "Read the file chunk by chunk instead of loading it (files larger "
                                 "than memory; any format --input reads): methods that train by minibatches "
                                 "read every row, the others fit a uniform sample.")] = False,
    engine: Annotated[Engine, typer.Option("--engine", help="With --stream: local (this process reads) or ray (Ray "
                                           "Data reads .parquet / .npy; pip install 'adaptemb\\[ray]').")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="A Ray cluster for --engine ray; default: start Ray here.")] = None,
    pair_queries: Annotated[Path | None, typer.Option(
        "--pair-queries", help="Query embeddings of labelled (query, document) pairs, row i paired with row i of "
        "--pair-documents (methods that learn from pairs, e.g. csr, cllr).")] = None,
    pair_documents: Annotated[Path | None, typer.Option(
        "--pair-documents", help="The document embeddings of those pairs, one row per query.")] = None,
    labels: Annotated[Path | None, typer.Option(
        "--labels", help="One integer class label per input row (.npy or .npz), for methods that learn from labels.")] = None,
    queries: Annotated[Path | None, typer.Option(
        "--queries", help="An unlabelled sample of real query embeddings (any embedding file): csr judges its "
        "fit-time choices by how much of each query's exact top-10 a candidate finds; compositions before sign bits "
        "(svd+binary, ...) report their codes' recall of it (it no longer chooses their stages); other methods "
        "refuse it.")] = None,
    report: Annotated[Path | None, typer.Option(
        "--report", help="Also write the whole fit report (every loss and statistic) to this JSON file.")] = None,
    input_kind: InputKindOption = "float",
    input_scale: InputScaleOption = None,
    input_offset: InputOffsetOption = None,
    input_dim: InputDimOption = None,
) -> None:
    """Fit a compressor on an embedding file and save it as one safetensors file."""
    params = parse_params(param or [])
    inputs = input_options(input_kind, input_scale, input_offset, input_dim)
    if stream and input_kind != "float":
        raise ValueError("--stream reads float embeddings; integer embeddings (--input-kind) are fitted in memory")
    if not stream and (engine != "local" or ray_address is not None):
        raise ValueError("--engine and --ray-address choose how a stream is read: add --stream")
    supervision = _supervision(pair_queries, pair_documents, labels, queries)
    for_bytes: dict[str, Any] = {} if nbytes is None else {"bytes": parse_ints(nbytes, "--bytes")}
    if stream:
        ray = engine == "ray"
        source: Any = RowStream.through_ray(input_path, key=key, address=ray_address) if ray else input_path
        compressor = fit_compressor(source, method, key=None if ray else key, **for_bytes, **supervision, **params)
    else:
        compressor = fit_compressor(load_embeddings(input_path, key=key), method, **for_bytes, **supervision,
                                    **inputs, **params)
    compressor.save(output)
    budgets = compressor.budgets()
    console.print(
        f"fitted [bold]{method}[/] on d={compressor.dim}; budgets {budgets.describe()}; saved to {output}"
    )
    if compressor.fit_report:
        print_report(compressor.fit_report)
        if report is not None:
            write_json(report, compressor.fit_report)
            console.print(f"whole fit report in {report}")


def _supervision(pair_queries: Path | None, pair_documents: Path | None, labels: Path | None,
                 queries: Path | None = None) -> dict[str, Any]:
    """The ``pairs`` / ``labels`` / ``queries`` keyword arguments of ``fit`` read from the files the options name."""
    if (pair_queries is None) != (pair_documents is None):
        raise ValueError("pairs need both --pair-queries and --pair-documents (row i of one is paired with row i "
                         "of the other)")
    supervision: dict[str, Any] = {}
    if pair_queries is not None and pair_documents is not None:
        supervision["pairs"] = (load_embeddings(pair_queries), load_embeddings(pair_documents))
    if labels is not None:
        supervision["labels"] = load_embeddings(labels)
    if queries is not None:
        supervision["queries"] = load_embeddings(queries)
    return supervision


@app.command("compress")
@friendly_errors
def compress_command(
    input_path: InputOption,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the codes (.npz, see docs/guide.md).")],
    compressor: CompressorOption = None,
    k: BudgetOption = None,
    nbytes: BytesOption = None,
    side: Annotated[Side, typer.Option(
        "--side", help="doc: document codes (encode); query: query codes (encode_queries), which asymmetric "
        "methods (csr, bsa) make differently.")] = "doc",
    key: KeyOption = None,
    input_kind: InputKindOption = "float",
    input_scale: InputScaleOption = None,
    input_offset: InputOffsetOption = None,
    input_dim: InputDimOption = None,
    old_model: OldCompressorOption = None,
) -> None:
    """Encode an embedding file with a fitted compressor and write the codes file (all in memory; for files
    larger than memory use `adaptemb encode`)."""
    fitted = load(chosen(compressor, old_model, new="--compressor/-c", old="--model"))
    k = budget_within(fitted, k, nbytes)
    inputs = input_options(input_kind, input_scale, input_offset, input_dim)
    embeddings = load_embeddings(input_path, key=key)
    encode = fitted.encode if side == "doc" else fitted.encode_queries
    parts = []
    with progress_bar(total=len(embeddings), desc=f"encode {fitted.name}", unit="rows", unit_scale=True) as bar:
        for start in range(0, max(len(embeddings), 1), COMPRESS_ROWS):  # rows in memory; batches show progress
            parts.append(encode(embeddings[start : start + COMPRESS_ROWS], k=k, **inputs))
            bar.update(len(parts[-1]))
    codes = parts[0] if len(parts) == 1 else type(parts[0]).concat(parts)
    save_codes(codes, output)
    picked = f" at k={k} (the largest within {nbytes} bytes)" if nbytes is not None else ""
    console.print(
        f"wrote {plural(len(codes), f'{codes.kind} {side} code')} (dim {codes.dim}){picked} to {output}: "
        f"{codes.bytes_per_vector:.1f} bytes per vector, {codes.nbytes:,} bytes in all"
    )


@app.command("export-onnx")
@friendly_errors
def export_onnx_command(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the ONNX encoder (.onnx).")],
    compressor: CompressorOption = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Budget the encoder emits (default: the method's).")] = None,
    nbytes: BytesOption = None,
    sample: Annotated[
        Path | None, typer.Option("--sample", help="Embeddings to check onnxruntime parity on (default: random rows).")
    ] = None,
    key: KeyOption = None,
    old_model: OldCompressorOption = None,
) -> None:
    """Export a fitted compressor as an ONNX graph (embeddings in, codes out), checked against onnxruntime
    before it is written. For text or images in, use export-encoder."""
    path = chosen(compressor, old_model, new="--compressor/-c", old="--model")
    rows = load_embeddings(sample, key=key) if sample is not None else None
    fitted = load(path)
    parity = fitted.export_onnx(output, k=budget_within(fitted, k, nbytes), sample=rows)
    console.print(f"wrote {output}; {parity}")


@app.command("export", hidden=True)
@friendly_errors
def export_command(
    output: Annotated[Path, typer.Option("--output", "-o")],
    compressor: CompressorOption = None,
    k: Annotated[int | None, typer.Option("--k", "-k")] = None,
    sample: Annotated[Path | None, typer.Option("--sample")] = None,
    key: KeyOption = None,
    old_model: OldCompressorOption = None,
) -> None:
    """Deprecated spelling of export-onnx."""
    deprecated("adaptemb export", "adaptemb export-onnx")
    export_onnx_command(output, compressor, k, None, sample, key, old_model)


@app.command("export-encoder")
@friendly_errors
def export_encoder_command(
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Where to write the ONNX encoder (.onnx); text models also get tokenizer.json beside it.")],
    compressor: CompressorOption = None,
    backbone: BackboneOption = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="Budget the encoder emits (default: the method's).")] = None,
    nbytes: BytesOption = None,
    modality: Annotated[Modality, typer.Option(
        "--modality", help="auto: image for efficientnet-lite0, timm:, open_clip: and timm folders, else text.")] = "auto",
    quantize: Annotated[Quantize, typer.Option(
        "--quantize", help="dynamic: quantise the backbone's weights to int8 (onnxruntime) and report the size, speed "
        "and code agreement of the int8 graph; below its parity bar the file is still written, the output says "
        "FAILED and the exit code is 1.")] = "none",
    sample: Annotated[Path | None, typer.Option(
        "--sample", help="Inputs to check parity on: a text file (one text per line) or an .npy of images "
        "(default: built-in sentences / Fashion-MNIST test images).")] = None,
    with_embedding: Annotated[bool, flag(
        "with-embedding", "Also output the float embedding (`embedding`), e.g. for asymmetric scoring.")] = False,
    weights: Annotated[Path | None, typer.Option("--weights", help="Image models: a local weights file.")] = None,
    image_size: Annotated[int | None, typer.Option("--image-size", min=16, help="Image models: input size in px.")] = None,
    old_model: OldBackboneOption = None,
) -> None:
    """Export a backbone and a fitted compressor as one ONNX graph: token ids or pixels in, codes out."""
    from adaptemb.encoder_export import export_encoder  # the onnx extra

    path = chosen(compressor, None, new="--compressor/-c", old="")
    fitted: Any = path
    if nbytes is not None:  # the budget is picked by the fitted compressor itself
        fitted = load(path)
        k = budget_within(fitted, k, nbytes)
    model = chosen(backbone, old_model, new="--backbone", old="--model", required=False)
    items: Any = None
    if sample is not None:
        if sample.suffix == ".npy":
            items = np.load(sample, allow_pickle=False)
        else:
            items = [line for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
    result = export_encoder(
        model, fitted, output, k=k, modality=modality,
        quantize=None if quantize == "none" else quantize,
        sample=items, include_embedding=with_embedding, weights=weights, image_size=image_size,
    )
    console.print(str(result), markup=False, highlight=False)
    if not result.passed:
        raise typer.Exit(code=PARITY_FAILED)


@app.command("info")
@friendly_errors
def info_command(
    compressor: Annotated[Path, typer.Argument(help="A fitted compressor file.", metavar="COMPRESSOR")],
) -> None:
    """Show what a fitted compressor file holds: method, config, dimension, budgets and its details."""
    fitted = load(compressor)
    budgets = fitted.budgets()
    console.print(f"method: [bold]{fitted.name}[/]  dim: {fitted.dim}")
    console.print(f"budgets: {budgets.describe()}")
    console.print(f"config: {fitted.config.model_dump_json()}", markup=False, highlight=False)
    for name, value in fitted.details().items():  # a list: one item a line
        lines = [f"  {json.dumps(item)}" for item in value] if isinstance(value, list) else []
        console.print("\n".join([f"{name}:{'' if lines else ' ' + json.dumps(value)}", *lines]), markup=False, highlight=False)

