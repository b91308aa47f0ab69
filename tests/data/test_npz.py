"""Data from a file: ``dataset = "npz:..."``: layouts, caching, and every refusal before any worker starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.config.experiment import parse_experiment
from harness.data import DataRequest, prepare
from harness.errors import ConfigError, DataError


def write_npz(path: Path, n_train: int = 12, n_test: int = 4, shape: tuple[int, ...] = (3, 6, 6),
              n_classes: int = 3, **override: object) -> Path:
    """A small valid data file (labels cover every class), with arrays replaced or dropped by ``override``."""
    rng = np.random.default_rng(3)
    arrays: dict[str, object] = {
        "x_train": rng.integers(0, 256, (n_train, *shape)).astype(np.uint8),
        "y_train": np.arange(n_train) % n_classes,
        "x_test": rng.integers(0, 256, (n_test, *shape)).astype(np.uint8),
        "y_test": np.arange(n_test) % n_classes,
    }
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_nchw_file_is_prepared_normalised_with_its_classes(tmp_path: Path) -> None:
    f = write_npz(tmp_path / "d.npz", n_classes=5, n_train=10)
    data = prepare(DataRequest(f"npz:{f}"), tmp_path / "cache")
    assert (data.input_shape, data.classes, data.n_train, data.n_test) == ((3, 6, 6), 5, 10, 4)
    x_train, y_train, _, y_test = data.load()
    assert x_train.dtype == np.float32 and abs(float(np.mean(x_train))) < 1e-5
    assert y_train.tolist() == [0, 1, 2, 3, 4] * 2 and y_test.dtype == np.int64


def test_nhwc_is_detected_and_gives_the_same_images_as_nchw(tmp_path: Path) -> None:
    nchw = write_npz(tmp_path / "a.npz")
    with np.load(nchw) as f:
        raw = {k: f[k] for k in f.files}
    nhwc = write_npz(tmp_path / "b.npz", x_train=raw["x_train"].transpose(0, 2, 3, 1),
                     x_test=raw["x_test"].transpose(0, 2, 3, 1))
    a = prepare(DataRequest(f"npz:{nchw}"), tmp_path / "cache")
    b = prepare(DataRequest(f"npz:{nhwc}"), tmp_path / "cache")
    assert a.input_shape == b.input_shape == (3, 6, 6)
    np.testing.assert_array_equal(a.load()[0], b.load()[0])


def test_grey_images_without_a_channel_axis_get_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    f = write_npz(tmp_path / "g.npz", x_train=rng.random((12, 5, 7)), x_test=rng.random((4, 5, 7)))
    assert prepare(DataRequest(f"npz:{f}"), tmp_path / "cache").input_shape == (1, 5, 7)


def test_an_ambiguous_layout_is_refused_until_declared(tmp_path: Path) -> None:
    f = write_npz(tmp_path / "amb.npz", shape=(3, 6, 3))  # axes 1 and 3 both look like channels
    with pytest.raises(DataError, match="data_layout"):
        prepare(DataRequest(f"npz:{f}"), tmp_path / "cache")
    assert prepare(DataRequest(f"npz:{f}", layout="nhwc"), tmp_path / "cache").input_shape == (3, 3, 6)
    assert prepare(DataRequest(f"npz:{f}", layout="nchw"), tmp_path / "cache").input_shape == (3, 6, 3)


def test_cached_by_content_an_edited_file_is_prepared_again(tmp_path: Path) -> None:
    f = write_npz(tmp_path / "d.npz", n_classes=3)
    first = prepare(DataRequest(f"npz:{f}"), tmp_path / "cache")
    again = prepare(DataRequest(f"npz:{f}"), tmp_path / "cache")
    assert again.directory == first.directory and again.key == first.key
    write_npz(f, n_classes=4)
    edited = prepare(DataRequest(f"npz:{f}"), tmp_path / "cache")
    assert edited.directory != first.directory and edited.classes == 4


@pytest.mark.parametrize(("override", "message"), [
    ({"y_test": None}, "lacks y_test"),
    ({"y_train": np.arange(11) % 3}, "x_train has 12 images but y_train has 11 labels"),
    ({"y_train": (np.arange(12) % 3).astype(np.float32)}, "dtype float32; labels must be integers"),
    ({"y_train": np.arange(12) % 3 - 1}, "label -1"),
    ({"y_test": np.array([0, 1, 2, 7])}, "label 7, out of range for 3 classes"),
    ({"classes": np.int64(2)}, "label 2, out of range for 2 classes"),
    ({"x_train": np.array(["a"] * 12)}, "images must be numbers"),
    ({"x_train": np.zeros((12, 36))}, "images must be (N, C, H, W)"),
    ({"x_test": np.zeros((4, 3, 5, 5))}, "both splits must have one image shape"),
    ({"x_train": np.full((12, 3, 6, 6), np.nan)}, "NaN"),
    # finite in the file, not once prepared: float64 beyond float32's range, and float32 whose spread overflows
    ({"x_test": np.full((4, 3, 6, 6), 1e300)}, "x_test holds 432 value(s) that are not finite once prepared"),
    ({"x_train": np.where(np.arange(12 * 3 * 36).reshape(12, 3, 6, 6) % 2, 3e38, -3e38).astype(np.float32)},
     "x_train holds"),
    ({"y_train": np.zeros(12, dtype=np.int64)}, "at least two classes"),
])
def test_bad_files_are_refused_with_the_problem_named(tmp_path: Path, override: dict, message: str) -> None:
    f = write_npz(tmp_path / "bad.npz", **override)
    with pytest.raises(DataError) as info:
        prepare(DataRequest(f"npz:{f}"), tmp_path / "cache")
    assert message in str(info.value) and str(f) in str(info.value)
    assert not (tmp_path / "cache" / "prepared").exists() or not any((tmp_path / "cache" / "prepared").iterdir())


def test_not_an_npz_and_object_arrays_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="cannot be read as a .npz"):
        prepare(DataRequest(f"npz:{junk}"), tmp_path / "cache")
    objects = write_npz(tmp_path / "obj.npz", y_train=np.array([[1], "a"] * 6, dtype=object))
    with pytest.raises(DataError, match="cannot be read as a .npz"):
        prepare(DataRequest(f"npz:{objects}"), tmp_path / "cache")


def test_experiment_refuses_a_missing_file_and_a_bad_layout(tmp_path: Path) -> None:
    base = {"name": "e", "frameworks": ["pytorch"], "batch_sizes": [2]}
    with pytest.raises(ConfigError, match=r"dataset: .*missing\.npz is not a file"):
        parse_experiment(base | {"dataset": f"npz:{tmp_path / 'missing.npz'}"})
    f = write_npz(tmp_path / "d.npz")
    with pytest.raises(ConfigError, match="data_layout: 'hwc' is not one of auto, nchw, nhwc"):
        parse_experiment(base | {"dataset": f"npz:{f}", "data_layout": "hwc"})
    assert parse_experiment(base | {"dataset": f"npz:{f}", "data_layout": "nchw"}).data_layout == "nchw"


def test_run_and_maxbatch_with_a_bad_file_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path / "cache"))
    f = write_npz(tmp_path / "bad.npz", y_train=np.arange(12) % 3 - 1)
    toml = tmp_path / "e.toml"
    toml.write_text(f'name = "e"\nframeworks = ["pytorch"]\nbatch_sizes = [2]\ndataset = "npz:{f}"\n')
    out = tmp_path / "out"
    assert main(["run", str(toml), "--out", str(out)]) == 2
    assert main(["maxbatch", "--framework", "pytorch", "--model", "tiny_cnn", "--dataset", f"npz:{f}",
                 "--device", "cpu", "--memory-limit-mib", "2000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("label -1") == 2 and "Traceback" not in err
    assert not out.exists()
    overflow = write_npz(tmp_path / "huge.npz", x_train=np.full((12, 3, 6, 6), 1e300))  # finite, until float32
    toml.write_text(f'name = "e"\nframeworks = ["pytorch"]\nbatch_sizes = [2]\ndataset = "npz:{overflow}"\n')
    assert main(["run", str(toml), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{overflow}: x_train holds" in err and "overflow float32" in err and "Traceback" not in err
    assert not out.exists()
