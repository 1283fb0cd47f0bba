"""Dynamic int8 quantisation of a backbone graph (onnxruntime) and what it changed: size, speed, parity.

``adaptemb.export_encoder(..., quantize="dynamic")`` quantises the backbone alone (the head stays exact),
composes it with the head again and measures the result against the float graph and the torch pipeline
(``QuantizationReport``): the quantised graph's parity is held to the quantised bar
(``adaptemb.onnx.parity.QUANTIZED_MIN_AGREEMENT`` / ``QUANTIZED_MIN_COSINE``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adaptemb.onnx.parity import EncoderParity, ParityCheck, compare_codes
from adaptemb.onnx.sessions import quiet_loggers, run_session, session

QUANTIZE_OPTIONS = {"weight_type": "QInt8", "per_channel": True}
"""``onnxruntime.quantization.quantize_dynamic`` settings of ``quantize="dynamic"`` (recorded in the metadata).

Weights are quantised per output channel: on MiniLM that kept a mean cosine of 0.992 to the float embedding
(0.960 per tensor) at the same size and speed."""
_TIMING_ROUNDS = 2


@dataclass(frozen=True)
class QuantizationReport:
    """What ``quantize="dynamic"`` changed, measured on the sample inputs."""

    method: str
    options: dict[str, Any]
    float_bytes: int
    quantized_bytes: int
    float_seconds: float
    """Best of two onnxruntime runs (after a warm-up) of the float graph over the whole sample."""
    quantized_seconds: float
    torch_seconds: float
    """Best of two runs of the torch pipeline (encoder, then ``compressor.encode``) over the sample."""
    threads: int
    parity: EncoderParity
    """The quantised graph (the one written) against the torch pipeline, held to the quantised bar."""
    float_parity: EncoderParity | None = None
    """The float graph it was quantised from (held to the float bar before quantising)."""

    @property
    def size_ratio(self) -> float:
        return self.float_bytes / self.quantized_bytes

    @property
    def speedup(self) -> float:
        """Quantised over float onnxruntime throughput."""
        return self.float_seconds / self.quantized_seconds

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "size_ratio": self.size_ratio, "speedup": self.speedup}

    def __str__(self) -> str:
        return (
            f"dynamic int8 quantisation: {self.float_bytes / 1e6:.1f} MB -> {self.quantized_bytes / 1e6:.1f} MB, "
            f"{self.speedup:.2f}x the float graph's speed on the sample ({self.threads} thread"
            f"{'s' if self.threads != 1 else ''}; torch "
            f"{self.torch_seconds * 1e3:.0f} ms, onnxruntime {self.float_seconds * 1e3:.0f} ms -> "
            f"{self.quantized_seconds * 1e3:.0f} ms)"
        )


def quantize_backbone(source: Path, target: Path) -> None:
    """onnxruntime's dynamic int8 quantisation of the graph at ``source`` (``QUANTIZE_OPTIONS``) into ``target``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_loggers():
        quantize_dynamic(str(source), str(target), weight_type=QuantType[QUANTIZE_OPTIONS["weight_type"]],
                         per_channel=QUANTIZE_OPTIONS["per_channel"])


def measure(float_path: Path, quantized_path: Path, check: ParityCheck, output_names: Sequence[str],
            pipeline: Callable[[], object], float_parity: EncoderParity) -> QuantizationReport:
    """The quantised graph's parity (at the quantised bar), the sizes of both graphs, and the best time of each
    graph and of the torch ``pipeline`` over the sample (``check.feeds``, ``check.threads`` threads)."""
    float_session, quantized_session = session(float_path, check.threads), session(quantized_path, check.threads)
    run_session(float_session, check.feeds, output_names)  # warm-up
    outputs = run_session(quantized_session, check.feeds, output_names)  # the quantised graph's warm-up too
    parity = compare_codes(outputs, check.expected, reference=check.reference, quantized=True)
    return QuantizationReport(
        method="dynamic",
        options=dict(QUANTIZE_OPTIONS),
        float_bytes=float_path.stat().st_size,
        quantized_bytes=quantized_path.stat().st_size,
        float_seconds=best_time(lambda: run_session(float_session, check.feeds, output_names)),
        quantized_seconds=best_time(lambda: run_session(quantized_session, check.feeds, output_names)),
        torch_seconds=best_time(pipeline),
        threads=check.threads,
        parity=parity,
        float_parity=float_parity,
    )


def best_time(run: Callable[[], object]) -> float:
    """Best of ``_TIMING_ROUNDS`` runs (run once before: warm)."""
    best = float("inf")
    for _ in range(_TIMING_ROUNDS):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best
