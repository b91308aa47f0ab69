"""Steps queued and timed in windows for an adapter whose engine runs asynchronously (issue 40; the ``queued_steps``
capability, harness/run/worker/steps.py): which steps are queued, where the clock is read, what each step is given,
and how large a window may be. Fake adapters and a fake clock: no framework, nothing timed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from adapters.base import capabilities
from harness.run.worker import steps as steps_module
from harness.run.worker.steps import (
    MAX_STEP_WINDOW,
    QUEUED_INPUT_BYTES,
    StepPlan,
    StepRunner,
    step_window,
    train,
)
from tests.conftest import make_trial

ENGINE_MS = 5.0  # what one step's work takes on the fake engine


class FakeClock:
    """``time.perf_counter`` for the steps module: moves only when the fake engine works."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def perf_counter(self) -> float:
        return self.now_s


class QueuingAdapter:
    """An asynchronous engine: ``train_step_queued`` only records the step; the work is done (the clock moves by
    ``ENGINE_MS`` a step) when someone waits. ``log`` is every call, in order."""

    def __init__(self, clock: FakeClock, fail_at_wait: int | None = None) -> None:
        self.clock, self.fail_at_wait = clock, fail_at_wait
        self.log: list[str] = []
        self.pending = 0
        self.waits = 0

    def prepare_batch(self, x: np.ndarray, y: np.ndarray) -> Any:
        return x, y

    def prepare_batch_ahead(self, x: np.ndarray, y: np.ndarray) -> Any:
        return x, y

    def _work(self) -> None:
        self.clock.now_s += self.pending * ENGINE_MS / 1e3
        self.pending = 0

    def train_step(self, batch: Any) -> None:
        self.log.append("step")
        self.pending += 1
        self._work()

    def train_step_queued(self, batch: Any) -> None:
        self.log.append("queued")
        self.pending += 1

    def wait_steps(self) -> None:
        self.waits += 1
        if self.waits == self.fail_at_wait:
            raise MemoryError("out of memory in a queued step")
        self.log.append("wait")
        self._work()


class WaitingAdapter(QueuingAdapter):
    """The same engine without the capability: a plugin that only has ``train_step``."""

    train_step_queued = None  # type: ignore[assignment]
    wait_steps = None  # type: ignore[assignment]


class Ticks:
    def __init__(self) -> None:
        self.steps: list[tuple[int, str, float]] = []

    def tick(self, now_s: float, step: int, phase: str, step_ms: float) -> None:
        self.steps.append((step, phase, step_ms))


def _train(monkeypatch: pytest.MonkeyPatch, adapter: QueuingAdapter, plan: StepPlan, prefetch: bool = True,
           eval_at: tuple[int, ...] = (), batch: int = 4, n: int = 400,
           epochs: int = 0) -> tuple[StepRunner, Any, list[str], Ticks]:
    monkeypatch.setattr(steps_module, "time", SimpleNamespace(perf_counter=adapter.clock.perf_counter))
    trial = make_trial(batch_size=batch, prefetch=prefetch, epochs=epochs, warmup_steps=plan.warmup_n,
                       timed_steps=plan.timed_n)
    x, y = np.zeros((n, 1, 4, 4), np.float32), np.zeros(n, np.int64)
    runner = StepRunner(adapter, trial, x, y, n)  # type: ignore[arg-type]
    announced: list[str] = []
    ticks = Ticks()

    def announce(phase: str) -> None:
        announced.append(phase)
        adapter.log.append(f"phase {phase}")

    def at_point(step: int, samples: int, train_s: float) -> bool:
        adapter.log.append(f"eval at {step}")
        return True

    try:
        order = np.stack([np.arange(n)] * max(1, epochs))
        trained = train(runner, order, plan, announce, ticks, lambda: adapter.log.append("first"),  # type: ignore[arg-type]
                        eval_at=eval_at, at_point=at_point)
    finally:
        runner.close()
    return runner, trained, announced, ticks


def test_post_warmup_steps_are_queued_in_windows_and_each_gets_its_windows_mean(monkeypatch) -> None:
    adapter = QueuingAdapter(FakeClock())
    runner, trained, announced, ticks = _train(monkeypatch, adapter, StepPlan(2, 25, 0))
    assert runner.window == MAX_STEP_WINDOW == 10
    # warm-up waited step by step (the first step's check right after it); then windows of 10, 10 and the last 5
    expected = ["phase warmup", "step", "first", "step", "phase timed", *(["queued"] * 10 + ["wait"]) * 2,
                *["queued"] * 5, "wait"]
    assert adapter.log == expected
    assert len(trained.step_ms) == 27 and trained.step_ms == pytest.approx([ENGINE_MS] * 27)
    assert [s for s, _, _ in ticks.steps] == list(range(27)) and {p for _, p, _ in ticks.steps[2:]} == {"timed"}
    assert trained.post_warmup_s == pytest.approx(25 * ENGINE_MS / 1e3)  # the wall of the queued steps, all done


def test_a_window_is_the_wall_from_its_first_queued_step_to_the_wait_over_its_steps(monkeypatch) -> None:
    """Queueing itself takes time here (1 ms a step, on the training thread, while the engine works): a window
    of 10 steps is 10 x 5 ms of engine work after 1 ms of queueing at most, and each step is given that mean."""
    clock = FakeClock()
    adapter = QueuingAdapter(clock)
    queue = adapter.train_step_queued

    def slow_queue(batch: Any) -> None:
        queue(batch)
        clock.now_s += 1e-3  # the engine works meanwhile: waiting later costs that much less
        adapter.pending -= 0.2

    adapter.train_step_queued = slow_queue  # type: ignore[method-assign]
    _, trained, _, _ = _train(monkeypatch, adapter, StepPlan(1, 10, 0))
    assert trained.step_ms[1:] == pytest.approx([(10 * 1.0 + (10 - 2) * ENGINE_MS) / 10] * 10)


def test_a_window_ends_before_every_evaluation_and_every_new_phase(monkeypatch) -> None:
    adapter = QueuingAdapter(FakeClock())
    _, trained, announced, _ = _train(monkeypatch, adapter, StepPlan(1, 6, 8), eval_at=(4, 12), n=60,
                                            epochs=1)  # 15 steps: one epoch of 60 samples
    log = adapter.log
    for event in ("eval at 4", "phase train", "eval at 12"):
        i = log.index(event)
        assert log[i - 1] == "wait" and "queued" in log[:i]  # the queued steps were done before it began
    assert announced == ["warmup", "timed", "timed", "train", "train"]  # back into the phase after each evaluation
    assert log[-1] == "wait" and log.count("queued") == 14 and len(trained.step_ms) == 15


def test_an_error_a_queued_step_raises_at_the_wait_ends_the_training(monkeypatch) -> None:
    adapter = QueuingAdapter(FakeClock(), fail_at_wait=2)
    with pytest.raises(MemoryError, match="queued step"):
        _train(monkeypatch, adapter, StepPlan(1, 30, 0))
    assert adapter.log.count("queued") == 20  # the second window's wait raised; nothing was queued after it


@pytest.mark.parametrize("adapter_cls, prefetch", [(WaitingAdapter, True), (QueuingAdapter, False)])
def test_without_the_capability_or_without_batches_prepared_ahead_every_step_is_waited_for(monkeypatch, adapter_cls,
                                                                                          prefetch) -> None:
    """A plugin without ``queued_steps`` keeps the clock after every step; so does a trial that prepares its batches
    on the training thread (MXNet's ``prepare_batch`` waits for the whole engine: there is nothing to queue)."""
    adapter = adapter_cls(FakeClock())
    runner, trained, _, _ = _train(monkeypatch, adapter, StepPlan(1, 12, 0), prefetch=prefetch)
    assert runner.window == 1 and set(adapter.log) == {"phase warmup", "phase timed", "step", "first"}
    assert trained.step_ms == pytest.approx([ENGINE_MS] * 13)


def test_the_window_shrinks_so_that_the_queued_inputs_stay_within_their_bound() -> None:
    clock = FakeClock()
    sample = (3, 32, 32)  # 12,288 bytes of float32 and an 8-byte label a sample
    per_sample = 4 * 3 * 32 * 32 + 8
    assert step_window(QueuingAdapter(clock), 64, sample) == MAX_STEP_WINDOW  # 0.8 MB a batch
    assert step_window(QueuingAdapter(clock), 256, sample) == QUEUED_INPUT_BYTES // (256 * per_sample) == 5
    assert step_window(QueuingAdapter(clock), 2048, sample) == 1  # one batch is past the bound: waited step by step
    assert step_window(WaitingAdapter(clock), 64, sample) == 1


def test_mxnet_has_the_capability_and_the_others_wait_every_step() -> None:
    """Only MXNet's engine is queued on a CPU (issue 40); the class is read, its framework is not imported."""
    from adapters.jax import JAXAdapter
    from adapters.mxnet import MXNetAdapter
    from adapters.pytorch import PyTorchAdapter
    from adapters.tensorflow import TensorFlowAdapter

    assert "queued_steps" in capabilities(MXNetAdapter)
    assert not any("queued_steps" in capabilities(cls) for cls in (PyTorchAdapter, TensorFlowAdapter, JAXAdapter))
