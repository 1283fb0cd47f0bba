"""onnxruntime: whether the ONNX packages are installed, a CPU session, and running a graph on named inputs.

The ONNX packages are an extra (``pip install 'adaptemb[onnx]'``): they are imported inside the functions
that need them, never when adaptemb starts.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ONNX_PACKAGES = ("onnx", "onnxruntime", "onnxscript")


def require_onnx() -> None:
    """``ModuleNotFoundError`` with the install command when the ONNX packages are missing."""
    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ModuleNotFoundError(f"ONNX export needs {', '.join(missing)}: pip install 'adaptemb[onnx]'")


def session(model_path: str | Path, threads: int = 0) -> Any:
    """An onnxruntime CPU session of the graph at ``model_path`` (``threads`` 0: onnxruntime's default)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def run(model_path: str | Path, feeds: Mapping[str, np.ndarray], names: Sequence[str], threads: int = 0,
        ) -> dict[str, np.ndarray]:
    """The outputs ``names`` of the graph at ``model_path`` on ``feeds`` (input name -> array)."""
    return run_session(session(model_path, threads), feeds, names)


def run_session(graph: Any, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    """The outputs ``names`` of an open session on ``feeds``."""
    return dict(zip(names, graph.run(list(names), dict(feeds))))


def run_onnx(model_path: str | Path, rows: np.ndarray, names: Sequence[str], threads: int = 0) -> dict[str, np.ndarray]:
    """The named outputs of a graph with one input (an exported head: float32 rows (n, d)) on ``rows``."""
    graph = session(model_path, threads)
    return run_session(graph, {graph.get_inputs()[0].name: rows}, names)


@contextmanager
def quiet_loggers() -> Iterator[None]:
    """Silence the INFO/WARNING chatter of the exporter and the quantiser (root logger included)."""
    loggers = [logging.getLogger(), logging.getLogger("torch.onnx"), logging.getLogger("onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
