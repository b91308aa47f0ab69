"""Issue 24 (``npz:`` data) and the same family for every data source: each malformed file is refused with
exit 2, a message naming the file and the problem, nothing written (no output directory, nothing left in
the cache); a damaged prepared copy in the cache is prepared again instead of failing every trial.

Everything runs as a user would (``batchscope run`` in a process of its own, the fake adapter) under the
launcher's 1.5 GiB RLIMIT_DATA, so a file that declares terabytes fails an allocation, never the machine.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.faults.helpers import assert_refused, bs, cli, fake_experiment, rows

RLIMIT_MIB = 1536


def _arrays(n_train: int = 40, n_test: int = 8, shape: tuple[int, ...] = (1, 8, 8)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {"x_train": rng.random((n_train, *shape), dtype=np.float32), "y_train": np.arange(n_train) % 3,
            "x_test": rng.random((n_test, *shape), dtype=np.float32), "y_test": np.arange(n_test) % 3}


def _savez(path: Path, **override: object) -> Path:
    np.savez(path, **(_arrays() | override))  # type: ignore[arg-type]
    return path


def _npy_member(array_header: dict[str, object], body: bytes = b"") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, array_header)
    return buf.getvalue() + body


def _with_x_train(path: Path, member: bytes, compress: bool = False) -> Path:
    """A zip whose x_train.npy is ``member`` (raw bytes) and whose other arrays are good."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        for key, value in _arrays().items():
            if key == "x_train":
                z.writestr("x_train.npy", member)
            else:
                buf = io.BytesIO()
                np.lib.format.write_array(buf, value)
                z.writestr(f"{key}.npy", buf.getvalue())
    return path


# ---------------------------------------------------------------- malformed npz files
def _npy_file(d: Path) -> Path:
    np.save(d / "data.npy", _arrays()["x_train"])
    return d / "data.npy"


def _npy_named_npz(d: Path) -> Path:
    with open(d / "data.npz", "wb") as f:
        np.save(f, _arrays()["x_train"])
    return d / "data.npz"


def _zip_of_raw_bytes(d: Path) -> Path:
    """Members named x_train, y_train... holding raw bytes, not .npy arrays."""
    with zipfile.ZipFile(d / "data.npz", "w") as z:
        for key, value in _arrays().items():
            z.writestr(key, value.tobytes())
    return d / "data.npz"


def _scalar_images(d: Path) -> Path:
    return _savez(d / "data.npz", x_train=np.float32(3.0), x_test=np.float32(2.0))


def _zero_channels(d: Path) -> Path:
    return _savez(d / "data.npz", x_train=np.zeros((40, 0, 8, 8), np.float32),
                  x_test=np.zeros((8, 0, 8, 8), np.float32))


def _zero_height(d: Path) -> Path:
    return _savez(d / "data.npz", x_train=np.zeros((40, 1, 0, 8), np.float32),
                  x_test=np.zeros((8, 1, 0, 8), np.float32))


def _terabyte_header(d: Path) -> Path:
    """x_train.npy's header declares 10^7 images of 3x1000x1000 floats (109 TiB) over 100 bytes of data."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (10**7, 3, 1000, 1000)}
    return _with_x_train(d / "data.npz", _npy_member(header, b"\0" * 100))


def _compressed_bomb(d: Path) -> Path:
    """x_train.npy really holds 2 GiB of zeros, deflated to 8 MiB: its header tells the truth. (zlib's fastest
    level: the default spends 10 s of a core on it, level 1 under 5.)"""
    shape = (2**15, 1, 128, 128)  # 2^29 floats: 2 GiB
    path = d / "data.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("x_train.npy", "w", force_zip64=True) as member:
            member.write(_npy_member({"descr": "<f4", "fortran_order": False, "shape": shape}))
            chunk = b"\0" * 2**24
            for _ in range(2**31 // len(chunk)):
                member.write(chunk)
        for key, value in _arrays().items():
            if key != "x_train":
                buf = io.BytesIO()
                np.lib.format.write_array(buf, value)
                z.writestr(f"{key}.npy", buf.getvalue())
    return path


def _overflows_when_normalised(d: Path) -> Path:
    """float32 values near its largest: their mean overflows to inf, so normalised images are NaN."""
    return _savez(d / "data.npz", x_train=np.full((40, 1, 8, 8), 3e38, np.float32))


def _beyond_float32(d: Path) -> Path:
    """float64 values that float32 cannot hold (inf once converted)."""
    return _savez(d / "data.npz", x_train=np.full((40, 1, 8, 8), 1e300))


def _label_is_an_id(d: Path) -> Path:
    """Labels that are IDs, not classes: the class count would be 4e11, and so would the last layer's width."""
    return _savez(d / "data.npz", y_train=np.arange(40) * 10**10)


def _unreadable(d: Path) -> Path:
    path = _savez(d / "data.npz")
    path.chmod(0)
    return path


def _truncated_zip(d: Path) -> Path:
    path = _savez(d / "data.npz")
    path.write_bytes(path.read_bytes()[:700])
    return path


def _empty(d: Path) -> Path:
    (d / "data.npz").write_bytes(b"")
    return d / "data.npz"


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "data.npz")
    return d / "data.npz"


NPZ_CASES: dict[str, tuple[Callable[[Path], Path], tuple[str, ...]]] = {
    "npy-file": (_npy_file, ("one .npy array",)),
    "npy-named-npz": (_npy_named_npz, ("one .npy array",)),
    "zip-of-raw-bytes": (_zip_of_raw_bytes, ("x_train", "not a .npy array")),
    "scalar-images": (_scalar_images, ("x_train", "shape ()")),
    "zero-channels": (_zero_channels, ("x_train", "an axis of size 0")),
    "zero-height": (_zero_height, ("x_train", "an axis of size 0")),
    "terabyte-header": (_terabyte_header, ("x_train", "declares", "holds")),
    "compressed-2-GiB": (_compressed_bomb, ("x_train", "GiB of memory")),
    "overflows-when-normalised": (_overflows_when_normalised, ("x_train", "not finite")),
    "beyond-float32": (_beyond_float32, ("x_train", "float32")),
    "label-is-an-id": (_label_is_an_id, ("y_train", "classes")),
    "unreadable": (_unreadable, ("cannot be read",)),
    "truncated-zip": (_truncated_zip, ("cannot be read",)),
    "empty-file": (_empty, ("cannot be read",)),
    "fifo": (_fifo, ("not a file",)),
}


def _nothing_left(tmp_path: Path) -> None:
    assert not (tmp_path / "out").exists()
    prepared = tmp_path / "cache" / "prepared"
    assert not prepared.exists() or not any(prepared.iterdir()), list(prepared.iterdir())


@pytest.mark.process
@pytest.mark.parametrize("case", sorted(NPZ_CASES))
def test_a_malformed_npz_is_refused_naming_the_problem(tmp_path: Path, case: str) -> None:
    build, words = NPZ_CASES[case]
    src = tmp_path / "src"
    src.mkdir()
    path = build(src)
    exp = fake_experiment(tmp_path, dataset=f"npz:{path}", data_layout="nchw")
    try:
        done = bs(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), as_user=True, timeout=120,
                  rlimit_data_mib=RLIMIT_MIB)
    finally:
        if path.exists() and not path.is_fifo():
            path.chmod(0o644)
    assert_refused(done, str(path), *words)
    _nothing_left(tmp_path)


# ---------------------------------------------------------------- cifar10 --data-dir
@pytest.mark.process
def test_a_cifar_batch_file_far_too_large_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """An extracted folder whose batch is 4 GiB (sparse): read whole, it would exhaust the parent's memory."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        with open(folder / name, "wb") as f:
            f.truncate(4 * 2**30)
    exp = fake_experiment(tmp_path, dataset="cifar10")
    done = bs(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), "--data-dir", str(folder),
              rlimit_data_mib=RLIMIT_MIB)
    assert_refused(done, "data_batch_1", "GiB", "not a CIFAR-10 batch")
    _nothing_left(tmp_path)


def test_an_unreadable_cifar_batch_is_refused_as_data(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        (folder / name).write_bytes(b"x")
    (folder / "data_batch_1").chmod(0)
    exp = fake_experiment(tmp_path, dataset="cifar10")
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), "--data-dir", str(folder), as_user=True)
    assert_refused(done, "data_batch_1", "cannot be read")
    _nothing_left(tmp_path)


# ---------------------------------------------------------------- the prepared copy in the cache
def _prepared_dir(tmp_path: Path) -> Path:
    (found,) = [p for p in (tmp_path / "cache" / "prepared").iterdir() if p.name.startswith("npz-")]
    return found


def _garbage_meta(d: Path) -> None:
    (d / "meta.json").write_text("{not json")


def _no_meta(d: Path) -> None:
    (d / "meta.json").unlink()


def _truncated_array(d: Path) -> None:
    data = (d / "x_train.npy").read_bytes()
    (d / "x_train.npy").write_bytes(data[: len(data) // 2])


def _meta_lies_about_shape(d: Path) -> None:
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps(meta | {"n_train": meta["n_train"] * 10}))


def _truncated_order(d: Path) -> None:
    (order,) = d.glob("order-*.npy")
    order.write_bytes(order.read_bytes()[:90])


def _array_is_a_directory(d: Path) -> None:
    (d / "y_test.npy").unlink()
    (d / "y_test.npy").mkdir()


CACHE_DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage-meta": _garbage_meta, "no-meta": _no_meta, "truncated-array": _truncated_array,
    "meta-lies-about-shape": _meta_lies_about_shape, "truncated-order": _truncated_order,
    "array-is-a-directory": _array_is_a_directory,
}


@pytest.mark.process
@pytest.mark.parametrize("damage", sorted(CACHE_DAMAGE))
def test_a_damaged_prepared_copy_is_prepared_again(tmp_path: Path, damage: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    exp = fake_experiment(tmp_path, dataset=f"npz:{_savez(src / 'data.npz')}")
    first = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "first"))
    assert first.returncode == 0, first.stderr
    CACHE_DAMAGE[damage](_prepared_dir(tmp_path))
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert [r["status"] for r in rows(tmp_path / "out")] == ["ok"], rows(tmp_path / "out")
    assert "damaged" in done.stderr and "again" in done.stderr, done.stderr
    # the same bytes as before: the data key of the trial is unchanged
    assert rows(tmp_path / "out")[0]["trial_hash"] == rows(tmp_path / "first")[0]["trial_hash"]


def test_a_read_only_cache_is_refused_naming_it_and_the_variable(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        exp = fake_experiment(tmp_path)
        done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"), as_user=True)
    finally:
        cache.chmod(0o755)
    assert_refused(done, str(cache), "BATCHSCOPE_CACHE")
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_a_preparation_killed_outright_leaves_nothing_the_next_run_keeps(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the next preparation removes what a dead one left (its PID is in the name)."""
    exp = fake_experiment(tmp_path)
    first = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "first"))
    assert first.returncode == 0, first.stderr
    prepared = tmp_path / "cache" / "prepared"
    (data_dir,) = prepared.iterdir()
    dead = 2**22 + 12345  # above the default pid_max: no such process
    stale = prepared / f".{data_dir.name}.tmp-{dead}-abc"  # a data set being prepared
    stale.mkdir()
    (stale / "x_train.npy").write_bytes(b"\0" * 2**20)
    stale_order = data_dir / f"order-seed7-epochs1.npy.tmp-{dead}-abc"  # a shuffle order being written
    stale_order.write_bytes(b"\0" * 2**20)
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and not stale_order.exists()


@pytest.mark.process
def test_stale_files_of_a_live_preparation_are_left_alone(tmp_path: Path) -> None:
    """The clean-up must not remove what another batchscope (alive) is preparing right now."""
    exp = fake_experiment(tmp_path)
    prepared = tmp_path / "cache" / "prepared"
    prepared.mkdir(parents=True)
    live = prepared / f".other-set.tmp-{os.getpid()}-abc"
    live.mkdir()
    done = cli(tmp_path, "run", str(exp), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert live.exists()
    shutil.rmtree(live)
