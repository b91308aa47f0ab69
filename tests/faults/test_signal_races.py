"""Two races between a signal and the code it interrupts (issue 24's "every signal x every phase"), pinned in
process where a subprocess test can only hit them by chance (about 1 in 5 under load):

* a library that catches the exception a signal raised and raises its own (reportlab turned ``Terminated``
  into an error of its own while the report was drawn): the command still ends as stopped by that signal,
  with its exit code and no traceback;
* a signal between ``mkdtemp`` and the code that owns its result left a ``.report-*`` / ``.tmp-*``
  directory behind: the directory is now made with the signals held.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import harness.cli as cli
from harness.errors import Terminated
from harness.tmpnames import deferred_signals, temporary_directory


def _converting_call(sig: signal.Signals):
    def call(args: object) -> int:
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler raises here
        except (Terminated, KeyboardInterrupt):
            raise RuntimeError("a library's own error, raised while handling the signal's") from None
        raise AssertionError("the signal did not arrive")
    return call


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_a_library_turned_into_its_own_error_still_stops_the_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], sig: signal.Signals, code: int) -> None:
    if sig == signal.SIGINT and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a runner started with `cmd &` ignores it
    monkeypatch.setattr(cli, "_call", _converting_call(sig))
    assert cli.main(["compare", "somewhere"]) == code
    err = capsys.readouterr().err
    assert f"stopped: got {sig.name}" in err and "Traceback" not in err and "internal error" not in err


def test_an_error_with_no_signal_is_still_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    def call(args: object) -> int:
        raise RuntimeError("a bug")
    monkeypatch.setattr(cli, "_call", call)
    assert cli.main(["compare", "somewhere"]) == 1
    assert "internal error" in capsys.readouterr().err


def test_a_signal_in_a_deferred_block_arrives_after_it() -> None:
    previous = signal.signal(signal.SIGTERM, cli._raise_terminated)
    reached_end = False
    try:
        with pytest.raises(Terminated):
            with deferred_signals():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                reached_end = True  # not interrupted half-way
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert reached_end


def test_a_temporary_directory_interrupted_as_it_is_made_is_removed(tmp_path: Path) -> None:
    previous = signal.signal(signal.SIGTERM, cli._raise_terminated)
    made: list[str] = []
    real_mkdtemp = __import__("tempfile").mkdtemp

    def mkdtemp_then_signal(*args: object, **kwargs: object) -> str:
        name = real_mkdtemp(*args, **kwargs)
        made.append(name)
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while TemporaryDirectory is still being set up
        return name

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("tempfile.mkdtemp", mkdtemp_then_signal)
            with pytest.raises(Terminated):
                with temporary_directory("report", tmp_path):
                    pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert made and not Path(made[0]).exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_terminated_rebuilt_from_its_message_keeps_its_signal(sig: signal.Signals) -> None:
    """reportlab's annotateException re-raises ``type(e)(message + str(e))``: the rebuilt exception is still the
    signal's (it raised ValueError from Terminated's constructor, which took only a number)."""
    from reportlab.lib.utils import annotateException

    with pytest.raises(Terminated) as caught:
        try:
            raise Terminated(sig)
        except Terminated:
            annotateException("paragraph text 'x' caused exception")
    assert caught.value.signum == sig and caught.value.exit_code == 128 + sig
