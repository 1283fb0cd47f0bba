"""What machine a measurement ran on: CPU, cores, memory, GPU, library versions, load."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import scipy
import torch

import adaptemb


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def _gpu() -> dict[str, Any] | None:
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gb": round(props.total_memory / 2**30, 1), "count": torch.cuda.device_count(),
            "cuda": torch.version.cuda}


def machine_info() -> dict[str, Any]:
    """A JSON-ready description of this machine and the library versions in use."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": usable,
        "memory_gb": _memory_gb(),
        "gpu": _gpu(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "torch_threads": torch.get_num_threads(),
        "faiss_threads": faiss.omp_get_max_threads(),
        "faiss_gpu": hasattr(faiss, "StandardGpuResources"),
        "versions": {
            "python": platform.python_version(),
            "adaptemb": adaptemb.__version__,
            "torch": torch.__version__,
            "faiss": faiss.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
        },
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def describe(info: dict[str, Any]) -> str:
    """One line: CPU (cores), GPU or 'no GPU', torch/faiss versions."""
    gpu = info["gpu"]["name"] if info.get("gpu") else "no GPU"
    v = info["versions"]
    return f"{info['cpu']} ({info['cpu_cores_usable']} cores), {gpu}; torch {v['torch']}, faiss {v['faiss']}"
