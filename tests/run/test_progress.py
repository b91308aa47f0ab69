"""Live progress from the worker: a bounded rate, the last step always, none when switched off."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.records import TrialUnit
from harness.run.executor import LocalExecutor
from harness.run.protocol import Message, Progress, ProgressTicker, decode, encode
from tests.conftest import make_trial
from tests.fakes.adapter import FakeAdapter

TARGET = "tests.fakes.adapter:FakeAdapter"


class _Chan:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, msg: Message) -> None:
        self.sent.append(decode(encode(msg)).to_dict())  # through the real encoding


def test_ticker_sends_at_most_once_per_interval_and_always_the_last_step() -> None:
    chan = _Chan()
    ticker = ProgressTicker(chan, 0.5, steps_total=10, steps_per_epoch=5, epochs=2)  # type: ignore[arg-type]
    for step, now in enumerate([0.0, 0.1, 0.2, 0.55, 0.6, 0.7, 1.2, 1.3, 1.4, 1.45]):
        ticker.tick(now, step, "train", 12.5)
    assert [m["step"] for m in chan.sent] == [1, 4, 7, 10]  # t = 0, 0.55, 1.2, and the last step
    assert [m["epoch"] for m in chan.sent] == [1, 1, 2, 2]
    assert all(m["steps_total"] == 10 and m["epochs"] == 2 and m["step_ms"] == 12.5 for m in chan.sent)


def test_ticker_off_sends_nothing() -> None:
    chan = _Chan()
    ticker = ProgressTicker(chan, None, steps_total=3, steps_per_epoch=3, epochs=0)  # type: ignore[arg-type]
    for step in range(3):
        ticker.tick(float(step), step, "timed", 1.0)
    assert chan.sent == [] and ticker.sent == 0


@pytest.mark.process
@pytest.mark.parametrize(("interval_s", "steps"), [(None, []), (0.0, [1, 2, 3, 4]), (60.0, [1, 4])])
def test_the_executor_hands_progress_from_a_real_worker_on(tiny_data, tmp_path, interval_s, steps) -> None:
    trial = make_trial(adapter_options={"behaviour": "ok"})  # 1 warm-up + 3 timed steps
    unit = TrialUnit(trial=trial, data=tiny_data, order_path=str(tiny_data.write_order(0, 0)),
                     adapter_target=TARGET, oom_patterns=FakeAdapter.oom_stderr_patterns)
    events: list[Message] = []
    outcome = LocalExecutor(log_dir=tmp_path).run(dataclasses.replace(unit, progress_interval_s=interval_s),
                                                  on_event=events.append)
    assert outcome.status == "ok", outcome.reason
    progress = [e for e in events if isinstance(e, Progress)]
    assert [e.step for e in progress] == steps
    assert all(e.steps_total == 4 for e in progress)
    assert len(outcome.step_times_ms) == 4  # the timing is collected the same way either way
