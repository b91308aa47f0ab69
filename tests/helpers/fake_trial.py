"""One trial of the framework-free fake adapter, run in a real worker process by :class:`LocalExecutor`."""

from __future__ import annotations

from typing import Any

from harness.records import TrialOutcome, TrialUnit
from harness.run.executor import LocalExecutor
from harness.run.protocol import Message
from tests.conftest import make_trial
from tests.fakes.adapter import FakeAdapter

TARGET = "tests.fakes.adapter:FakeAdapter"


def run_fake(tiny_data, tmp_path, behaviour: str = "ok", **trial: Any) -> tuple[TrialOutcome, list[dict[str, Any]]]:
    """The outcome and the worker's events of a fake trial (two epochs at batch 8 unless ``trial`` says otherwise)
    that behaves as ``behaviour`` (see :class:`tests.fakes.adapter.FakeAdapter`)."""
    spec = make_trial(adapter_options={"behaviour": behaviour}, **{"epochs": 2, "batch_size": 8, **trial})
    unit = TrialUnit(trial=spec, data=tiny_data, order_path=str(tiny_data.write_order(spec.seed, spec.epochs)),
                     adapter_target=TARGET, oom_patterns=FakeAdapter.oom_stderr_patterns)
    events: list[Message] = []
    return LocalExecutor(log_dir=tmp_path).run(unit, on_event=events.append), events
