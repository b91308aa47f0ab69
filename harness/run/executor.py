"""Run one trial unit: spawn a worker, watch it (monitor/sampler), collect and classify the outcome.

A trial is one unit of work. :class:`LocalExecutor` runs units one at a time on this machine (two
timed trials must never share a small machine). The worker is a fresh process in its own process
group, so an OOM, a segfault or a hang kills nothing but itself, and a timeout kills its whole tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.capture import BoundedOutput
from harness.config.trial import TrialSpec
from harness.diskfull import disk_full, is_disk_full, says_disk_full
from harness.errors import BatchscopeError, BatchscopeWarning, ProtocolMismatchError, WorkerProtocolError
from harness.models import build_description, is_native_model
from harness.records import Monitor, MonitorResult, NullMonitor, Placement, Status, TrialOutcome, TrialUnit
from harness.run import gpufaults
from harness.run.protocol import Message, Phase, WorkerReport, WorkerRequest, decode

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GENERIC_OOM_PATTERNS = ("MemoryError", "std::bad_alloc", "out of memory", "Cannot allocate memory",
                        "can't allocate memory",
                        # glibc under RLIMIT_DATA while loading a framework (seen with torch at ~150 MiB)
                        "cannot allocate memory", "failed to map segment from shared object",
                        # cuBLAS / cuDNN workspaces and XLA's allocator, as a worker that aborts prints them
                        "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "RESOURCE_EXHAUSTED",
                        "CUDA_ERROR_OUT_OF_MEMORY")
STDERR_TAIL_LINES = 40
#: every worker's CUDA_DEVICE_ORDER: the PCI bus order, in which the sampler finds the worker's GPU among NVML's
#: (harness.monitor.nvml.CUDA_DEVICE_ORDER; CUDA's default, FASTEST_FIRST, may number the GPUs otherwise)
WORKER_CUDA_DEVICE_ORDER = "PCI_BUS_ID"


#: Popen's arguments for a worker in a process group of its own, in the parent's session: ``process_group`` from
#: Python 3.11; on 3.10 ``os.setpgrp`` as the child's pre-exec hook (a builtin: no Python code runs before exec)
OWN_PROCESS_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}


def classify(report: WorkerReport, returncode: int | None, timed_out: bool, timeout_s: float,
             stderr_tail: str, oom_patterns: tuple[str, ...]) -> tuple[Status, str]:
    """(status, reason) of a finished worker. Pure: tested on its own."""
    phase = report.current_phase or "start-up"
    if timed_out:
        return "timeout", f"killed after the trial's timeout of {timeout_s:g} s, in phase {phase}"
    if report.mismatch is not None:
        return "error", report.mismatch
    if report.failure is not None:
        f = report.failure
        first = f.message.strip().splitlines()
        reason = f"{f.error_type or 'error'}: {first[0] if first else ''}".strip()[:500]
        return ("oom" if f.oom else "error"), f"{reason} (phase {f.phase or phase})"
    if report.result is not None and returncode == 0:
        # a diverged training is a result (metrics, a curve up to there), never an ok one
        return ("diverged", report.result.diverged) if report.result.diverged else ("ok", "")
    found = next((p for p in (*oom_patterns, *GENERIC_OOM_PATTERNS) if p in stderr_tail), None)
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        how = f"killed by {name} in phase {phase}"
    elif returncode:
        how = f"exit code {returncode} in phase {phase}"
    else:
        how = f"exited without a result in phase {phase}"
    if found:
        return "oom", f"{how}; stderr says {found!r}"
    if returncode == -signal.SIGKILL:
        how += " (the kernel's OOM killer sends SIGKILL too: see stderr and dmesg)"
    return "crashed", how


def gpu_index(device: Mapping[str, Any], visible: str | None) -> int | None:
    """The index of the GPU a worker trained on (its first visible device), None when it trained on no GPU or
    CUDA_VISIBLE_DEVICES names it by UUID."""
    if not device.get("gpu_name"):
        return None
    first = (visible or "0").split(",")[0].strip()
    return int(first) if first.isdigit() else None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class LocalExecutor:
    """Runs units one after another on this machine."""

    def __init__(self, monitor_factory: Callable[[TrialUnit], Monitor] | None = None,
                 log_dir: Path | None = None, bounded_log: bool = True) -> None:
        self.monitor_factory = monitor_factory or (lambda unit: NullMonitor())
        self.log_dir = log_dir
        #: the worker's output through a pipe that keeps its head and tail (harness/capture.py); False: straight
        #: into the log file, unbounded, as before issue 24 (only benchmarks/worker_log_cost.py compares the two)
        self.bounded_log = bounded_log

    def _fresh_log(self, trial: TrialSpec) -> Path:
        """The trial's worker log, created empty (a full disk says so, naming it)."""
        log_dir = self.log_dir or Path(tempfile.gettempdir())
        log_path = log_dir / f"worker-{trial.trial_hash}.log"
        with says_disk_full(log_path, "the worker's log"):
            log_dir.mkdir(parents=True, exist_ok=True)
            open(log_path, "wb").close()
        return log_path

    def run(self, unit: TrialUnit, on_event: Callable[[Message], None] | None = None) -> TrialOutcome:
        """Run one unit to completion (or timeout) and classify it. Never raises for a trial's failure.

        A trial whose managed environment vanished or was damaged as it started (its worker could not start, or
        failed, and the environment is no longer whole) is run once more, after the environment is rebuilt: the
        trial is not lost to what happened to its environment (issue 50, item 5).

        A managed environment is held in use for the unit (shared: :mod:`harness.envs.inuse`; the command that made
        the unit holds it already, from its resolution to its end, and this only counts once more; a Ray node's task
        takes it here). The retry's rebuild converts that hold: it waits for the other commands using the
        environment (a bounded time, said once as a note), and else the retry is an ``error`` row saying so.
        """
        with contextlib.ExitStack() as held:
            try:  # the environment held in use while this unit may start workers in it (harness.envs.inuse)
                held.enter_context(_environment_in_use(unit))
            except BatchscopeError as e:  # another command kept moving it aside: an error row, unstarted
                return _unavailable(dataclasses.replace(unit, unavailable=str(e)))
            outcome = self._run_once(unit, on_event)
            if outcome.status in ("crashed", "error") and _environment_harmed(unit):
                outcome = self._run_once(_environment_ready(unit, whole=True), on_event)
        return outcome

    def _run_once(self, unit: TrialUnit, on_event: Callable[[Message], None] | None = None) -> TrialOutcome:
        """One attempt at ``unit`` (:meth:`run`).

        Long on purpose: spawn, watch and clean-up share one try/finally that must see every handle (process,
        pipe, reader thread, monitor), so that no path leaves a worker or a thread behind.
        """
        trial = unit.trial
        unit = _environment_ready(unit)
        if unit.unavailable is not None:  # its framework's environment could not be built: an error, unstarted
            return _unavailable(unit)
        request, env = _worker_request(unit), _worker_env(unit)
        log_path = self._fresh_log(trial)
        read_fd, write_fd = os.pipe()
        started_at, t_start = _now(), time.monotonic()
        monitor = self.monitor_factory(unit)
        report = WorkerReport()
        with open(log_path, "wb") as log:
            # the worker's stdout and stderr: a pipe drained with its head and tail kept, or the file itself
            out_read, out_write = os.pipe() if self.bounded_log else (-1, os.dup(log.fileno()))
            try:
                # a process group of its own, in our session (not a session of its own): should we die while it
                # is stopped (SIGSTOP), its group becomes orphaned and the kernel sends it SIGHUP then SIGCONT
                # (POSIX), so it dies, where its parent-watching thread could not run (issue 24)
                proc = subprocess.Popen(
                    [unit.python, "-m", "harness.run.worker", "--fd", str(write_fd)],
                    stdin=subprocess.PIPE, stdout=out_write, stderr=out_write, pass_fds=(write_fd,),
                    env=env, cwd=str(PROJECT_ROOT), **OWN_PROCESS_GROUP,
                )
            except OSError as e:  # a bad interpreter (not executable, wrong format): this trial crashed
                os.close(read_fd)
                if out_read >= 0:
                    os.close(out_read)
                return _not_started(unit, e, started_at, t_start)
            finally:
                os.close(write_fd)
                os.close(out_write)
            output = BoundedOutput(out_read, sink=log, name=f"worker-output-{proc.pid}").start() \
                if out_read >= 0 else None
            messages: queue.Queue[Message | None] = queue.Queue()
            reader = threading.Thread(target=_read_messages, args=(read_fd, messages, report),
                                      name=f"worker-reader-{proc.pid}", daemon=True)
            reader.start()
            timed_out = False
            try:
                assert proc.stdin is not None
                try:
                    proc.stdin.write(request.to_json().encode())
                    proc.stdin.close()
                except BrokenPipeError:
                    pass  # the worker died at once; its exit code tells why
                monitor.start(proc.pid)
                timed_out = _watch(proc, messages, report, monitor, t_start + trial.timeout_s, t_start, on_event)
            except BaseException:
                _kill_group(proc)  # Ctrl-C or an internal error: never leave a worker behind
                proc.wait()
                raise
            finally:
                # done at its result (_watch): the sampler stops first, taking its last sample of the live worker
                # (the worker's end would lose a short trial's last CPU reading), then the worker is ended
                done = report.result is not None and not timed_out and proc.poll() is None
                if done:
                    measured = monitor.stop()
                if proc.poll() is None:  # never leave a worker behind, whatever happened above
                    _kill_group(proc)
                    proc.wait()
                if not done:
                    measured = monitor.stop()
                reader.join(timeout=5)
                if output is not None:
                    output.close()  # the head is in the log already; the tail and what was dropped follow
        if output is not None and is_disk_full(output.sink_error):  # issue 32: the trial is not stored, --resume
            log_path.unlink(missing_ok=True)  # runs it again; half a log is not left to read as the whole
            raise disk_full(log_path, "the worker's log (this trial is not stored)") from output.sink_error
        # a worker ended at its result would have exited 0 (run_trial returns 0 once the result is sent)
        exit_code = 0 if done else proc.returncode
        return _outcome(unit, report, exit_code, timed_out, measured, log_path, (started_at, t_start), env)


def _worker_request(unit: TrialUnit) -> WorkerRequest:
    """What the worker is sent on its stdin: the trial, its data, and the model resolved here, in the parent (a
    user's model function is never imported by a worker)."""
    trial = unit.trial
    return WorkerRequest(
        trial=trial, data=unit.data, order_path=unit.order_path, adapter_target=unit.adapter_target,
        os_memory_limit_mib=unit.os_memory_limit_mib, progress_interval_s=unit.progress_interval_s,
        model=None if is_native_model(trial.model) else
        build_description(trial.model, unit.data.input_shape, unit.data.classes).to_spec())


def _worker_env(unit: TrialUnit) -> dict[str, str]:
    """The worker's environment: ours, the harness's own settings, then the unit's (an adapter's, a search's)."""
    env = dict(os.environ)
    # batchscope's code first: the environment's folder of links to it (harness.envs) where the unit has one, so
    # that no other package beside batchscope's (the parent's numpy 2 beside MXNet's 1.26) reaches the worker; else
    # the project's root (the parent's own interpreter). The parent's current directory last: a native model's
    # factory module is found there, as in the parent.
    code = os.pathsep.join(unit.pythonpath) or str(PROJECT_ROOT)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH", ""), os.getcwd()) if p)
    env.update({"PYTHONUNBUFFERED": "1", "BATCHSCOPE_WORKER": "1", "TF_CPP_MIN_LOG_LEVEL": "1",
                "BATCHSCOPE_PARENT_PID": str(os.getpid()),  # the worker exits when we are gone
                # CUDA numbers GPUs as the sampler maps them to NVML's (harness.monitor.nvml.cuda_index_handle)
                "CUDA_DEVICE_ORDER": WORKER_CUDA_DEVICE_ORDER})
    env.update(unit.env)
    return env


def _watch(proc: subprocess.Popen[bytes], messages: queue.Queue[Message | None], report: WorkerReport,
           monitor: Monitor, deadline: float, t_start: float, on_event: Callable[[Message], None] | None) -> bool:
    """Read the worker's messages until it ends or its deadline passes, then wait for its exit; True when it timed
    out (it is then killed). The caller's try/finally kills it on anything else."""
    timed_out = False
    last_t = t_start  # the worker's clock (time.monotonic, shared on Linux) of its latest message
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and proc.poll() is None:
            timed_out = True
            break
        try:  # past the deadline with the worker gone (we were stopped): read what it left, then judge
            msg = messages.get(timeout=min(remaining, 1.0) if remaining > 0 else 5.0)
        except queue.Empty:
            if remaining <= 0:
                timed_out = True
                break
            continue
        if msg is None:  # end of file (the worker closed its pipe or died), or unreadable
            break
        last_t = max(last_t, msg.t)
        report.feed(msg)
        if isinstance(msg, Phase):
            monitor.phase(msg.phase, msg.t)
        if on_event is not None:
            on_event(msg)
        if report.result is not None and report.failure is None and report.mismatch is None:
            # the trial is done: what the worker does next (closing the adapter, the interpreter's and the
            # framework's teardown: 0.8-1.3 s a trial, issue 53) is nothing the trial measures; the caller takes the
            # sampler's last sample while the worker still lives, then ends it
            return False
    # a worker that ended while we were stopped is judged by its own clock, not by when we woke
    timed_out = timed_out or (time.monotonic() > deadline and last_t > deadline)
    if timed_out or report.mismatch is not None:  # a worker we cannot read is not left running
        _kill_group(proc)
    try:
        proc.wait(timeout=max(5.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    return timed_out


def _outcome(unit: TrialUnit, report: WorkerReport, exit_code: int | None, timed_out: bool, measured: MonitorResult,
             log_path: Path, started: tuple[str, float], env: Mapping[str, str]) -> TrialOutcome:
    """The trial's outcome from what its worker said, how it ended and what the sampler saw; the log of a trial
    that went well is removed (a failed one's stays, named in the reason)."""
    trial, (started_at, t_start) = unit.trial, started
    stderr_tail = _tail(log_path)
    status, reason = classify(report, exit_code, timed_out, trial.timeout_s, stderr_tail, unit.oom_patterns)
    if report.bad_lines:
        reason = (reason + f"; {len(report.bad_lines)} unreadable protocol line(s)").lstrip("; ")
    status, reason = gpufaults.judge(status, reason, measured.samples)
    result, ready = report.result, report.ready
    outcome = TrialOutcome(
        trial=trial, status=status, reason=reason, metrics=result.metrics if result else None,
        step_times_ms=list(result.step_times_ms) if result else [],
        phase_steps=dict(result.phase_steps) if result else {}, curve=list(result.curve) if result else [],
        gradient_noise=list(result.gradient_noise) if result else [],
        versions=dict(report.hello.versions) if report.hello else {},
        device=ready.device.to_dict() if ready else {}, param_count=ready.param_count if ready else None,
        phases=list(report.phases), exit_code=exit_code, stderr_tail=stderr_tail if status != "ok" else "",
        traceback=report.failure.traceback if report.failure else "", elapsed_s=time.monotonic() - t_start,
        started_at=started_at, finished_at=_now(), monitor=measured,
        placement=Placement(host=socket.gethostname(), concurrent_n=1, attempt=1,
                            device_index=gpu_index(ready.device.to_dict() if ready else {},
                                                   env.get("CUDA_VISIBLE_DEVICES"))),
        python=report.hello.executable if report.hello else unit.python, environment=unit.environment,
    )
    if status == "ok":
        log_path.unlink(missing_ok=True)
    return outcome


def _not_started(unit: TrialUnit, error: OSError, started_at: str, t_start: float) -> TrialOutcome:
    """The outcome of a trial whose worker could not even be started: a ``crashed`` row with the reason,
    like any other failed trial, so the rest of the sweep still runs."""
    reason = (f"the worker could not be started with {unit.python!r}: {error.strerror or error}; check the "
              f"interpreter ([adapters.{unit.trial.framework}] python in the experiment file)")
    return TrialOutcome(trial=unit.trial, status="crashed", reason=reason, elapsed_s=time.monotonic() - t_start,
                        started_at=started_at, finished_at=_now(), stderr_tail=str(error), python=unit.python,
                        environment=unit.environment)


def _environment_ready(unit: TrialUnit, whole: bool = False) -> TrialUnit:
    """``unit`` with its managed environment there: rebuilt from its lock where it is missing (deleted during the
    sweep, or a Ray node that has not built it yet) or, with ``whole``, damaged (:func:`harness.envs.build.damage`);
    a build that fails makes the unit unavailable, with why."""
    if unit.env_spec is None or unit.unavailable is not None or (Path(unit.python).exists() and not whole):
        return unit
    from harness.envs.build import EnvironmentBuildError, build

    try:
        build(unit.env_spec, Path(unit.python).parents[1].parent, unit.pythonpath, on_wait=_note)
    except EnvironmentBuildError as e:
        return dataclasses.replace(unit, unavailable=f"its environment was missing and could not be rebuilt: {e}")
    return unit


def _note(line: str) -> None:
    """A line for the user from below the command line: a note (``batchscope: note: ...``)."""
    warnings.warn(line, BatchscopeWarning, stacklevel=2)


def _environment_in_use(unit: TrialUnit) -> contextlib.AbstractContextManager[None]:
    """``unit``'s managed environment held in use for the body (:func:`harness.envs.build.in_use`); nothing for an
    interpreter of the user's or the parent's, or an environment that could not be built."""
    if unit.env_spec is None or unit.unavailable is not None:
        return contextlib.nullcontext()
    from harness.envs.build import in_use

    return in_use(unit.env_spec, Path(unit.python).parents[1].parent, _note)


def _environment_harmed(unit: TrialUnit) -> bool:
    """Whether ``unit``'s managed environment is no longer whole (gone, half-deleted, a package removed) after its
    trial failed: then the failure is the environment's, not the trial's."""
    if unit.env_spec is None or unit.unavailable is not None:
        return False
    from harness.envs.build import damage, is_built

    env_dir = Path(unit.python).parents[1]
    return not is_built(env_dir) or damage(env_dir, unit.env_spec) is not None


def _unavailable(unit: TrialUnit) -> TrialOutcome:
    """The ``error`` row of a trial whose framework's environment could not be built: no worker was started; the
    reason carries the installer's last lines (stderr_tail keeps them whole)."""
    now = _now()
    first = unit.unavailable.splitlines()[0] if unit.unavailable else ""
    return TrialOutcome(trial=unit.trial, status="error", reason=f"not started: {first}"[:500],
                        stderr_tail=unit.unavailable or "", started_at=now, finished_at=now, python=unit.python,
                        environment=unit.environment)


def _read_messages(fd: int, out: queue.Queue[Message | None], report: WorkerReport) -> None:
    """Decode the worker's lines onto ``out``, then None; a line of another protocol version ends the reading
    (``report.mismatch``): nothing more the worker says can be trusted to mean what we read it as."""
    with os.fdopen(fd, "rb") as f:
        for line in f:
            try:
                out.put(decode(line))
            except ProtocolMismatchError as e:
                report.mismatch = str(e)
                break
            except WorkerProtocolError as e:
                report.bad_lines.append(str(e))
    out.put(None)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's whole process group (it runs in a group of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
