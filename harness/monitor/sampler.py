"""The sampler: a thread in the parent that polls the probes while one worker runs a trial.

It implements the executor's :class:`~harness.records.Monitor` protocol: ``start(pid)`` when the
worker is spawned, ``phase(name, t)`` whenever the worker announces a phase, ``stop()`` when the
worker is gone, returning the aggregates (trial-row columns), the per-phase summaries and the raw
samples (their keys are the ``samples`` table's columns).

Shape taken from nvitop's collector: a named daemon thread, a stop event and a lock, a drift-free
schedule (``deadline += interval``, missed ticks skipped rather than bunched). Unlike nvitop, the
clock, the wait and the probes are injected, so tests drive the thread without sleeping.

Samples are tagged with their phase when sampling stops, from the phase start times the worker
sent (its monotonic clock is the parent's on Linux), not when they are taken: a phase message reaches
the parent a little after the phase began, and tagging late would put the first samples of every
phase into the one before.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config.experiment import Experiment
from harness.errors import ConfigError, PartialReadingError, ProbeError, WorkerGoneError
from harness.monitor import nvml
from harness.monitor.probes import HostProbe, NullGpuProbe, Probe, ProcessTree, Tree
from harness.monitor.windows import BEFORE_FIRST_PHASE, Aggregator, trial_aggregates
from harness.records import Monitor, MonitorResult, TrialUnit

DEFAULT_INTERVAL_S = 0.1
MIN_INTERVAL_MS = 10.0  # below this the thread's polling (~0.1-0.5 ms a tick) takes a real share of a core
NVML_AVERAGING_NOTE = ("NVML averages GPU utilisation over 1/6 to 1 s (depending on the GPU), so sampling "
                       "more often than that repeats values")


def _clean(value: Any) -> Any:
    """NaN is not a value in JSON or SQLite: store it as NULL."""
    return None if isinstance(value, float) and math.isnan(value) else value


class Sampler:
    """Polls ``probes`` every ``interval_s`` on a daemon thread while one worker runs.

    Args:
        probes: What to read at each tick (host, GPU, replay...).
        interval_s: Time between ticks (drift-free: tick k is due at start + k * interval).
        clock: Monotonic seconds; must be the clock the worker's phase times use.
        wait: ``wait(timeout_s) -> bool``: blocks up to ``timeout_s``, True when asked to stop.
            Defaults to the stop event's wait; a test passes one that advances a fake clock.
        tree_factory: Makes the process-tree watcher for the worker's pid.
        join_timeout_s: How long ``stop()`` waits for the thread (a probe stuck in a driver call
            must not hang the sweep; what was sampled so far is returned).
        notes: Facts about the probes, stored with the trial (e.g. "no GPU ...").
    """

    def __init__(self, probes: Sequence[Probe], interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[float], bool] | None = None,
                 tree_factory: Callable[[int], Tree] = ProcessTree, join_timeout_s: float = 5.0,
                 notes: Sequence[str] = ()) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.probes = tuple(probes)
        self.interval_s = interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._tree_factory = tree_factory
        self._join_timeout_s = join_timeout_s
        self._notes = list(notes)
        self._lock = threading.Lock()
        self._samples: list[tuple[float, dict[str, Any]]] = []  # (monotonic t, readings + gap_reason)
        self._phases: list[tuple[str, float]] = []
        self._thread: threading.Thread | None = None
        self._t0: float | None = None
        self._tree: Tree | None = None
        self.end_reason = ""
        self.missed_ticks = 0

    # -------------------------------------------------------------- Monitor protocol
    def start(self, pid: int) -> None:
        """Start watching the worker ``pid`` (returns at once; sampling runs on the thread)."""
        self._t0 = self._clock()
        try:
            self._tree = self._tree_factory(pid)
        except WorkerGoneError as e:
            self.end_reason = str(e)
            return
        self._thread = threading.Thread(target=self._run, name=f"batchscope-sampler-{pid}", daemon=True)
        self._thread.start()

    def phase(self, name: str, t_monotonic: float) -> None:
        """The worker began phase ``name`` at ``t_monotonic``."""
        with self._lock:
            self._phases.append((name, float(t_monotonic)))

    def stop(self) -> MonitorResult:
        """Stop the thread (waiting at most ``join_timeout_s``) and return what was measured."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._join_timeout_s)
            if self._thread.is_alive():
                self._notes.append(f"sampler thread still busy after {self._join_timeout_s:g} s "
                                   "(a probe call hung); the samples taken until then are kept")
        if not self.end_reason:
            # one last sample where the worker still lives: the executor stops the sampler as soon as the trial's
            # result is in, before it ends the worker (issue 53); a worker already gone leaves things as they were
            if self._thread is not None and self.tick():
                self.end_reason = "stopped at the trial's result, after a last sample"
            else:
                self.end_reason = "stopped when the executor saw the worker end"
        for probe in self.probes:
            probe.close()
        with self._lock:
            samples = list(self._samples)
            phases = list(self._phases)
        return self.result(samples, phases)

    # -------------------------------------------------------------- the thread
    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - a sampler bug must not go unseen, nor touch the trial
            self.end_reason = f"sampler failed: {type(e).__name__}: {e}"
            self._notes.append(f"{self.end_reason} (samples up to then are kept)")

    def _loop(self) -> None:
        deadline = self._clock()
        while not self._stop.is_set():
            if not self.tick():
                return
            deadline += self.interval_s
            now = self._clock()
            if now > deadline:  # a tick overran (slow probe, starved thread): skip, never bunch up
                missed = int((now - deadline) // self.interval_s) + 1
                self.missed_ticks += missed
                deadline += missed * self.interval_s
            if self._wait(max(0.0, deadline - now)):
                return

    def tick(self) -> bool:
        """Take one sample now. False when sampling is over (the worker has gone)."""
        t = self._clock()
        if self._tree is None:
            return False
        try:
            pids = self._tree.refresh()
        except WorkerGoneError as e:
            self.end_reason = str(e)
            return False
        row: dict[str, Any] = {}
        gaps = []
        for probe in self.probes:
            try:
                row.update(probe.read(pids))
            except WorkerGoneError as e:
                self.end_reason = str(e)
                return False
            except PartialReadingError as e:
                row.update(e.values)
                gaps.append(f"{probe.name}: {e}")
            except ProbeError as e:
                row.update(dict.fromkeys(probe.fields, math.nan))
                gaps.append(f"{probe.name}: {e}")
        row["gap_reason"] = "; ".join(gaps) or None
        with self._lock:
            self._samples.append((t, row))
        return True

    # -------------------------------------------------------------- results
    def result(self, samples: list[tuple[float, dict[str, Any]]],
               phases: list[tuple[str, float]]) -> MonitorResult:
        """Tag, aggregate and package ``samples`` (what ``stop()`` returns)."""
        t0 = self._t0 if self._t0 is not None else (samples[0][0] if samples else 0.0)
        agg = Aggregator(self.interval_s)
        agg.extend(samples)
        windows = agg.summarise(phases)
        starts = [t for _, t in sorted(phases, key=lambda p: p[1])]
        names = [n for n, _ in sorted(phases, key=lambda p: p[1])]
        rows = []
        for t, values in samples:
            i = bisect.bisect_right(starts, t) - 1
            rows.append({"t_s": t - t0, "phase": names[i] if i >= 0 else BEFORE_FIRST_PHASE,
                         **{k: _clean(v) for k, v in values.items()}})
        aggregates = {k: _clean(v) for k, v in trial_aggregates(windows).items()}
        aggregates.update(sample_interval_ms=self.interval_s * 1000.0, samples_n=len(samples))
        gap_n = sum(1 for _, v in samples if v.get("gap_reason"))
        unsupported = {f"{p.name}.{k}": v for p in self.probes
                       for k, v in getattr(p, "unsupported", {}).items()}
        aggregates.update(_gpu_facts(self.probes, aggregates))
        return MonitorResult(
            aggregates=aggregates,
            phases={name: _json_window(w.to_dict(), t0) for name, w in windows.items()},
            samples=rows, probes=tuple(p.name for p in self.probes), notes=tuple(self._notes),
            unsupported=unsupported, gaps_n=gap_n, missed_ticks=self.missed_ticks, end_reason=self.end_reason,
            interval_ms_median=_median_gap_ms([t for t, _ in samples]),
        )


def _gpu_facts(probes: Sequence[Probe], aggregates: Mapping[str, Any]) -> dict[str, Any]:
    """The trial row's ``gpu_used`` (the GPU the NVML probe read, by index, name and UUID) and its ``readings_note``
    with the reason per-process GPU memory is NULL where no sample found a process of the worker."""
    out: dict[str, Any] = {}
    notes = [aggregates.get("readings_note")]
    for probe in probes:
        if isinstance(probe, nvml.NvmlProbe):
            out["gpu_used"] = probe.label
            if aggregates.get("proc_gpu_mem_peak_mib") is None and nvml.NO_PID_KEY in probe.unsupported:
                notes.append(probe.unsupported[nvml.NO_PID_KEY])
    out["readings_note"] = "; ".join(n for n in notes if n) or None
    return out


def _json_window(d: dict[str, Any], t0: float) -> dict[str, Any]:
    d["start_s"] -= t0
    d["end_s"] -= t0
    return d


def _median_gap_ms(times: list[float]) -> float | None:
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    return gaps[len(gaps) // 2] * 1000.0 if gaps else None


# ------------------------------------------------------------------ the factory the CLI uses
@functools.lru_cache(maxsize=16)
def gpu_probe_factory(device: str, visible: str | None) -> tuple[Callable[[], Probe], str]:
    """(makes the GPU probe of one trial, a line that says what is sampled and why), for a trial on
    ``device`` whose worker sees ``CUDA_VISIBLE_DEVICES=visible`` (None: unset).

    Cached per process, so NVML is initialised and the device looked up once per run, not per trial.
    The cache lives in the process that runs the trials: under Ray, each node's task process makes
    its own (an NVML handle is a pointer into one process and cannot travel).
    """
    if device == "cpu":
        probe = NullGpuProbe()
        return (lambda: probe), "GPU not sampled (device = cpu)"
    try:
        nvml.ensure_initialised()
        picked = nvml.worker_device({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    except ProbeError as e:
        probe = NullGpuProbe(str(e))
        return (lambda: probe), probe.notice
    if picked is None:
        probe = NullGpuProbe("CUDA_VISIBLE_DEVICES hides every GPU")
        return (lambda: probe), probe.notice
    handle, label = picked
    line = f"GPU sampled: {label} through NVML. {NVML_AVERAGING_NOTE}"
    return (lambda: nvml.NvmlProbe(handle, label)), line


def _visible_devices(unit_env: Mapping[str, str] | None = None) -> str | None:
    """The CUDA_VISIBLE_DEVICES a worker gets: the unit's own setting, else this process's."""
    env = {**os.environ, **(unit_env or {})}
    return env.get("CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class SamplerFactory:
    """Makes the sampler of each trial unit (host probe + the GPU probe for the trial's device).

    A plain picklable object, so an executor can ship it to the node that runs the trial (Ray).
    """

    interval_s: float = DEFAULT_INTERVAL_S

    def __call__(self, unit: TrialUnit) -> Monitor:
        """A fresh sampler for ``unit``."""
        make_gpu, line = gpu_probe_factory(unit.trial.run_device, _visible_devices(unit.env))
        return Sampler([HostProbe(), make_gpu()], interval_s=self.interval_s, notes=[line])


def monitor_factory_for(exp: Experiment) -> tuple[Callable[[TrialUnit], Monitor] | None, str]:
    """(factory of the sampler that watches each trial, a notice to print once per run). The notice
    says what this process sees; a trial run elsewhere (Ray) stores its own node's line in its notes.

    Raises:
        ConfigError: ``sample_interval_ms`` is below :data:`MIN_INTERVAL_MS`.
    """
    if exp.sample_interval_ms < MIN_INTERVAL_MS:
        raise ConfigError(f"{exp.source}: sample_interval_ms = {exp.sample_interval_ms:g} is below "
                          f"{MIN_INTERVAL_MS:g} ms, where polling would take a real share of a core from "
                          "the trial (and NVML repeats values below ~167 ms anyway); use 100 (the default) "
                          "or more")
    _, gpu_line = gpu_probe_factory(exp.device, _visible_devices())
    notice = (f"{gpu_line}\nsampler: every {exp.sample_interval_ms:g} ms, the worker's process tree "
              "(CPU %, RSS) and the GPU line above")
    return SamplerFactory(exp.sample_interval_ms / 1000.0), notice
