"""The sampler's vocabulary: every field it measures, once (name with unit, source, statistic).

Pure data: the probes, the windows, the store's columns and the report's metrics are derived from here,
and anything may import it (the report too) without loading a probe, NVML or a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NO_GPU_NOTICE = "no GPU: running on CPU — GPU columns will be empty"


Source = Literal["nvml", "host"]
#: how the trial row summarises a field: the mean over the timed phase, the peak over the training phases
#: (warm-up, timed, rest of the epochs), the timed phase's energy from the cumulative counter, or not at all
Statistic = Literal["timed-mean", "training-peak", "timed-counter", "none"]
#: where the report shows a field's trial column: one of its two headline tables, and the figures it is a panel of
#: (by figure key). The report's metric list, tables and figures follow from these, so a new sampler metric needs
#: this table and its probe, nothing in report/
Shown = Literal["speed table", "memory table", "gpu_util figure", "gpu_memory figure", "host figure"]


@dataclass(frozen=True)
class Field:
    """One quantity the sampler reads, with its unit in the name (``gpu_mem_used_mib``)."""

    name: str  # the sample's column (``samples`` table) and the probe's reading
    unit: str
    source: Source
    label: str  # how the report names it
    statistic: Statistic
    trial_column: str | None = None  # the trial row's column that summarises it (None: samples only)
    fmt: str = ".1f"  # how the report prints it
    shown: tuple[Shown, ...] = ()  # where the report shows its trial column (none: stored and exported only)


FIELDS: tuple[Field, ...] = (
    Field("gpu_util_pct", "%", "nvml", "GPU utilisation (NVML)", "timed-mean", "gpu_util_pct",
          shown=("speed table", "gpu_util figure")),
    Field("gpu_mem_util_pct", "%", "nvml", "GPU memory-controller utilisation", "timed-mean", "gpu_mem_util_pct",
          shown=("speed table", "gpu_util figure")),
    Field("gpu_mem_used_mib", "MiB", "nvml", "device memory used", "training-peak", "gpu_mem_used_peak_mib",
          ".0f", shown=("memory table", "gpu_memory figure")),
    Field("gpu_mem_total_mib", "MiB", "nvml", "device memory total", "none"),
    Field("proc_gpu_mem_mib", "MiB", "nvml", "worker-tree GPU memory", "training-peak", "proc_gpu_mem_peak_mib",
          ".0f", shown=("memory table", "gpu_memory figure")),
    Field("power_w", "W", "nvml", "GPU power", "timed-mean", "power_w", ".0f", shown=("speed table",)),
    Field("energy_mj", "mJ", "nvml", "GPU energy counter", "timed-counter", "energy_j"),
    Field("sm_clock_mhz", "MHz", "nvml", "SM clock", "none"),
    Field("temperature_c", "°C", "nvml", "GPU temperature", "none"),
    Field("cpu_util_pct", "%", "host", "CPU utilisation", "timed-mean", "cpu_util_pct", ".0f",
          shown=("speed table", "host figure")),
    Field("rss_mib", "MiB", "host", "host RSS", "training-peak", "rss_peak_mib", ".0f",
          shown=("memory table", "host figure")),
    Field("sys_mem_used_mib", "MiB", "host", "host memory used", "none"),
)
BY_NAME = {f.name: f for f in FIELDS}
NVML_FIELDS = tuple(f.name for f in FIELDS if f.source == "nvml")
HOST_FIELDS = tuple(f.name for f in FIELDS if f.source == "host")
#: the energy counter is cumulative: windows difference it instead of averaging it
COUNTER_FIELDS = tuple(f.name for f in FIELDS if f.statistic == "timed-counter")
#: series the windows summarise (mean, min, max, p95): every reading but the counters
SERIES = tuple(f.name for f in FIELDS if f.statistic != "timed-counter")
#: columns of a stored sample that are not readings (skipped when replaying a stored stream)
NOT_READINGS = ("trial_hash", "t_s", "phase", "gap_reason")
#: the ``samples`` table: identity, every reading, and why a sample is missing
SAMPLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("trial_hash", "TEXT NOT NULL"), ("t_s", "REAL"), ("phase", "TEXT"),
    *((f.name, "REAL") for f in FIELDS), ("gap_reason", "TEXT"),
)
#: the trial row's sampler columns that are not one field's statistic (harness/monitor/windows.py trial_aggregates):
#: each evaluation's own memory peaks (the training peaks leave them out), the steady phase's GPU figures after the
#: final evaluation, why a GPU reading is NULL (a window too short for NVML, no process of the worker listed), and
#: which GPU was read
WINDOW_TRIAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("gpu_mem_eval_peak_mib", "REAL"), ("proc_gpu_mem_eval_peak_mib", "REAL"),
    ("steady_window_s", "REAL"), ("steady_gpu_util_pct", "REAL"), ("steady_power_w", "REAL"),
    ("steady_energy_j", "REAL"),
    ("readings_note", "TEXT"),
    ("gpu_used", "TEXT"),  # the GPU the sampler read for the trial: its CUDA index, name and UUID
)
#: the trial row's sampler columns, beside the worker's own figures
TRIAL_COLUMNS: tuple[tuple[str, str], ...] = (
    *((f.trial_column, "REAL") for f in FIELDS if f.trial_column), *WINDOW_TRIAL_COLUMNS)


def shown_in(place: Shown, fields: tuple[Field, ...] = FIELDS) -> tuple[str, ...]:
    """The trial columns the report shows in ``place`` (a table or a figure), in the field table's order."""
    return tuple(f.trial_column for f in fields if f.trial_column and place in f.shown)


#: every trial column the report shows (its per-cell metrics), in the field table's order
SHOWN_COLUMNS = tuple(f.trial_column for f in FIELDS if f.trial_column and f.shown)
