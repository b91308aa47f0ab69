"""The worker protocol and the parent's outcome classification, with a framework-free adapter that misbehaves."""

from __future__ import annotations

import io
import os
import signal
import sys

import pytest

from harness.errors import ProtocolMismatchError, WorkerProtocolError
from harness.records import TrialUnit, WorkerMetrics
from harness.run.executor import LocalExecutor, classify
from harness.run.protocol import (
    PROTOCOL_VERSION,
    Failure,
    Message,
    Phase,
    Ready,
    Result,
    SetupFacts,
    WorkerReport,
    WorkerRequest,
    decode,
    encode,
)
from tests.conftest import make_trial
from tests.fakes.adapter import TRANSIENT_MIB, FakeAdapter

TARGET = "tests.fakes.adapter:FakeAdapter"


def run_fake(tiny_data, behaviour: str, timeout_s: float = 60.0, tmp_path=None):
    trial = make_trial(adapter_options={"behaviour": behaviour}, timeout_s=timeout_s)
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target=TARGET, oom_patterns=FakeAdapter.oom_stderr_patterns)
    events: list[Message] = []
    outcome = LocalExecutor(log_dir=tmp_path).run(unit, on_event=events.append)
    return outcome, events


@pytest.mark.process
def test_ok_trial_reports_phases_and_metrics(tiny_data, tmp_path):
    outcome, events = run_fake(tiny_data, "ok", tmp_path=tmp_path)
    assert outcome.status == "ok", outcome.reason
    phases = [e.phase for e in events if isinstance(e, Phase)]
    assert phases == ["setup", "warmup", "timed", "eval"]
    times = [e.t for e in events]
    assert times == sorted(times)  # monotonic timestamps
    assert len(outcome.step_times_ms) == 4  # 1 warm-up + 3 timed
    assert outcome.metrics.timed_steps_n == 3
    assert outcome.metrics.step_samples_per_s > 0
    assert outcome.metrics.accuracy is not None and 0 <= outcome.metrics.accuracy <= 1
    assert outcome.versions["numpy"]


@pytest.mark.process
def test_a_trial_under_an_os_limit_reports_the_vmdata_it_mapped_only_while_a_step_ran(tiny_data, tmp_path):
    def run(limit_mib):
        trial = make_trial(adapter_options={"behaviour": "transient"})
        unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                         adapter_target=TARGET, os_memory_limit_mib=limit_mib)
        return LocalExecutor(log_dir=tmp_path).run(unit)

    limited = run(4096.0)
    assert limited.status == "ok", limited.reason
    m = limited.metrics
    # the buffer is gone at the end, but the watcher saw it while the steps ran
    assert m is not None and m.vmdata_peak_mib is not None and m.vmdata_end_mib is not None
    assert m.vmdata_peak_mib >= m.vmdata_end_mib + 0.9 * TRANSIENT_MIB, m
    free = run(None)  # a sweep trial (no OS limit) runs no watcher thread beside its timed steps
    assert free.status == "ok" and free.metrics.vmdata_peak_mib is None


@pytest.mark.process
def test_noisy_stdout_does_not_break_the_protocol(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "noisy", tmp_path=tmp_path)
    assert outcome.status == "ok", outcome.reason


@pytest.mark.process
def test_the_worker_is_done_at_its_result_after_the_samplers_last_sample(tiny_data, tmp_path):
    """Its teardown (closing the adapter, the interpreter's exit) is nothing the trial measures (issue 53): the
    trial ends at the result, ok, exit 0, the sampler having sampled the live worker once more first."""
    from harness.monitor.probes import HostProbe
    from harness.monitor.sampler import Sampler

    trial = make_trial(adapter_options={"behaviour": "slow_close"}, timeout_s=30.0)
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target=TARGET, oom_patterns=FakeAdapter.oom_stderr_patterns)
    # one sample at the start, the next one 60 s later: only the last sample can add a second
    executor = LocalExecutor(monitor_factory=lambda u: Sampler([HostProbe()], interval_s=60.0), log_dir=tmp_path)
    outcome = executor.run(unit)
    assert (outcome.status, outcome.exit_code) == ("ok", 0), outcome.reason
    assert outcome.elapsed_s < 25, outcome.elapsed_s  # not the close's hour, nor the 30 s limit
    assert outcome.monitor.end_reason == "stopped at the trial's result, after a last sample"
    assert len(outcome.monitor.samples) == 2
    assert outcome.monitor.samples[-1]["rss_mib"] > 0  # read from the live worker


@pytest.mark.process
def test_python_oom_is_oom(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "oom", tmp_path=tmp_path)
    assert outcome.status == "oom"
    assert "MemoryError" in outcome.reason and "phase timed" in outcome.reason


@pytest.mark.process
def test_exception_is_error_with_traceback(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "error", tmp_path=tmp_path)
    assert outcome.status == "error"
    assert "ValueError: fake: a bug in the model" in outcome.reason
    assert "Traceback" in outcome.traceback and "train_step" in outcome.traceback


@pytest.mark.process
def test_sigkilled_worker_is_crashed(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "sigkill", tmp_path=tmp_path)
    assert outcome.status == "crashed"
    assert outcome.exit_code == -signal.SIGKILL
    assert "SIGKILL" in outcome.reason and "phase timed" in outcome.reason


@pytest.mark.process
def test_segfault_is_crashed(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "segfault", tmp_path=tmp_path)
    assert outcome.status == "crashed"
    assert "SIGSEGV" in outcome.reason


@pytest.mark.process
def test_exit_without_result_is_crashed(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "exit0", tmp_path=tmp_path)
    assert outcome.status == "crashed"
    assert "without a result" in outcome.reason


@pytest.mark.process
def test_abort_with_oom_on_stderr_is_oom(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "oom_stderr", tmp_path=tmp_path)
    assert outcome.status == "oom"
    assert "SIGABRT" in outcome.reason and "FAKE ALLOCATOR ABORT" in outcome.reason
    assert "FAKE ALLOCATOR ABORT" in outcome.stderr_tail


@pytest.mark.process
def test_hang_is_killed_at_timeout(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "hang", timeout_s=4.0, tmp_path=tmp_path)
    assert outcome.status == "timeout"
    assert "phase timed" in outcome.reason
    assert outcome.elapsed_s < 15


@pytest.mark.process
def test_hang_in_setup_is_killed_at_timeout(tiny_data, tmp_path):
    outcome, _ = run_fake(tiny_data, "hang_setup", timeout_s=3.0, tmp_path=tmp_path)
    assert outcome.status == "timeout"
    assert "phase setup" in outcome.reason


@pytest.mark.process
def test_missing_interpreter_module_is_reported(tiny_data, tmp_path):
    trial = make_trial()
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target="tests.no_such_module:Nothing")
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "error"
    assert "ModuleNotFoundError" in outcome.reason


def test_classify_prefers_timeout_then_failure():
    report = WorkerReport()
    report.feed(Phase(phase="eval", t=1.0))
    assert classify(report, -9, True, 5.0, "", ())[0] == "timeout"
    report.feed(Failure(oom=True, error_type="X", message="m", traceback="", phase="eval", t=2.0))
    assert classify(report, 1, False, 5.0, "", ()) == ("oom", "X: m (phase eval)")


def test_protocol_round_trip_and_refusals():
    msg = decode(encode(Phase(phase="timed")))
    assert isinstance(msg, Phase) and msg.phase == "timed" and isinstance(msg.t, float)
    result = decode(encode(Result(metrics=WorkerMetrics(step_samples_per_s=float("nan"), train_s=2.5),
                                  step_times_ms=(1.0, 2.0), phase_steps={"warmup": 1, "timed": 1})))
    assert isinstance(result, Result) and result.metrics.step_samples_per_s is None  # NaN is sent as null
    assert result.metrics.train_s == 2.5 and result.step_times_ms == (1.0, 2.0)
    ready = decode(encode(Ready(device=SetupFacts.from_dict({"device": "gpu", "gpu_name": "X", "mode": "growth"}),
                                param_count=3, model={})))
    assert isinstance(ready, Ready) and ready.device.gpu_name == "X"
    assert ready.device.to_dict() == {"device": "gpu", "gpu_name": "X", "mode": "growth"}
    with pytest.raises(WorkerProtocolError):
        decode(b"hello world")
    with pytest.raises(WorkerProtocolError, match="unknown phase"):
        decode(b'{"event": "phase", "v": %d, "phase": "lunch", "t": 1}' % PROTOCOL_VERSION)
    with pytest.raises(WorkerProtocolError, match="unknown event"):
        decode(b'{"event": "gossip", "v": %d, "t": 1}' % PROTOCOL_VERSION)
    for shape in (b'[1, 2]', b'{"event": 3, "t": 1}', b'{"event": "phase", "t": "soon"}', b'{"event": "phase"}'):
        with pytest.raises(WorkerProtocolError, match="not a protocol message"):  # before the version is read
            decode(shape)
    with pytest.raises(WorkerProtocolError, match="missing or unknown fields"):
        decode(b'{"event": "phase", "v": %d, "t": 1, "phase": "timed", "mood": "bad"}' % PROTOCOL_VERSION)


def test_a_line_of_another_protocol_version_is_a_mismatch_not_a_bad_line():
    line = encode(Phase(phase="timed")).replace(b'"v":%d' % PROTOCOL_VERSION, b'"v":1')
    with pytest.raises(ProtocolMismatchError, match="version 1, this batchscope speaks"):
        decode(line)
    with pytest.raises(ProtocolMismatchError, match="version None"):  # version 1 lines carried none
        decode(b'{"event": "phase", "phase": "timed", "t": 1}')


@pytest.mark.process
def test_a_worker_speaking_another_protocol_version_ends_the_trial_as_an_error_naming_both(tiny_data, tmp_path):
    """A "python" that speaks version 1 and would then run for a minute: the trial ends at once, killed."""
    fake_python = tmp_path / "old-python"
    fake_python.write_text(f"""#!{sys.executable}
import os, sys, time
fd = int(sys.argv[sys.argv.index("--fd") + 1])
os.write(fd, b'{{"event": "hello", "t": 0.0, "pid": 1, "adapter": "fake", "versions": {{}}}}\\n')
time.sleep(60)
""")
    fake_python.chmod(0o755)
    trial = make_trial()
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target=TARGET, python=str(fake_python))
    outcome = LocalExecutor(log_dir=tmp_path).run(unit)
    assert outcome.status == "error", (outcome.reason, outcome.stderr_tail)
    assert f"version None, this batchscope speaks {PROTOCOL_VERSION}" in outcome.reason
    assert "another batchscope" in outcome.reason
    assert outcome.elapsed_s < 30  # not left to sleep out its minute, nor the trial's timeout


def test_the_worker_refuses_a_request_of_another_protocol_version(tiny_data, monkeypatch):
    from harness.run.worker.__main__ import BAD_REQUEST_EXIT_CODE, main

    request = WorkerRequest(trial=make_trial(), data=tiny_data, order_path="x", adapter_target=TARGET)
    old = request.to_json().replace(f'"protocol": {PROTOCOL_VERSION}', '"protocol": 1')
    read_fd, write_fd = os.pipe()
    monkeypatch.setattr(sys, "stdin", io.StringIO(old))
    monkeypatch.delenv("BATCHSCOPE_PARENT_PID", raising=False)
    assert main(["--fd", str(write_fd)]) == BAD_REQUEST_EXIT_CODE
    with os.fdopen(read_fd, "rb") as f:
        (failure,) = [decode(line) for line in f]
    assert isinstance(failure, Failure) and "ProtocolMismatchError" in failure.error_type
    assert f"the parent speaks worker protocol version 1, this batchscope speaks {PROTOCOL_VERSION}" in failure.message


def test_a_request_survives_its_json_form(tiny_data):
    request = WorkerRequest(trial=make_trial(batch_size=8), data=tiny_data, order_path="/o.npy", adapter_target=TARGET,
                            model={"layers": []}, os_memory_limit_mib=512.0, progress_interval_s=None)
    assert WorkerRequest.from_json(request.to_json()) == request


@pytest.mark.parametrize("schedule", [(), ((0.0, 8, 0.01), (0.5, 32, 0.04))], ids=["constant", "scheduled"])
def test_a_spec_keeps_its_hash_through_its_json_form(tiny_data, schedule):
    """The hash is the store's key (``--resume`` skips by it): an empty schedule read back from JSON's [] is (), as
    the hash's defaults compare it, and a schedule's entries come back as the tuples they were."""
    import json

    from harness.config.trial import TrialSpec

    trial = make_trial(batch_size=8, batch_schedule=schedule)
    again = TrialSpec.from_dict(json.loads(json.dumps(trial.to_dict())))
    assert again == trial and again.batch_schedule == schedule and again.trial_hash == trial.trial_hash
    request = WorkerRequest(trial=trial, data=tiny_data, order_path="/o.npy", adapter_target=TARGET,
                            model={"layers": []}, os_memory_limit_mib=512.0, progress_interval_s=None)
    assert WorkerRequest.from_json(request.to_json()).trial.trial_hash == trial.trial_hash
