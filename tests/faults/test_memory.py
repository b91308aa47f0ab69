"""Issue 13, item 1: the parent's memory is bounded. Sizes that would need more memory (or disk) than
there is are refused up front with the size they would need: exit 2, nothing written, no traceback.

Every command runs under RLIMIT_DATA on its own process (``BATCHSCOPE_TEST_RLIMIT_DATA_MIB``), so a
regression fails the test (a MemoryError traceback) instead of growing the machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.helpers import assert_refused, bs, fake_experiment

#: enough for the CLI, NumPy and the store; far below what the refused sizes would need
LIMIT_MIB = 1536


@pytest.mark.process
def test_synthetic_data_too_large_for_memory_is_refused_with_its_size(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, synthetic_shape=[3, 512, 512], synthetic_samples=2048)
    done = bs(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), rlimit_data_mib=LIMIT_MIB)
    assert_refused(done, "GiB of memory", "synthetic_samples or synthetic_shape")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_maxbatch_input_too_large_for_memory_is_refused_with_its_size(tmp_path: Path) -> None:
    done = bs(tmp_path, "maxbatch", "--framework", "fake", "--model", "deep_cnn", "--synthetic-shape", "3,512,512",
              "--memory-limit-mib", "700", "--out", str(tmp_path / "mb"), rlimit_data_mib=LIMIT_MIB)
    assert_refused(done, "GiB of memory", "--synthetic-shape")
    assert not (tmp_path / "mb").exists()


@pytest.mark.process
def test_epochs_whose_shuffle_order_cannot_be_stored_are_refused(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path, epochs=10**15)
    done = bs(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), rlimit_data_mib=LIMIT_MIB)
    assert_refused(done, "shuffle order", "GiB of disk", "lower epochs")
    assert not (tmp_path / "out").exists()


def test_the_shuffle_order_of_many_epochs_is_streamed_not_held(tmp_path: Path) -> None:
    """4,000 epochs x 64 samples: 1 MiB on disk, and the parent never holds 4,000 permutations at once
    (np.stack of them took ~2 GiB of temporaries per 100 MiB of order before it was streamed)."""
    import numpy as np

    from harness.data import DataRequest, prepare

    data = prepare(DataRequest(name="synthetic", synthetic_shape=(1, 8, 8), synthetic_samples=64,
                               synthetic_classes=3), tmp_path / "cache")
    order = np.load(data.write_order(seed=5, epochs=4000), mmap_mode="r")
    rng = np.random.default_rng(np.random.SeedSequence([5, 0x0BA7C4]))
    expected = np.stack([rng.permutation(64) for _ in range(4000)]).astype(np.int32)
    assert order.shape == (4000, 64) and order.dtype == np.int32
    assert np.array_equal(order, expected)  # the same order the unstreamed code wrote


@pytest.mark.process
def test_a_plan_of_too_many_trials_is_refused_before_it_is_built(tmp_path: Path) -> None:
    exp = fake_experiment(tmp_path)
    done = bs(tmp_path, "run", str(exp), "--repeats", "100000000", "--out", str(tmp_path / "out"),
              rlimit_data_mib=LIMIT_MIB)
    assert_refused(done, "--repeats", "100000000 trials")
    assert not (tmp_path / "out").exists()
