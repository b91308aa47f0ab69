"""Every ``--json`` output is strict JSON (issue 43): RFC 8259 has no NaN or infinity, so a non-finite number is
written as null with its reason, and the dump runs with ``allow_nan=False`` so that one the walk misses fails here."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from harness.cli import main
from harness.cli.jsonout import NULL_REASONS, dumps, strict
from harness.config.trial import OptimizerSpec
from harness.records import CurvePoint, TrialOutcome, WorkerMetrics
from harness.store import Store
from tests.conftest import make_trial


def strict_loads(text: str) -> Any:
    """``json.loads`` as an RFC 8259 parser (jq, ``JSON.parse``) reads: NaN, Infinity and -Infinity refused."""
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_the_strict_parser_of_these_tests_refuses_what_json_dump_writes_by_default():
    with pytest.raises(ValueError, match="Infinity"):
        strict_loads(json.dumps({"lr": math.inf}))


def test_non_finite_numbers_become_null_with_the_reason_beside():
    out = strict_loads(dumps({"lr": math.inf, "loss": -math.inf, "ok": 1.5, "inner": {"x": math.nan},
                              "sizes": [1.0, math.nan, {"y": math.inf}]}))
    assert out["lr"] is None and "inf" in out["lr_null_reason"] and out["ok"] == 1.5
    assert out["loss"] is None and "-inf" in out["loss_null_reason"]
    assert out["inner"] == {"x": None, "x_null_reason": out["inner"]["x_null_reason"]}
    assert out["sizes"][:2] == [1.0, None] and out["sizes"][2]["y"] is None
    assert out[NULL_REASONS] == [{"path": "sizes[1]", "reason": out[NULL_REASONS][0]["reason"]}]
    assert strict({"a": 1}) == {"a": 1}  # nothing added where nothing was non-finite


def test_a_non_finite_number_the_walk_cannot_reach_fails_loudly():
    with pytest.raises(ValueError, match="JSON compliant"):  # allow_nan=False: never Infinity on stdout
        dumps({"values": {math.inf}}, default=list)


def _diverged_at_an_infinite_rate(batch: int, lr: float, accs: list[float], status: str) -> TrialOutcome:
    trial = make_trial(batch_size=batch, epochs=5, optimizer=OptimizerSpec(name="sgd", lr=lr), variant=f"lr_x{lr!r}",
                       stop_at_accuracy=90.0, eval_every_samples=10 * batch)
    curve = [CurvePoint(point=i, step=10 * (i + 1), samples_seen=10 * (i + 1) * batch, epoch=0.1 * (i + 1),
                        train_s=10.0 * (i + 1), accuracy=a, eval_loss=1.0, eval_samples=100, eval_s=0.1)
             for i, a in enumerate(accs)]
    return TrialOutcome(trial=trial, status=status, metrics=WorkerMetrics(accuracy=accs[-1]), curve=curve,
                        reason="eval loss is nan" if status == "diverged" else "")


def test_recommend_json_parses_strictly_on_a_store_holding_an_infinite_rate(tmp_path, capsys):
    # issue 43: learning_rate = 1e300 x lr_factors [1e8], scaled linearly, trained at inf (stored diverged), and
    # recommend --json printed "lr": Infinity. Such a file is refused up front now (tests/config); a store written
    # before that still holds the row, and every --json output must parse under a strict parser anyway
    with Store.open(tmp_path) as store:
        run = store.begin_run("test", {"name": "test", "frameworks": ["fake"], "epochs": 5, "train_to_target": True,
                                       "target_accuracy": 90.0, "lr_factors": [1e8, 1.0]}, "", {})
        for batch in (8, 32):
            store.write_trial(_diverged_at_an_infinite_rate(batch, math.inf, [0.95], "diverged"), run, {})
            store.write_trial(_diverged_at_an_infinite_rate(batch, 0.01, [0.85, 0.95], "ok"), run, {})
    assert main(["recommend", str(tmp_path), "--json"]) == 0
    printed = capsys.readouterr().out
    assert "Infinity" not in printed and "NaN" not in printed
    assert '"lr": null' in printed and '"lr_null_reason": "inf is not a number' in printed  # the row reached it
    out = strict_loads(printed)
    assert out["experiments"] and out["experiments"][0]["experiment"] == "test"


def test_adapters_json_parses_strictly(capsys):
    assert main(["adapters", "--json"]) == 0
    out = strict_loads(capsys.readouterr().out)
    assert out["adapters"] and {"api_version", "adapters", "warnings"} <= out.keys()


def test_every_command_with_a_json_option_prints_through_the_strict_dump():
    # a command that gains --json later must print through harness.cli.jsonout too, or this fails
    from tests import ROOT

    with_json = [p for p in sorted((ROOT / "harness" / "cli").glob("*.py")) if '"--json"' in p.read_text()]
    assert {p.stem for p in with_json} >= {"recommend", "adapters"}
    for path in with_json:
        text = path.read_text()
        assert "jsonout import dumps" in text and "json.dump(" not in text and "json.dumps(" not in text, path
