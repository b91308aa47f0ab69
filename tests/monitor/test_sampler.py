"""The sampler thread, driven by an injected clock (no sleeping), and its host probe on real processes."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness.config.experiment import parse_experiment
from harness.errors import WorkerGoneError
from harness.monitor.probes import HostProbe, NullGpuProbe, ProcessTree, ReplayProbe, synthetic_gpu_stream
from harness.monitor.sampler import Sampler, monitor_factory_for
from harness.records import TrialUnit
from harness.run.executor import LocalExecutor
from tests.conftest import make_trial
from tests.fakes.monitor import FakeClock, FixedTree


def wait_for_children(pid: int, n: int = 1, timeout_s: float = 10.0) -> set[int]:
    """The pids under ``pid`` once there are ``n`` (a loaded machine starts processes late)."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        kids = {c.pid for c in psutil.Process(pid).children(recursive=True)}
        if len(kids) >= n or time.monotonic() > deadline:
            return kids
        time.sleep(0.05)


class SlowProbe(ReplayProbe):
    """A replay whose reads take ``cost_s`` of the fake clock's time."""

    def __init__(self, rows, clock: FakeClock, cost_s: float) -> None:
        super().__init__(rows)
        self.clock, self.cost_s = clock, cost_s

    def read(self, pids):
        self.clock.t += self.cost_s
        return super().read(pids)


def run_replay(rows, clock: FakeClock, phases=(), cost_s: float = 0.0, interval_s: float = 0.1):
    sampler = Sampler([SlowProbe(rows, clock, cost_s)], interval_s=interval_s, clock=clock, wait=clock.wait,
                      tree_factory=FixedTree)
    sampler.start(1234)
    for name, t in phases:
        sampler.phase(name, t)
    sampler._thread.join(timeout=10)  # the replay's end ends the thread; nothing sleeps
    assert not sampler._thread.is_alive()
    return sampler, sampler.stop()


def test_schedule_is_drift_free_even_when_reads_take_time():
    clock = FakeClock(1000.0)
    sampler, out = run_replay([{"cpu_util_pct": 1.0}] * 20, clock, cost_s=0.03)
    ts = [s["t_s"] for s in out.samples]
    assert len(ts) == 20
    assert ts == pytest.approx([0.1 * k for k in range(20)])  # not 0.13 k: the read time does not add up
    assert clock.waits[:3] == pytest.approx([0.07, 0.07, 0.07])
    assert sampler.missed_ticks == 0
    assert out.end_reason == "replay ended after 20 readings"
    assert out.aggregates["samples_n"] == 20 and out.aggregates["sample_interval_ms"] == 100.0


def test_an_overrunning_read_skips_ticks_instead_of_bunching_them():
    clock = FakeClock(0.0)
    sampler, out = run_replay([{"cpu_util_pct": 1.0}] * 5, clock, cost_s=0.25)
    ts = [s["t_s"] for s in out.samples]
    assert ts == pytest.approx([0.0, 0.3, 0.6, 0.9, 1.2])  # each read overruns to the next free slot
    assert sampler.missed_ticks == 10  # two slots lost after each of the 5 reads


def test_samples_are_tagged_with_the_phase_announced_before_them_and_summarised():
    clock = FakeClock(50.0)
    rows = synthetic_gpu_stream(30, interval_s=0.1, busy_from=0.3)
    for r in rows:
        r.update(cpu_util_pct=100.0, rss_mib=300.0)
    # phase messages arrive whenever; tagging uses their start times
    phases = [("setup", 50.05), ("warmup", 50.95), ("timed", 51.45), ("eval", 52.55)]
    _, out = run_replay(rows, clock, phases=phases)
    phases = [s["phase"] for s in out.samples]
    assert phases[0] == "spawn" and phases[1] == "setup" and phases[-1] == "eval"
    assert phases.count("timed") == 11  # samples at 51.5 .. 52.5
    assert set(out.phases) == {"spawn", "setup", "warmup", "timed", "eval", "training_before_eval", "trial"}
    assert out.phases["timed"]["start_s"] == pytest.approx(1.45)  # relative to the worker's start
    agg = out.aggregates
    assert agg["power_w"] == pytest.approx(250.0) and agg["energy_j"] == pytest.approx(250.0 * 1.1)
    assert agg["cpu_util_pct"] == 100.0 and agg["timed_samples_n"] == 11


def test_nvml_failing_mid_run_leaves_marked_gaps_and_sampling_goes_on():
    clock = FakeClock()
    rows = synthetic_gpu_stream(10)
    for i in (4, 5):
        rows[i] = dict.fromkeys(rows[i], math.nan) | {"gap_reason": "NVML utilization: GPU is lost"}
    _, out = run_replay(rows, clock)
    assert len(out.samples) == 10
    gaps = [s for s in out.samples if s["gap_reason"]]
    assert [round(s["t_s"], 3) for s in gaps] == [0.4, 0.5]
    assert gaps[0]["gap_reason"] == "replay: NVML utilization: GPU is lost"
    assert gaps[0]["gpu_util_pct"] is None  # NaN is stored as NULL
    assert out.samples[6]["gpu_util_pct"] is not None and out.gaps_n == 2


def test_worker_gone_ends_sampling_cleanly():
    class DyingTree(FixedTree):
        calls = 0

        def refresh(self):
            DyingTree.calls += 1
            if DyingTree.calls > 3:
                raise WorkerGoneError("worker 1234 exited")
            return self.pids

    clock = FakeClock()
    sampler = Sampler([NullGpuProbe()], clock=clock, wait=clock.wait, tree_factory=DyingTree)
    sampler.start(1234)
    sampler._thread.join(timeout=10)
    out = sampler.stop()
    assert len(out.samples) == 3 and out.end_reason == "worker 1234 exited"


def test_a_probe_bug_ends_sampling_with_the_error_recorded_and_samples_kept():
    class BuggyProbe(ReplayProbe):
        def read(self, pids):
            if self.reads_n == 3:
                raise KeyError("oops")
            return super().read(pids)

    clock = FakeClock()
    sampler = Sampler([BuggyProbe([{"cpu_util_pct": 5.0}] * 10)], clock=clock, wait=clock.wait,
                      tree_factory=FixedTree)
    sampler.start(1)
    sampler._thread.join(timeout=10)
    out = sampler.stop()
    assert len(out.samples) == 3
    assert out.end_reason == "sampler failed: KeyError: 'oops'" and "samples up to then" in out.notes[-1]


def test_stop_returns_at_once_on_the_real_clock_and_joins_the_thread():
    sampler = Sampler([NullGpuProbe()], interval_s=0.05, tree_factory=FixedTree)
    sampler.start(1)
    time.sleep(0.2)
    t = time.monotonic()
    out = sampler.stop()
    assert time.monotonic() - t < 1.0
    assert not sampler._thread.is_alive()
    assert sampler._thread.name == "batchscope-sampler-1" and sampler._thread.daemon
    assert 1 <= len(out.samples) <= 8  # the first tick is at once; a loaded machine may delay the rest


def test_a_probe_stuck_in_a_call_cannot_hang_stop():
    release = threading.Event()

    class StuckProbe(NullGpuProbe):
        def read(self, pids):
            release.wait(10)
            return {}

    sampler = Sampler([StuckProbe()], interval_s=0.05, tree_factory=FixedTree, join_timeout_s=0.2)
    sampler.start(1)
    time.sleep(0.05)
    out = sampler.stop()
    release.set()
    assert any("still busy" in n for n in out.notes)


@pytest.mark.process
def test_host_probe_reads_a_real_process_tree():
    """RSS and CPU time of a child are counted for the tree. Polled with deadlines, never fixed sleeps: on a
    loaded machine the child can start, allocate and spin seconds late."""
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys, time\n"
                               "c = subprocess.Popen([sys.executable, '-c', 'x = bytearray(80 << 20); "
                               "import time\\nt = time.time()\\nwhile time.time() - t < 30: pass'])\n"
                               "c.wait()"])
    try:
        tree = ProcessTree(parent.pid, relist_every_s=0.0)
        probe = HostProbe()
        deadline = time.monotonic() + 20
        while len(tree.refresh()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = tree.refresh()
        assert parent.pid in pids and len(pids) == 2
        probe.read(pids)
        values: dict = {}
        while time.monotonic() < deadline:  # until the child holds its 80 MiB and has spun for a while
            time.sleep(0.5)
            values = probe.read(tree.refresh())
            if values["rss_mib"] > 80 and values["cpu_util_pct"] > 2:
                break
        assert values["rss_mib"] > 80
        # the child's busy loop is counted for the tree (idle: ~0; seen at 9% of a core on a machine loaded 6x)
        assert values["cpu_util_pct"] > 2
        assert values["sys_mem_used_mib"] > 0
    finally:
        for pid in ProcessTree(parent.pid, relist_every_s=0.0).refresh() - {parent.pid}:
            os.kill(pid, signal.SIGKILL)
        parent.wait(timeout=20)
    with pytest.raises(WorkerGoneError):
        tree.refresh()


@pytest.mark.process
def test_process_tree_relists_children_on_its_own_schedule():
    clock = FakeClock(0.0)
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\ntime.sleep(0.5)\n"
                               "subprocess.run([sys.executable, '-c', 'import time; time.sleep(4)'])"])
    try:
        tree = ProcessTree(parent.pid, relist_every_s=1.0, clock=clock)
        assert tree.refresh() == {parent.pid}
        assert len(wait_for_children(parent.pid)) == 1  # the child is up now, but the list is not due yet
        assert tree.refresh() == {parent.pid}
        clock.t = 1.0
        assert len(tree.refresh()) == 2
    finally:
        parent.wait(timeout=20)


@pytest.mark.process
def test_proc_children_listing_agrees_with_psutil_and_falls_back_without_it(monkeypatch):
    from harness.monitor import probes

    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys\n"
                               "subprocess.run([sys.executable, '-c', 'import time; time.sleep(4)'])"])
    try:
        via_psutil = wait_for_children(parent.pid)
        assert len(via_psutil) == 1
        if probes._proc_descendants(parent.pid) is not None:  # kernels without the files use psutil
            assert set(probes._proc_descendants(parent.pid)) == via_psutil
        monkeypatch.setattr(probes.os.path, "exists", lambda path: False)
        assert probes._proc_descendants(parent.pid) is None
        assert ProcessTree(parent.pid).refresh() == {parent.pid, *via_psutil}
    finally:
        parent.wait(timeout=20)


def test_replay_from_a_csv(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("t_s,phase,gpu_util_pct,energy_mj,gap_reason\n0.0,setup,10,18446744073709550616,\n"
                    "0.1,timed,,,NVML: GPU is lost\n")
    probe = ReplayProbe.from_csv(path)
    assert probe.read(frozenset())["gpu_util_pct"] == 10.0
    with pytest.raises(Exception, match="GPU is lost"):
        probe.read(frozenset())
    with pytest.raises(WorkerGoneError):
        probe.read(frozenset())


@pytest.mark.no_gpu
def test_factory_notice_on_a_machine_without_gpu():
    exp = parse_experiment({"name": "n", "frameworks": ["pytorch"], "batch_sizes": [2]})
    factory, notice = monitor_factory_for(exp)
    assert factory is not None
    assert notice.splitlines()[0].startswith("no GPU: running on CPU — GPU columns will be empty")
    assert "every 100 ms" in notice
    exp_cpu = parse_experiment({"name": "n", "frameworks": ["pytorch"], "batch_sizes": [2], "device": "cpu",
                                "sample_interval_ms": 250})
    _, notice = monitor_factory_for(exp_cpu)
    assert "GPU not sampled (device = cpu)" in notice and "every 250 ms" in notice


def test_an_interval_too_fine_to_be_free_is_refused_with_what_to_do():
    from harness.errors import ConfigError

    exp = parse_experiment({"name": "n", "frameworks": ["pytorch"], "batch_sizes": [2],
                            "sample_interval_ms": 2})
    with pytest.raises(ConfigError, match="sample_interval_ms = 2 is below 10 ms.*use 100"):
        monitor_factory_for(exp)


@pytest.mark.process
def test_worker_killed_mid_trial_ends_sampling_cleanly(tiny_data, tmp_path):
    exp = parse_experiment({"name": "n", "frameworks": ["pytorch"], "batch_sizes": [2],
                            "sample_interval_ms": 20})
    factory, _ = monitor_factory_for(exp)
    trial = make_trial(adapter_options={"behaviour": "sigkill"})
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target="tests.fakes.adapter:FakeAdapter")
    outcome = LocalExecutor(monitor_factory=factory, log_dir=tmp_path).run(unit)
    assert outcome.status == "crashed"
    mon = outcome.monitor
    assert mon.samples and ("exited" in mon.end_reason or "executor" in mon.end_reason)
    assert mon.aggregates["rss_peak_mib"] > 0
    assert {s["phase"] for s in mon.samples} <= {"spawn", "setup", "warmup", "timed"}
