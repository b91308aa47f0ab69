"""Issue 13, items 6 and 14: values that would crash after a trial ran (SQLite's integer range), that the
probes cannot use (inf, 1e30 MiB), or that NumPy refuses (a negative seed) are refused before anything
starts, with the key (or the flag that set it) and the value; so is an experiment file that is not UTF-8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.helpers import assert_refused, cli, fake_experiment

BIG = "99999999999999999999"  # > 2**63 - 1, the largest SQLite INTEGER

FILE_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("seed-at-int64-max-with-repeats", {"seed": 2**63 - 1, "repeats": 2}, ("seed", "largest integer")),
    ("epochs-beyond-sqlite", {"epochs": f"RAW:{BIG}"}, ("epochs", "larger than the store can hold")),
    ("learning-rate-inf", {"learning_rate": "RAW:inf"}, ("learning_rate", "finite")),
    ("sample-interval-inf", {"sample_interval_ms": "RAW:inf"}, ("sample_interval_ms", "finite")),
    ("memory-limit-inf", {"memory_limit_mib": "RAW:inf"}, ("memory_limit_mib", "finite")),
    ("memory-limit-1e30", {"memory_limit_mib": 1e30}, ("memory_limit_mib", "largest usable value")),
    ("negative-seed", {"seed": -1}, ("seed", "must be >= 0")),
    ("settle-steps-zero", {"max_batch_settle_steps": 0}, ("max_batch_settle_steps", "must be >= 1")),
]


@pytest.mark.parametrize(("keys", "words"), [(k, w) for _, k, w in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_unusable_value_in_the_file_is_refused_up_front(tmp_path: Path, keys: dict[str, Any],
                                                        words: tuple[str, ...]) -> None:
    exp = fake_experiment(tmp_path, **keys)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, str(exp), *words)
    assert not (tmp_path / "out").exists()


def test_batch_size_beyond_sqlite_on_the_command_line_is_refused_as_the_flag(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path)
    done = cli(tmp_path, "run", str(exp), "--batch-sizes", BIG, "--out", str(tmp_path / "out"))
    assert_refused(done, "command line: --batch-sizes", "larger than the store can hold")
    assert f"{exp}: batch_sizes" not in done.stderr  # the file did not say it (item 14)
    assert not (tmp_path / "out").exists()


def test_a_bad_override_is_attributed_to_the_flag_not_the_file(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path)
    done = cli(tmp_path, "run", str(exp), "--epochs", "-1", "--out", str(tmp_path / "out"))
    assert_refused(done, "command line: --epochs", "-1 must be >= 0")
    assert str(exp) not in done.stderr


@pytest.mark.parametrize("value", ["inf", "1e30"])
def test_maxbatch_memory_limit_the_os_cannot_set_is_refused(tmp_path: Path, value: str) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", value, "--out", str(tmp_path / "mb"))
    assert_refused(done, "--memory-limit-mib")
    assert not (tmp_path / "mb").exists()


def test_an_experiment_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    exp = tmp_path / "latin1.toml"
    exp.write_bytes('name = "caf\u00e9"\nframeworks = ["fake"]\nbatch_sizes = [4]\n'.encode("latin-1"))
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, str(exp), "not UTF-8")
    assert not (tmp_path / "out").exists()


# issue 32, finding 1: a count that runs for ever is refused with its limit (nothing written) ...
BOUND_CASES: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("gradient-noise-1e8", {"gradient_noise": 100_000_000, "eval": True},
     ("gradient_noise", "100,000,000 is more than the largest usable value (10,000 groups)")),
    ("eval-points-1e9", {"eval_points": 10**9, "eval": True}, ("eval_points", "largest usable value (10,000 points)")),
    ("timed-steps-1e12", {"timed_steps": 10**12}, ("timed_steps", "largest usable value (1,000,000,000 steps)")),
    ("warmup-steps-1e12", {"warmup_steps": 10**12}, ("warmup_steps", "largest usable value")),
    ("repeats-1e9", {"repeats": 10**9}, ("repeats", "1000000000 trials, more than 100000")),
    ("accumulate-steps-1e6", {"accumulate_steps": 10**6}, ("accumulate_steps", "largest usable value (1,024")),
    ("settle-steps-1e6", {"max_batch_settle_steps": 10**6}, ("max_batch_settle_steps", "largest usable value")),
    ("threads-1e6", {"threads": 10**6}, ("threads", "largest usable value (4,096 threads)")),
    ("eval-batch-size-2e9", {"eval_batch_size": 2**40}, ("eval_batch_size", "largest usable value")),
]


@pytest.mark.parametrize(("keys", "words"), [(k, w) for _, k, w in BOUND_CASES], ids=[c[0] for c in BOUND_CASES])
def test_a_count_beyond_its_bound_is_refused_with_the_limit(tmp_path: Path, keys: dict[str, Any],
                                                            words: tuple[str, ...]) -> None:
    exp = fake_experiment(tmp_path, **keys)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, str(exp), *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_gradient_samples_and_eval_points_beyond_the_steps_are_capped_with_a_notice_and_stored(
        tmp_path: Path) -> None:
    """... and one within the bound but beyond what the training can use is capped, said, and stored as run:
    64 samples, 2 epochs: 32 steps at batch 4 (31 points inside, 8 groups of 4 gradients), 8 at batch 16."""
    import json

    from tests.faults.helpers import rows

    exp = fake_experiment(tmp_path, eval=True, epochs=2, batch_sizes=[4, 16], eval_points=100, gradient_noise=5000)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "note: eval_points = 100 is more than the training can use" in done.stderr, done.stderr
    assert "note: gradient_noise = 5000 is more than the training can use" in done.stderr, done.stderr
    assert "capped to 2 to 8 (by batch size)" in done.stderr
    stored = {r["batch_size"]: json.loads(r["spec_json"]) for r in rows(tmp_path / "out")}
    assert {b: (s["eval_points"], s["gradient_noise"]) for b, s in stored.items()} == {4: (31, 8), 16: (7, 2)}


def test_a_fraction_where_a_whole_number_goes_says_whole_number(tmp_path: Path) -> None:
    """Issue 32, finding 3: "gradient_noise: 0.5 should be a int"."""
    exp = fake_experiment(tmp_path, gradient_noise=0.5)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert_refused(done, "gradient_noise: 0.5 should be a whole number")
    assert " a int" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_maxbatch_threads_beyond_any_machine_are_refused(tmp_path: Path) -> None:
    done = cli(tmp_path, "maxbatch", "--framework", "fake", "--model", "tiny_cnn", "--synthetic-shape", "1,8,8",
              "--memory-limit-mib", "1024", "--threads", "1000000", "--out", str(tmp_path / "mb"))
    assert_refused(done, "--threads 1,000,000 is more than the largest usable value (4,096)")
    assert not (tmp_path / "mb").exists()
