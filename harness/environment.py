"""The machine a run happened on: CPU, memory, OS, Python and GPUs (through NVML), captured in the parent.

Framework versions are not here: the parent never imports a framework, so they come from each
worker's ``hello`` message and are stored per trial.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import psutil


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> tuple[list[dict[str, Any]], str]:
    """(GPUs seen by NVML, a note). With no GPU or no driver: ([], "no GPU: running on CPU (...)")."""
    try:
        import pynvml  # from nvidia-ml-py; not a framework
    except ImportError:
        return [], "no GPU: running on CPU (nvidia-ml-py is not installed)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return [], f"no GPU: running on CPU (NVML: {e})"
    try:
        driver = _str(pynvml.nvmlSystemGetDriverVersion())
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda_s = f"{cuda // 1000}.{(cuda % 1000) // 10}"
        except pynvml.NVMLError:
            cuda_s = "unknown"
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({"index": i, "name": _str(pynvml.nvmlDeviceGetName(h)),
                        "memory_total_mib": mem.total / 2**20, "driver": driver, "cuda_driver": cuda_s})
        note = f"{len(out)} GPU(s): " + ", ".join(g["name"] for g in out) if out else "no GPU: running on CPU"
        return out, note
    except pynvml.NVMLError as e:
        return [], f"no GPU: running on CPU (NVML failed: {e})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def capture() -> dict[str, Any]:
    """Facts about this machine, JSON-able."""
    gpu_list, note = gpus()
    first = gpu_list[0] if gpu_list else {}
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpu_list,
        "gpu_name": first.get("name"),
        "gpu_memory_mib": first.get("memory_total_mib"),
        "driver": first.get("driver"),
        "cuda_driver": first.get("cuda_driver"),
        "gpu_note": note,
    }
