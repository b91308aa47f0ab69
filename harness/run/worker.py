"""The worker: runs exactly one trial in a fresh process, then exits.

Started by the parent as ``python -m harness.run.worker --fd N`` with the request (JSON) on stdin; it
answers on file descriptor N with the messages of :mod:`harness.run.protocol`. This is the only module
under ``harness`` that ends up importing a framework, and it does so through the adapter.

A trial's steps draw batches from the parent-written index order: warm-up steps first (not counted
in the figures), then timed steps, then (when ``epochs`` > 0) the rest of the epochs. Both throughput
figures count every post-warm-up step, timed and rest alike (:mod:`harness.run.timing`); the "timed"
phase is the window the sampler's GPU aggregates describe. Warm-up and
timed steps are real training steps, so an epoch is still every training sample seen exactly once.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np

from adapters import fpenv
from adapters.base import Adapter, PrecisionSeen, RuntimeConfig
from harness.config.precision import check_observed
from harness.config.trial import TrialSpec
from harness.data import PreparedData
from harness.data.augment import Augmenter
from harness.errors import ConfigError
from harness.flops import train_flop_per_sample
from harness.models import ModelDescription, build_description, init_weights, is_native_model
from harness.models.native import PREFIX as NATIVE_PREFIX
from harness.records import WorkerMetrics
from harness.run.planner import plan_steps
from harness.run.protocol import PROGRESS_INTERVAL_S, Channel, ProgressTicker
from harness.run.timing import drift, step_figures

MIB = 1024.0 * 1024.0


def batch_indices(order: np.ndarray, batch_size: int, epochs: int, steps: int) -> Iterator[np.ndarray]:
    """Index batches: every sample once per epoch (last batch may be short); or, with ``epochs`` = 0,
    ``steps`` full batches cycling through the first order row."""
    n = order.shape[1]
    if epochs > 0:
        for e in range(epochs):
            perm = order[e]
            for start in range(0, n, batch_size):
                yield perm[start : start + batch_size]
        return
    perm = order[0]
    for step in range(steps):
        yield perm[(step * batch_size + np.arange(batch_size)) % n]


def epoch_of(step: int, n_train: int, batch_size: int, epochs: int) -> int:
    """The epoch that step ``step`` of :func:`batch_indices` belongs to (augmentation is drawn per epoch)."""
    if epochs > 0:
        return step // -(-n_train // batch_size)
    return (step * batch_size) // n_train


def micro_batches(idx: np.ndarray, size: int) -> list[np.ndarray]:
    """An update's indices cut into micro-batches of ``size`` (the last may be shorter, as an epoch's last batch)."""
    return [idx[start : start + size] for start in range(0, len(idx), size)]


class StepRunner:
    """One optimizer update from one index batch: augment, move to the device (untimed), then train (timed).

    With ``accumulate_steps`` = k the index batch holds k micro-batches; each is moved and run through
    forward and backward in turn (only one is on the device at a time), weighted by its share of the
    samples so that the update is the one of the mean loss over all of them, then the optimizer steps once.
    """

    def __init__(self, adapter: Adapter, trial: TrialSpec, x: np.ndarray, y: np.ndarray, n_train: int) -> None:
        self.adapter, self.trial, self.x, self.y = adapter, trial, x, y
        self.augment = Augmenter(trial.augment, trial.augment_pad_px, trial.seed, n_train)
        self.n_train = n_train
        self.micro_batches_n = 0  # forward/backward passes run (equal to the updates without accumulation)

    def _batch(self, idx: np.ndarray, epoch: int) -> Any:
        self.micro_batches_n += 1
        return self.adapter.prepare_batch(self.augment(self.x[idx], idx, epoch), self.y[idx])

    def other_shapes(self) -> list[int]:
        """Batch sizes the training will prepare besides the full (micro-)batch: an epoch's short last batch.

        An adapter that compiles per shape (JAX: one XLA executable per batch size) does so in
        ``prepare_batch``; :meth:`warm_shapes` has it done before the training clock starts, like the
        full size's compilation in the warm-up steps, so a one-time compile is not counted as training.
        """
        t = self.trial
        if t.epochs <= 0:
            return []  # full batches only (cycling through the data)
        last = self.n_train % t.effective_batch_size
        sizes = {len(part) for part in micro_batches(np.arange(last), t.batch_size)} if last else set()
        return sorted(sizes - {t.batch_size})

    def warm_shapes(self) -> None:
        """Prepare one batch of each of :meth:`other_shapes` (no training step: the weights do not change)."""
        for size in self.other_shapes():
            self.adapter.prepare_batch(self.x[:size], self.y[:size])

    def run(self, step: int, idx: np.ndarray) -> tuple[float, float]:
        """Run one update; returns (data seconds, step seconds)."""
        t = self.trial
        epoch = epoch_of(step, self.n_train, t.effective_batch_size, t.epochs)
        if t.accumulate_steps == 1:
            t0 = time.perf_counter()
            batch = self._batch(idx, epoch)
            t1 = time.perf_counter()
            self.adapter.train_step(batch)
            return t1 - t0, time.perf_counter() - t1
        data_s = step_s = 0.0
        for part in micro_batches(idx, t.batch_size):
            t0 = time.perf_counter()
            batch = self._batch(part, epoch)
            t1 = time.perf_counter()
            self.adapter.accumulate_gradients(batch, len(part) / len(idx))
            data_s, step_s = data_s + t1 - t0, step_s + time.perf_counter() - t1
        t1 = time.perf_counter()
        self.adapter.apply_accumulated()
        return data_s, step_s + time.perf_counter() - t1


def _load_adapter(target: str) -> Adapter:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)()  # type: ignore[no-any-return]


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _proc_status_mib(*keys: str) -> dict[str, float | None]:
    """Current ``VmData``/``VmRSS``... of this process in MiB (Linux ``/proc``; None elsewhere)."""
    out: dict[str, float | None] = dict.fromkeys(keys)
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in out:
                    out[key] = float(value.split()[0]) / 1024.0  # kB
    except OSError:
        pass
    return out


class VmDataWatcher:
    """The highest ``VmData`` of this process while it trains, sampled in a thread (Linux ``/proc``).

    RLIMIT_DATA counts ``VmData``; what training maps and unmaps again between two reads of the figures
    at the step boundaries (a framework's scratch arenas, reserved-but-untouched mappings) is only seen
    while the step runs. One read costs ~10 us (``pread`` on an fd opened once), so every millisecond
    costs ~1% of a core; it runs only in trials under an OS memory limit (max-batch probes on CPU), never
    in timed sweeps. A spike shorter than the interval can still be missed: this is a lower bound.
    """

    _PATTERN = re.compile(rb"VmData:\s+(\d+)")

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.peak_kib: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    def _read_kib(self) -> int | None:
        assert self._fd is not None
        match = self._PATTERN.search(os.pread(self._fd, 16384, 0))
        return int(match.group(1)) if match else None

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self._sample()
        except BaseException:  # noqa: BLE001 - near the limit even a read may fail; the peak so far stands
            return

    def _sample(self) -> None:
        kib = self._read_kib()
        if kib is not None and (self.peak_kib is None or kib > self.peak_kib):
            self.peak_kib = kib

    def start(self) -> VmDataWatcher:
        try:
            self._fd = os.open("/proc/self/status", os.O_RDONLY)
            self._sample()
        except OSError:  # not Linux: nothing to watch
            self._fd = None
            return self
        self._thread = threading.Thread(target=self._loop, name="vmdata-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float | None:
        """Stop sampling (one last read); the peak in MiB, or None where ``/proc`` is missing."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._fd is not None:
            try:
                self._sample()
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
        return None if self.peak_kib is None else self.peak_kib / 1024.0


def _cpu_denormals(trial: TrialSpec, device_info: dict[str, Any]) -> str:
    """What the CPU does with denormals in this trial; refuses a ``flush`` that did not happen."""
    state = str(device_info.get("cpu_denormals") or fpenv.cpu_denormals_state())
    if trial.denormals == "flush" and state != "flush":
        raise ConfigError(f"denormals = 'flush' was asked for, but the {trial.framework} adapter left the CPU at "
                          f"{state!r}; use denormals = 'framework-default' for this framework")
    return state


def _precision_seen(trial: TrialSpec, adapter: Adapter) -> PrecisionSeen | None:
    """What the training forward pass computed in, as the adapter observed it; refuses a precision that did
    not run (harness.config.precision.check_observed), so no such trial is stored as if it had."""
    seen = adapter.precision_seen()
    check_observed(trial.precision, trial.framework, seen.compute_dtype if seen else None,
                   seen.loss_scale if seen else None)
    return seen


def _train_metrics(batch_size: int, step_ms: list[float], warmup_n: int, post_warmup_s: float,
                   post_warmup_samples: int, flop_per_sample: float | None) -> dict[str, Any]:
    """Throughput and drift of the post-warm-up steps (every one of them: see :mod:`harness.run.timing`).

    ``batch_size`` is what one step trains: the effective batch (micro-batch x accumulation steps), since a
    step is one optimizer update.
    """
    measured = step_ms[warmup_n:]
    fig = step_figures(measured, batch_size, post_warmup_samples, post_warmup_s)
    d = drift(measured)
    return dict(
        step_samples_per_s=fig.step_samples_per_s, e2e_samples_per_s=fig.e2e_samples_per_s,
        step_time_ms_median=fig.step_time_ms_median, step_time_ms_iqr=fig.step_time_ms_iqr,
        measured_steps_n=fig.steps_n,
        drift_change_pct=d.change_pct if d else None, drift_threshold_pct=d.threshold_pct if d else None,
        drift_flagged=d.flagged if d else None,
        train_flop_per_sample=flop_per_sample,
        # None for a native model: no description to count its FLOPs from
        achieved_gflop_per_s=None if flop_per_sample is None else flop_per_sample * fig.step_samples_per_s / 1e9,
    )


def run_trial(request: dict[str, Any], chan: Channel) -> int:
    """Run the trial in ``request``, reporting on ``chan``. Returns the process exit code.

    Long on purpose: the trial's phases in the order they are announced to the parent (setup, warm-up, timed,
    train, eval, result) inside the one try/except that turns any failure into a protocol message.
    """
    trial = TrialSpec.from_dict(request["trial"])
    data = PreparedData.from_dict(request["data"])
    chan.send("phase", phase="setup")
    adapter: Adapter | None = None
    phase = "setup"
    try:
        if trial.denormals == "flush":
            # before the adapter imports its framework, so that every thread the framework starts inherits
            # FTZ/DAZ (adapters/fpenv.py); the adapter then applies its framework's own switch where one exists
            fpenv.set_cpu_flush(True)
        adapter = _load_adapter(request["adapter_target"])
        chan.send("hello", pid=os.getpid(), adapter=trial.framework, versions=adapter.versions(),
                  python=sys.version.split()[0], executable=sys.executable)
        t_setup = time.perf_counter()
        device_info = adapter.setup(RuntimeConfig(
            device=trial.device, threads=trial.threads or None, options=dict(trial.adapter_options),
            memory_limit_mib=trial.memory_limit_mib or None, precision=trial.precision,  # type: ignore[arg-type]
            denormals=trial.denormals))  # type: ignore[arg-type]
        cpu_denormals = _cpu_denormals(trial, device_info)
        x_train, y_train, x_test, y_test = data.load()
        desc: ModelDescription | None = None
        if is_native_model(trial.model):  # the framework's own model: no description, no shared weights
            adapter.build_native(trial.model[len(NATIVE_PREFIX):], data.input_shape, data.classes, trial.optimizer)
            model_info: dict[str, Any] = {"name": trial.model, "native": True, "input_shape": list(data.input_shape),
                                          "classes": data.classes, "param_count": adapter.param_count()}
        else:
            # the parent resolved the model (a user's function is imported there only) and sends it as data
            spec = request.get("model")
            desc = ModelDescription.from_spec(spec) if spec else build_description(trial.model, data.input_shape,
                                                                                     data.classes)
            adapter.build(desc, init_weights(desc, trial.seed), trial.optimizer)
            model_info = desc.to_dict()
        order = np.load(request["order_path"], mmap_mode="r")
        setup_s = time.perf_counter() - t_setup
        # the footprint before the first step, in RLIMIT_DATA's units (VmData) and in RSS: the max-batch
        # search turns the RSS peak into the units the OS limit counts (harness/maxbatch/prober.py, probe_peak_mib)
        ready_mem = _proc_status_mib("VmData", "VmRSS", "RssFile", "RssAnon")
        chan.send("ready", device=device_info, param_count=adapter.param_count(), model=model_info)
        watcher = VmDataWatcher().start() if request.get("os_memory_limit_mib") else None

        # a step is one optimizer update: effective_batch_size samples (batch_size x accumulate_steps)
        effective = trial.effective_batch_size
        warmup_n, timed_n, rest_n = plan_steps(data.n_train, effective, trial.epochs,
                                               trial.warmup_steps, trial.timed_steps)
        boundaries = [(0, "warmup"), (warmup_n, "timed"), (warmup_n + timed_n, "train")]
        ticker = ProgressTicker(chan, request.get("progress_interval_s", PROGRESS_INTERVAL_S),
                                warmup_n + timed_n + rest_n, -(-data.n_train // effective), trial.epochs)
        adapter.reset_memory_stats()
        step_ms: list[float] = []
        data_s = 0.0
        samples_seen = 0
        post_warmup_samples = 0
        runner = StepRunner(adapter, trial, x_train, y_train, data.n_train)
        runner.warm_shapes()  # e.g. JAX compiles the epoch's short last batch here, not inside the timed training
        t_train = time.perf_counter()
        t_post_warmup = t_train  # moved to the first post-warm-up step's start below
        batches = batch_indices(order, effective, trial.epochs, warmup_n + timed_n)
        for step, idx in enumerate(batches):
            while boundaries and boundaries[0][0] == step:
                phase = boundaries.pop(0)[1]
                chan.send("phase", phase=phase)
            if step == warmup_n:
                t_post_warmup = time.perf_counter()
            idx = np.sort(idx)  # in-batch order does not change a mean loss; sorted reads are faster
            batch_data_s, step_s = runner.run(step, idx)
            if step == 0:  # after the first step's clock: a precision that did not run fails here, not at the end
                _precision_seen(trial, adapter)
            data_s += batch_data_s
            step_ms.append(step_s * 1e3)
            samples_seen += len(idx)
            ticker.tick(time.perf_counter(), step, phase, step_ms[-1])  # after the step's clock: not timed
            if step >= warmup_n:
                post_warmup_samples += len(idx)
        t_end = time.perf_counter()
        train_s = t_end - t_train
        seen = _precision_seen(trial, adapter)  # again at the end: what is stored is the last step's
        mem = adapter.memory_stats()

        evaluated: dict[str, Any] = {}
        if trial.eval:
            phase = "eval"
            chan.send("phase", phase="eval")
            t_eval = time.perf_counter()
            ev = adapter.evaluate(np.asarray(x_test), np.asarray(y_test), trial.eval_batch_size)
            evaluated = dict(accuracy=ev.accuracy, eval_loss=ev.loss, eval_samples=ev.samples,
                             eval_s=time.perf_counter() - t_eval)
        end_mem = _proc_status_mib("VmData", "RssFile", "RssAnon")
        vmdata_peak = watcher.stop() if watcher is not None else None
        metrics = WorkerMetrics(
            **_train_metrics(effective, step_ms, warmup_n, t_end - t_post_warmup, post_warmup_samples,
                             None if desc is None else train_flop_per_sample(desc)),
            warmup_steps_n=warmup_n, timed_steps_n=timed_n, train_steps_n=len(step_ms),
            optimizer_updates_n=len(step_ms), micro_batches_n=runner.micro_batches_n,
            epochs_done=samples_seen / data.n_train if trial.epochs else 0.0,
            data_s=data_s, setup_s=setup_s, train_s=train_s, cpu_denormals=cpu_denormals,
            compute_dtype=seen.compute_dtype if seen else None, loss_scale=seen.loss_scale if seen else None,
            framework_peak_mib=mem.peak_mib, framework_peak_source=mem.source,
            framework_reserved_mib=mem.reserved_mib, maxrss_mib=_maxrss_mib(),
            vmdata_ready_mib=ready_mem["VmData"], rss_ready_mib=ready_mem["VmRSS"],
            rss_file_ready_mib=ready_mem["RssFile"], rss_anon_ready_mib=ready_mem["RssAnon"],
            rss_file_end_mib=end_mem["RssFile"], rss_anon_end_mib=end_mem["RssAnon"],
            vmdata_end_mib=end_mem["VmData"], vmdata_peak_mib=vmdata_peak, **evaluated,
        )
        chan.send("result", metrics=metrics.to_dict(), step_times_ms=step_ms,
                  phase_steps={"warmup": warmup_n, "timed": timed_n, "train": rest_n})
        return 0
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the parent, then we exit
        try:
            oom = bool(adapter.is_oom(exc)) if adapter is not None else isinstance(exc, MemoryError)
        except Exception:  # noqa: BLE001 - classification must never hide the original error
            oom = False
        chan.send("failure", oom=oom, error_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
                  message=str(exc)[:4000], traceback=traceback.format_exc()[-8000:], phase=phase)
        return 1
    finally:
        if adapter is not None:
            try:
                adapter.close()
            except Exception:  # noqa: BLE001, S110 - closing after a failure is best effort
                pass


def limit_memory(limit_mib: float | None) -> None:
    """Put the trial's CPU memory budget on this process, before the framework is imported.

    RLIMIT_DATA, not RLIMIT_AS: since Linux 4.7 it counts private writable mappings (heap, anonymous
    mmap: what the frameworks allocate), not shared libraries or PROT_NONE reservations. Measured on
    deep_cnn 3x32x32 bs 256: RLIMIT_DATA fails below ~1050 MiB for a peak RSS of ~1060 MiB, while
    RLIMIT_AS needs ~1600 MiB for torch and ~2550 MiB for TensorFlow (see docs/maxbatch.md). The limit
    covers what the process already holds, so setting it here is the same budget as setting it at exec;
    doing it here (not in the parent's ``preexec_fn``) avoids running Python between fork and exec in a
    parent that has threads, which can deadlock (seen: probe workers that never started).
    """
    if limit_mib:
        limit = int(limit_mib * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


PARENT_CHECK_S = 0.2


def die_with_parent(parent_pid: int | None, interval_s: float = PARENT_CHECK_S) -> None:
    """Exit (with this worker's whole process group) as soon as the parent that started us is gone.

    The parent kills our group on every way out it can catch; this covers the ones it cannot (SIGKILL,
    the kernel's OOM killer, a crash of the interpreter). When a parent dies its children are re-parented
    (to init or a subreaper), so ``getppid()`` changes: a daemon thread polls it. Not PR_SET_PDEATHSIG:
    that fires when the *thread* that forked us ends, which in a thread pool (Ray) is not the parent's end.
    """
    if not parent_pid:
        return
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(70)

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid:
                try:  # stderr is a pipe the parent drained: with the parent gone, the write fails (EPIPE)
                    sys.stderr.write("batchscope worker: the parent process is gone; exiting\n")
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                try:
                    os.killpg(os.getpgid(0), signal.SIGKILL)  # our group: ourselves and anything we started
                finally:
                    os._exit(70)

    # a small stack: under a max-batch probe's RLIMIT_DATA the default 8 MiB thread stack would count
    old = threading.stack_size(256 * 1024)
    try:
        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    finally:
        threading.stack_size(old)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m harness.run.worker``."""
    parser = argparse.ArgumentParser(prog="python -m harness.run.worker")
    parser.add_argument("--fd", type=int, required=True, help="file descriptor for protocol messages")
    args = parser.parse_args(argv)
    parent = os.environ.get("BATCHSCOPE_PARENT_PID", "")
    die_with_parent(int(parent) if parent.isdigit() else None)
    chan = Channel(args.fd)
    request = json.loads(sys.stdin.read())
    limit_memory(request.get("os_memory_limit_mib"))
    try:
        code = run_trial(request, chan)
        chan.send("end")
    finally:
        chan.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
