"""Batches prepared while the step runs (issue 31, item 7; harness/run/worker/prefetch.py): the mechanism with
fake adapters, the ``prefetch`` key, its place in the trial hash, and its columns in the store. No framework."""

from __future__ import annotations

import importlib.metadata as md
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import registry
from harness.config.experiment import parse_experiment
from harness.errors import ConfigError
from harness.run.sweep import SweepOptions, run_sweep
from harness.run.worker.prefetch import Prefetcher, with_next
from harness.run.worker.steps import StepPlan, StepRunner, train
from harness.store import Store
from tests.conftest import make_trial
from tests.fakes.adapter import FakeAdapter

MAIN = threading.main_thread().name


class Recorder:
    """Records every batch trained and the thread each preparation ran on (not an Adapter: no hook detection)."""

    def __init__(self) -> None:
        self.trained: list[tuple[np.ndarray, np.ndarray]] = []
        self.prepared_on: list[str] = []
        self.accumulated: list[float] = []

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.prepared_on.append(threading.current_thread().name)
        return x.copy(), y.copy()

    def train_step(self, batch: Any) -> None:
        self.trained.append(batch)

    def accumulate_gradients(self, batch: Any, weight: float) -> None:
        self.trained.append(batch)
        self.accumulated.append(weight)

    def apply_accumulated(self) -> None:
        pass


class AheadRecorder(Recorder):
    """Has the optional hook: what it returns is what train_step must get, unchanged."""

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        self.prepared_on.append(f"ahead on {threading.current_thread().name}")
        return x.copy(), y.copy()


class _Ticker:
    def tick(self, *args: Any) -> None:
        pass


def _train(adapter: Recorder, prefetch: bool, **kw: Any) -> StepRunner:
    n = 50
    trial = make_trial(batch_size=8, prefetch=prefetch, epochs=2, augment="crop_flip", seed=3, **kw)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 1, 6, 6)).astype(np.float32)
    y = rng.integers(0, 3, n)
    order = np.stack([rng.permutation(n) for _ in range(2)])
    runner = StepRunner(adapter, trial, x, y, n)  # type: ignore[arg-type]
    steps = 2 * -(-n // trial.effective_batch_size)
    try:
        train(runner, order, StepPlan(1, 2, steps - 3), lambda _: None, _Ticker(), lambda: None)  # type: ignore[arg-type]
    finally:
        runner.close()
    return runner


@pytest.mark.parametrize("accumulate", [1, 3])
def test_the_batches_trained_are_identical_with_prefetch_on_and_off(accumulate: int) -> None:
    off, on = Recorder(), Recorder()
    r_off, r_on = _train(off, False, accumulate_steps=accumulate), _train(on, True, accumulate_steps=accumulate)
    assert len(on.trained) == len(off.trained) > 10
    for (xa, ya), (xb, yb) in zip(on.trained, off.trained, strict=True):
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)  # augmented: per-epoch draws match too
    assert on.accumulated == off.accumulated and r_on.micro_batches_n == r_off.micro_batches_n == len(on.trained)


def test_without_the_hook_only_the_gathering_is_ahead_and_prepare_batch_stays_on_the_training_thread() -> None:
    adapter = Recorder()
    runner = _train(adapter, True)
    assert set(adapter.prepared_on) == {MAIN} and runner.prefetcher is not None and not runner.device_ahead


def test_with_the_hook_the_adapter_prepares_ahead_on_another_thread_and_trains_what_it_returned() -> None:
    adapter, plain = AheadRecorder(), Recorder()
    runner = _train(adapter, True)
    _train(plain, False)
    assert runner.device_ahead
    # the first batch: nothing ran before it to overlap with, and prepare_batch (JAX compiles there) prepares it
    assert adapter.prepared_on[0] == MAIN  # and only then the next one is started ahead
    assert set(adapter.prepared_on[1:]) == {"ahead on batchscope-prefetch_0"}
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(adapter.trained, plain.trained, strict=True))


def test_prefetch_off_prepares_everything_on_the_training_thread_even_with_the_hook() -> None:
    adapter = AheadRecorder()
    runner = _train(adapter, False)
    assert set(adapter.prepared_on) == {MAIN} and runner.prefetcher is None and not runner.device_ahead


def test_accumulation_prepares_its_micro_batches_on_the_training_thread_even_with_the_hook() -> None:
    adapter = AheadRecorder()
    runner = _train(adapter, True, accumulate_steps=2)
    assert not runner.device_ahead and set(adapter.prepared_on) == {MAIN}


def test_the_builtin_hook_detection_reads_the_class() -> None:
    class Ahead(FakeAdapter):
        def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
            return self.prepare_batch(x, y)

    x, y = np.zeros((4, 3, 8, 8), np.float32), np.zeros(4, np.int64)
    assert not StepRunner(FakeAdapter(), make_trial(), x, y, 4).device_ahead  # a plugin without it: unchanged
    assert StepRunner(Ahead(), make_trial(), x, y, 4).device_ahead


def test_the_prefetcher_takes_the_background_result_or_prepares_inline_and_reraises_its_errors() -> None:
    calls: list[tuple[int, str]] = []

    def prepare(step: int, idx: Any) -> Any:
        calls.append((step, threading.current_thread().name))
        if idx == "bad":
            raise MemoryError("out of memory")
        return step * 10

    p = Prefetcher(prepare, lambda step, idx: ("inline", prepare(step, idx)))
    try:
        assert p.take(0, "i") == ("inline", 0) and calls[-1] == (0, MAIN)
        p.ahead(1, "i")
        assert p.take(1, "i") == 10 and calls[-1][1] != MAIN
        p.ahead(5, "i")  # not the step taken next (the loop moved on): prepared again, here
        assert p.take(2, "i") == ("inline", 20) and calls[-1] == (2, MAIN)
        p.ahead(3, "bad")
        with pytest.raises(MemoryError):  # on the training thread, where the worker classifies it
            p.take(3, "bad")
    finally:
        p.close()


def test_a_prefetch_thread_that_cannot_start_is_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapters.base import is_generic_oom

    def no_thread(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("can't start new thread")

    p = Prefetcher(lambda step, idx: step, lambda step, idx: step)
    monkeypatch.setattr("concurrent.futures.ThreadPoolExecutor.submit", no_thread)
    with pytest.raises(MemoryError) as caught:  # a thread's stack counts in the probe's RLIMIT_DATA
        p.ahead(1, "i")
    assert is_generic_oom(caught.value)
    p.close()


def test_with_next_pairs_each_item_with_the_following_one() -> None:
    assert list(with_next([1, 2, 3])) == [(1, 2), (2, 3), (3, None)]
    assert list(with_next([])) == []


def test_prefetch_is_hashed_only_when_off() -> None:
    default = make_trial()
    assert make_trial(prefetch=True).trial_hash == default.trial_hash
    assert make_trial(prefetch=False).trial_hash != default.trial_hash
    assert "prefetch" not in default.to_dict() or default.to_dict()["prefetch"] is True


_EXP = {"name": "pf", "frameworks": ["fake"], "model": "tiny_cnn", "dataset": "synthetic",
        "synthetic_shape": [1, 8, 8], "synthetic_samples": 40, "synthetic_classes": 3, "batch_sizes": [8],
        "warmup_steps": 1, "timed_steps": 2, "device": "cpu", "timeout_s": 60, "eval_points": 0}


@pytest.mark.parametrize("value", ["yes", 1, "false"])
def test_the_key_takes_true_or_false_only(value: object) -> None:
    with pytest.raises(ConfigError, match="prefetch"):
        parse_experiment({**_EXP, "prefetch": value}, source="inline")


@pytest.fixture()
def fake_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = dict(registry._entry_points())
    eps["fake"] = md.EntryPoint(name="fake", value="tests.fakes.adapter:FakeAdapter", group=registry.GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)


@pytest.mark.process
@pytest.mark.parametrize("prefetch", [True, False])
def test_what_ran_is_stored_per_trial(fake_registered: None, tmp_path: Path, cache_dir: Path,
                                      prefetch: bool) -> None:
    exp = parse_experiment({**_EXP, "prefetch": prefetch}, source="inline")
    run_sweep(exp, tmp_path / "out", SweepOptions(cache_dir=cache_dir))
    with Store.open(tmp_path / "out", create=False) as store:
        (row,) = store.trials()
    assert row["status"] == "ok"
    assert row["prefetch"] == int(prefetch) and row["prefetch_device"] == 0  # the fake has no hook


class _FakeTorch:
    """What PyTorch's CUDA prefetch path calls, recorded in order (no GPU, no torch here)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.current = "default"
        torch = self

        class Tensor:
            def __init__(self, array: np.ndarray, where: str = "host") -> None:
                self.array, self.where = array, where

            def pin_memory(self) -> Tensor:
                torch.calls.append("pin")
                return Tensor(self.array, "pinned")

            def to(self, device: str, non_blocking: bool = False) -> Tensor:
                torch.calls.append(f"copy {self.where}->{device} on {torch.current} non_blocking={non_blocking}")
                return Tensor(self.array, device)

        class Stream:
            def __init__(self, device: str) -> None:
                torch.calls.append("new stream")

            def synchronize(self) -> None:
                torch.calls.append("stream sync")

        class StreamScope:
            def __init__(self, stream: Stream) -> None:
                pass

            def __enter__(self) -> None:
                torch.current = "copy stream"

            def __exit__(self, *exc: object) -> None:
                torch.current = "default"

        def device_sync() -> None:
            self.calls.append("device sync")

        self.cuda = type("cuda", (), {"Stream": Stream, "stream": StreamScope,
                                      "synchronize": staticmethod(device_sync)})
        self.from_numpy = Tensor


def test_pytorch_on_a_gpu_copies_ahead_from_pinned_memory_non_blocking_on_its_own_stream() -> None:
    from adapters.pytorch import PyTorchAdapter

    adapter = PyTorchAdapter()
    adapter.torch, adapter.cuda, adapter.device = _FakeTorch(), True, "cuda:0"
    x, y = np.ones((4, 1, 2, 2), np.float64), np.arange(4)
    for _ in range(2):
        xd, yd = adapter.prepare_batch_ahead(x, y)
    assert xd.where == yd.where == "cuda:0" and xd.array.dtype == np.float32 and yd.array.dtype == np.int64
    copy = "copy pinned->cuda:0 on copy stream non_blocking=True"
    # one stream for the trial; the device-wide synchronisation (which would wait for the running step) never
    assert adapter.torch.calls == ["new stream"] + ["pin", copy, "pin", copy, "stream sync"] * 2
