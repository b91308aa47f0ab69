"""Issue 13, items 11 and 14: messages that say what happened and what to do, and a cluster address that
does not answer is refused in seconds instead of hanging."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, bs, cli, fake_experiment


def test_compare_on_a_store_without_sweep_trials_says_so(tmp_path: Path) -> None:
    from harness.records import TrialOutcome
    from harness.store import Store
    from tests.conftest import make_trial

    out = tmp_path / "mb"
    probe = make_trial(experiment="maxbatch", purpose="probe", batch_size=8)
    with Store.open(out) as store:
        run_id = store.begin_run("maxbatch", {}, "batchscope maxbatch", {})
        store.write_trial(TrialOutcome(trial=probe, status="ok"), run_id, {})
    done = cli(tmp_path, "compare", str(out))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "data set ," not in done.stdout and "epochs ." not in done.stdout
    assert "no sweep trials" in done.stdout


def test_a_trial_reason_in_the_progress_line_is_cut_between_words() -> None:
    from harness.cli.table import shorten

    reason = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor " * 3
    short = shorten(reason, 90)
    assert len(short) <= 90 and short.endswith(" …")
    kept = short.removesuffix(" …")
    assert reason.startswith(kept) and reason[len(kept)] == " "  # the cut falls on a space, not mid-word


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.process
def test_an_unreachable_ray_address_is_refused_in_seconds(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is optional (batchscope[cluster]) and not installed here")
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    t0 = time.monotonic()
    # a process of its own: a failed ray.init must not leave Ray's state in the test process
    done = bs(tmp_path, "run", str(fake_experiment(tmp_path)), "--out", str(tmp_path / "out"),
              "--ray-address", address, timeout=120)
    assert_refused(done, address, "ray status --address")
    assert time.monotonic() - t0 < 90  # ray.init itself kept retrying for minutes


@pytest.mark.parametrize("command", ["report", "export", "compare"])
def test_ctrl_c_in_a_command_without_resume_does_not_suggest_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str], command: str,
                                                               ) -> None:
    import harness.cli as cli

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices[command].set_defaults(func=interrupted)  # type: ignore[union-attr]
    assert cli.main([command, str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" not in err
