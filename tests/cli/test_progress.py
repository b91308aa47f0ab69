"""The progress display: ETAs from a fake clock, plain lines when not a terminal, rich bars when it is."""

from __future__ import annotations

import io

from harness.cli.progress import Eta, PlainProgress, RichProgress, fmt_duration, make_progress
from harness.records import TrialOutcome, WorkerMetrics
from harness.run.protocol import Progress
from tests.conftest import make_trial


def _progress(step: int, t: float, total: int = 100) -> Progress:
    return Progress(t=t, step=step, steps_total=total, epoch=1, epochs=2, step_ms=10.0, phase="train")


def test_trial_eta_is_the_remaining_steps_at_the_rate_shown() -> None:
    eta = Eta({"a": (100, 1000)})
    eta.start("a", 0.0)
    assert eta.trial_eta_s("a") is None
    eta.event("a", _progress(10, 50.0))
    eta.event("a", _progress(30, 60.0))  # 20 steps in 10 s: 2 steps/s, 70 left
    assert eta.trial_eta_s("a") == 35.0
    assert eta.trial_steps("a") == (30, 100)


def test_sweep_eta_uses_seconds_per_sample_of_the_finished_trials() -> None:
    eta = Eta({"a": (100, 1000), "b": (10, 1000), "c": (50, 2000)})
    eta.start("a", 0.0)
    assert eta.sweep_eta_s(5.0) is None  # no rate before a trial has finished
    eta.finish("a", 20.0, trained=True)  # 0.02 s per sample
    assert eta.sweep_eta_s(20.0) == (1000 + 2000) * 0.02
    eta.start("b", 20.0)
    eta.event("b", _progress(2, 21.0, total=10))
    eta.event("b", _progress(6, 23.0, total=10))  # 2 steps/s, 4 left: 2 s
    assert eta.sweep_eta_s(23.0) == 2.0 + 2000 * 0.02
    eta.finish("b", 5.0, trained=False)  # a failed trial does not count as a rate
    assert eta.seconds_per_sample() == 0.02


def test_fmt_duration() -> None:
    assert (fmt_duration(None), fmt_duration(65), fmt_duration(3725)) == ("?", "1:05", "1:02:05")


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_when_redirected_rate_limited_with_etas() -> None:
    out = io.StringIO()
    assert isinstance(make_progress(stream=out), PlainProgress)  # StringIO is not a terminal
    assert not isinstance(make_progress(stream=out), RichProgress)
    clock = _Clock()
    display = PlainProgress(out, clock=clock, every_s=15.0)
    a, b = make_trial(batch_size=8), make_trial(batch_size=64)
    display.plan([a, b], {a.trial_hash: (100, 800), b.trial_hash: (20, 1280)})
    display.start(1, 2, a)
    for step in range(1, 101):
        clock.t = step * 0.5
        display.event(a, _progress(step, clock.t))
    done = WorkerMetrics(step_samples_per_s=16.0, e2e_samples_per_s=15.0)
    display.done(1, 2, TrialOutcome(trial=a, status="ok", elapsed_s=52.0, metrics=done))
    lines = out.getvalue().splitlines()
    assert lines[0] == "2 trial(s) to run, 120 training steps planned"
    assert "running..." in lines[1]
    live = [ln for ln in lines if "trial ETA" in ln]
    assert 3 <= len(live) <= 4  # 50 s of progress at most one line per 15 s, not 100 lines
    assert "epoch 1/2" in live[0] and "10.0 ms/step" in live[0]
    assert lines[-1].startswith("[  1/2] fake") and "step 16.0 / e2e 15.0 samples/s" in lines[-1]
    assert lines[-1].endswith("sweep ETA 1:23")  # 1280 samples at 52 s / 800 samples


def test_rich_bars_render_on_a_terminal() -> None:
    from rich.console import Console

    out = io.StringIO()
    display = RichProgress(console=Console(file=out, force_terminal=True, width=120))
    a = make_trial(batch_size=8)
    with display:
        display.plan([a], {a.trial_hash: (100, 800)})
        display.start(1, 1, a)
        display.event(a, _progress(40, 1.0))
        display.bars.refresh()
        done = WorkerMetrics(step_samples_per_s=160.0, e2e_samples_per_s=150.0)
        display.done(1, 1, TrialOutcome(trial=a, status="ok", elapsed_s=5.0, metrics=done))
    text = out.getvalue()
    assert "40/100" in text and "epoch 1/2" in text  # the trial's bar
    assert "step 160.0 / e2e 150.0 samples/s" in text  # the result line printed above the bars
