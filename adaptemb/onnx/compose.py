"""Building graphs: a torch module to ONNX, and a backbone graph joined with a head graph into one.

``export_module`` runs ``torch.onnx.export`` (the dynamo exporter) with dynamic batch (and sequence) axes and
names them; ``compose`` joins a backbone's embedding to a head's input (``onnx.compose``) with plain input
and output names. Everything here edits ``onnx`` protos; the packages are imported inside the functions.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from adaptemb.onnx.sessions import quiet_loggers

HEAD_INPUT = "embeddings"
"""The input of a head graph (``Compressor.export_onnx``): float32 embeddings (batch, d)."""
EMBEDDING_OUTPUT = "embedding"
"""The optional output of a composed encoder: the backbone's float embedding."""
LINK = "__adaptemb_embedding__"
"""The backbone graph's output, fed to the head's input when the two are composed."""


def export_module(module: torch.nn.Module, args: tuple[torch.Tensor, ...], target: Path, inputs: Sequence[str],
                  outputs: Sequence[str], *, axes: tuple[str, ...] = ("batch",)) -> None:
    """``torch.onnx.export`` (dynamo) of ``module`` traced on ``args``, saved to ``target``: every input's leading
    axes dynamic and named ``axes`` (``("batch",)``, or ``("batch", "sequence")`` for token ids), every
    output's first axis ``batch``. Trace with a batch of at least 2 rows (a batch of 1 would be static)."""
    import onnx

    dynamic = dict.fromkeys(range(len(axes)), torch.export.Dim.DYNAMIC)
    with warnings.catch_warnings(), quiet_loggers():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, args, dynamo=True, input_names=list(inputs), output_names=list(outputs),
            dynamic_shapes=tuple(dynamic for _ in args), verbose=False,
        )
    assert program is not None
    model = program.model_proto
    for value in model.graph.input:
        name_axes(value, axes)
    for value in model.graph.output:
        name_axes(value, ("batch",))
    onnx.save(model, str(target))


def compose(backbone: Any, head: Any, inputs: Sequence[str], outputs: Sequence[str], embedding: bool) -> Any:
    """One graph: the backbone's embedding (``LINK``) into the head's input (``HEAD_INPUT``); plain input and
    output names, the head's outputs first, then ``EMBEDDING_OUTPUT`` when ``embedding``."""
    from onnx import compose as onnx_compose

    head.ir_version = backbone.ir_version = max(head.ir_version, backbone.ir_version)
    align_opsets(backbone, head)
    wanted = [f"head/{name}" for name in outputs] + ([f"backbone/{LINK}"] if embedding else [])
    merged = onnx_compose.merge_models(
        backbone, head, io_map=[(LINK, HEAD_INPUT)], prefix1="backbone/", prefix2="head/", outputs=wanted,
    )
    renames = {f"backbone/{name}": name for name in inputs}
    renames.update({f"head/{name}": name for name in outputs})
    renames[f"backbone/{LINK}"] = EMBEDDING_OUTPUT
    rename_values(merged.graph, renames)
    _order_outputs(merged.graph, [*outputs, *([EMBEDDING_OUTPUT] if embedding else [])])
    for value in merged.graph.input:
        name_axes(value, ("batch", "sequence"))
    for value in merged.graph.output:
        name_axes(value, ("batch",))
    return merged


def _order_outputs(graph: Any, order: list[str]) -> None:
    ordered = sorted(graph.output, key=lambda value: order.index(value.name))
    copies = [type(value)() for value in ordered]
    for copy, value in zip(copies, ordered):
        copy.CopyFrom(value)
    del graph.output[:]
    graph.output.extend(copies)


def align_opsets(*models: Any) -> None:
    """The same version of every opset domain in every model (the highest any of them imports)."""
    versions: dict[str, int] = {}
    for model in models:
        for entry in model.opset_import:
            versions[entry.domain] = max(versions.get(entry.domain, 0), entry.version)
    for model in models:
        del model.opset_import[:]
        for domain, version in versions.items():
            entry = model.opset_import.add()
            entry.domain, entry.version = domain, version


def rename_values(graph: Any, renames: dict[str, str]) -> None:
    """Rename values wherever they occur (node inputs and outputs, subgraphs, graph inputs and outputs)."""
    for node in graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        node.output[:] = [renames.get(name, name) for name in node.output]
        for attribute in node.attribute:
            for sub in [attribute.g, *attribute.graphs]:
                if sub is not None:
                    rename_values(sub, renames)
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = renames.get(value.name, value.name)


def name_axes(value: Any, names: tuple[str, ...]) -> None:
    """Name the leading axes of a graph input or output that have no fixed size."""
    dims = value.type.tensor_type.shape.dim
    for dim, name in zip(dims, names):
        if not dim.HasField("dim_value"):
            dim.dim_param = name


def load_model(path: Path) -> Any:
    import onnx

    return onnx.load(str(path))


def save_model(model: Any, target: Path) -> None:
    import onnx

    onnx.save(model, str(target))


def value_types(values: Any) -> dict[str, str]:
    """Each graph input or output as ``"dtype (axes)"``, e.g. ``"uint8 (batch, 8)"``."""
    import onnx

    described = {}
    for value in values:
        tensor = value.type.tensor_type
        dims = [d.dim_param or str(d.dim_value) for d in tensor.shape.dim]
        described[value.name] = f"{onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name} ({', '.join(dims)})"
    return described
