"""Data sets: CIFAR-10 (offline, with small fake archives), the embedded sets, and every refusal."""

from __future__ import annotations

import hashlib
import os
import pickle
import tarfile
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from harness import data as data_mod
from harness.cli import main
from harness.data import DATASETS, DataRequest, cifar10, embedded, prepare
from harness.errors import DataError
from harness.store import Store
from tests import ROOT

N_PER_BATCH = 6


def _batch_bytes(images: np.ndarray, labels: list[int]) -> bytes:
    """A batch in the real layout: a protocol-2 pickle of a dict with bytes keys."""
    return pickle.dumps({b"batch_label": b"fake", b"labels": labels, b"data": images,
                         b"filenames": [b"f%d.png" % i for i in range(len(labels))]}, protocol=2)


def make_fake_cifar(root: Path, n: int = N_PER_BATCH) -> tuple[Path, Path, cifar10.Checksums, np.ndarray]:
    """(archive, extracted folder, their checksums, training images NCHW) of a tiny CIFAR-10 look-alike."""
    rng = np.random.default_rng(7)
    folder = root / cifar10.FOLDER
    folder.mkdir(parents=True)
    md5 = {}
    train = []
    for name in (*cifar10.TRAIN_BATCHES, cifar10.TEST_BATCH):
        images = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        raw = _batch_bytes(images, [int(v) for v in rng.integers(0, 10, n)])
        (folder / name).write_bytes(raw)
        md5[name] = hashlib.md5(raw).hexdigest()
        if name != cifar10.TEST_BATCH:
            train.append(images.reshape(-1, 3, 32, 32))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"x"] * 10}, protocol=2))
    archive = root / cifar10.ARCHIVE
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=cifar10.FOLDER)
    checks = cifar10.Checksums(archive_sha256=cifar10.sha256_of(archive),
                               archive_bytes=archive.stat().st_size,
                               batch_md5=md5)
    return archive, folder, checks, np.concatenate(train)


def _nothing_prepared(cache: Path) -> bool:
    prepared = cache / "prepared"
    return not prepared.exists() or not any(prepared.iterdir())


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, cifar10.Checksums, np.ndarray]:
    made = make_fake_cifar(tmp_path / "src")
    monkeypatch.setattr(cifar10, "CANONICAL", made[2])  # the fake's checksums play the published ones

    def no_network(url: str, dest: Path) -> None:
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(cifar10, "download", no_network)
    return made


def test_canonical_checksums_are_the_published_ones() -> None:
    published = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
    assert cifar10.CANONICAL.archive_sha256 == published
    assert cifar10.CANONICAL.archive_bytes == 170_498_071
    assert set(cifar10.CANONICAL.batch_md5) == {*cifar10.TRAIN_BATCHES, cifar10.TEST_BATCH}
    assert cifar10.URL == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"


@pytest.mark.parametrize("which", ["archive", "folder", "dir_with_archive", "dir_with_folder"])
def test_cifar_read_from_local_copy(fake: tuple, tmp_path: Path, which: str) -> None:
    archive, folder, _, train = fake
    data_dir = {"archive": archive, "folder": folder, "dir_with_archive": archive.parent,
                "dir_with_folder": folder.parent}[which]
    if which == "dir_with_archive":
        os.rename(folder, tmp_path / "moved")  # only the archive is left there
    prepared = prepare(DataRequest("cifar10", data_dir=str(data_dir)), tmp_path / "cache")
    x, y, xt, yt = prepared.load()
    assert (prepared.n_train, prepared.n_test) == (5 * N_PER_BATCH, N_PER_BATCH)
    assert prepared.input_shape == (3, 32, 32)
    assert x.dtype == np.float32 and y.dtype == np.int64 and y.max() <= 9
    # the normalised images are the fake's pixels, in batch order: undo the per-channel normalisation
    raw = train.astype(np.float64)
    mean, std = raw.mean(axis=(0, 2, 3), keepdims=True), raw.std(axis=(0, 2, 3), keepdims=True)
    expected = (raw - mean) / (std + 1e-7)
    np.testing.assert_allclose(x, expected, rtol=1e-4, atol=1e-4)
    assert prepared.accuracy_meaningful


def test_cifar_download_lands_verified_in_cache(fake: tuple, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    archive = fake[0]
    calls = []

    def fetch(url: str, dest: Path) -> None:
        calls.append(url)
        dest.write_bytes(archive.read_bytes())

    monkeypatch.setattr(cifar10, "download", fetch)
    cache = tmp_path / "cache"
    prepared = prepare(DataRequest("cifar10"), cache)
    assert calls == [cifar10.URL] and prepared.n_train == 5 * N_PER_BATCH
    assert sorted(p.name for p in (cache / "downloads").iterdir()) == [cifar10.ARCHIVE]
    # later: the cached archive is used (and checked again), no second download
    assert cifar10.fetch_archive(cache) == cache / "downloads" / cifar10.ARCHIVE and len(calls) == 1


@pytest.mark.parametrize("damage", ["flipped_byte", "truncated"])
def test_cifar_download_with_bad_checksum_never_lands(fake: tuple, tmp_path: Path, damage: str) -> None:
    good = fake[0].read_bytes()

    def fetch(url: str, dest: Path) -> None:
        if damage == "truncated":
            dest.write_bytes(good[: len(good) // 2])
        else:
            dest.write_bytes(good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])

    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="SHA-256|truncated") as err:
        cifar10.fetch_archive(cache, fetch=fetch)
    assert "delete it and download it again" in str(err.value)
    assert list((cache / "downloads").iterdir()) == []  # neither the final name nor a .part file


def test_cifar_download_interrupted_leaves_nothing(fake: tuple, tmp_path: Path) -> None:
    def fetch(url: str, dest: Path) -> None:
        dest.write_bytes(b"half an archive")
        raise ConnectionResetError("connection reset by peer")

    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="download of .* failed"):
        cifar10.fetch_archive(cache, fetch=fetch)
    assert list((cache / "downloads").iterdir()) == []


def test_cifar_no_network_no_copy_names_every_remedy(fake: tuple, tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        prepare(DataRequest("cifar10"), tmp_path / "cache")
    msg = str(err.value)
    for needed in ("network", cifar10.URL, "--data-dir", cifar10.ARCHIVE, "mnist5k", "digits", "synthetic"):
        assert needed in msg
    assert _nothing_prepared(tmp_path / "cache")


def test_cifar_local_archive_truncated_or_corrupt_is_refused(fake: tuple, tmp_path: Path) -> None:
    archive, _, checks, _ = fake
    bad = tmp_path / "bad" / cifar10.ARCHIVE
    bad.parent.mkdir()
    bad.write_bytes(archive.read_bytes()[:-500])
    with pytest.raises(DataError, match="truncated"):
        prepare(DataRequest("cifar10", data_dir=str(bad)), tmp_path / "cache")
    # past the checksum (as if the checksums matched the damaged file), the reader still refuses it
    with pytest.raises(DataError, match="corrupt or truncated"):
        cifar10.read_batches(bad, checks)
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(DataError, match="cannot be read as a .tar.gz"):
        cifar10.read_batches(garbage, checks)
    assert _nothing_prepared(tmp_path / "cache")


def test_cifar_archive_missing_a_batch_is_refused(fake: tuple, tmp_path: Path) -> None:
    _, folder, checks, _ = fake
    partial = tmp_path / "partial.tar.gz"
    with tarfile.open(partial, "w:gz") as tar:
        for name in cifar10.TRAIN_BATCHES[:3]:
            tar.add(folder / name, arcname=f"{cifar10.FOLDER}/{name}")
    with pytest.raises(DataError, match="lacks cifar-10-batches-py/data_batch_4"):
        cifar10.read_batches(partial, checks)


def test_cifar_folder_damage_is_refused(fake: tuple) -> None:
    _, folder, checks, _ = fake
    raw = (folder / "data_batch_2").read_bytes()
    (folder / "data_batch_2").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="data_batch_2 fails the MD5 check"):
        cifar10.read_batches(folder, checks)
    no_md5 = cifar10.Checksums(checks.archive_sha256, checks.archive_bytes, {})
    # a truncated pickle with no MD5 to catch it: the unpickler does
    with pytest.raises(DataError, match="data_batch_2 cannot be read"):
        cifar10.read_batches(folder, no_md5)
    (folder / "data_batch_2").write_bytes(_batch_bytes(np.zeros((4, 3071), np.uint8), [0, 1, 2, 3]))
    with pytest.raises(DataError, match="expected uint8 rows of 3072"):
        cifar10.read_batches(folder, no_md5)
    (folder / "data_batch_2").write_bytes(_batch_bytes(np.zeros((4, 3072), np.uint8), [0, 1, 2]))
    with pytest.raises(DataError, match="3 labels for 4 images"):
        cifar10.read_batches(folder, no_md5)
    (folder / "data_batch_2").unlink()
    with pytest.raises(DataError, match="lacks data_batch_2"):
        cifar10.read_batches(folder, no_md5)


def test_cifar_batch_that_would_run_code_is_refused(fake: tuple, tmp_path: Path) -> None:
    _, folder, checks, _ = fake

    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    (folder / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    with pytest.raises(DataError, match="may not refer to"):
        cifar10.read_batches(folder, cifar10.Checksums(checks.archive_sha256, checks.archive_bytes, {}))
    assert not (tmp_path / "pwned").exists()


def test_data_dir_that_holds_nothing_useful(fake: tuple, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        prepare(DataRequest("cifar10", data_dir=str(tmp_path / "nope")), tmp_path / "cache")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds neither"):
        prepare(DataRequest("cifar10", data_dir=str(tmp_path / "empty")), tmp_path / "cache")


def test_cli_cifar_offline_exits_2_and_writes_nothing(fake: tuple, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    root = ROOT
    toml = root / "experiments" / "osu2020.toml"
    code = main(["run", str(toml), "--frameworks", "pytorch", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("batchscope: error: cifar10:") and "--data-dir" in err and "mnist5k" in err
    assert not out.exists()


def test_embedded_sets_are_real_fixed_and_stratified(tmp_path: Path) -> None:
    mnist = prepare(DataRequest("mnist5k"), tmp_path)
    assert (mnist.n_train, mnist.n_test, mnist.input_shape, mnist.classes) == (4000, 1000, (1, 28, 28), 10)
    _, y, _, yt = mnist.load()
    assert np.bincount(y).tolist() == [400] * 10 and np.bincount(yt).tolist() == [100] * 10
    digits = prepare(DataRequest("digits"), tmp_path)
    assert (digits.n_train, digits.n_test, digits.input_shape) == (1438, 359, (1, 8, 8))
    assert DATASETS["mnist5k"].accuracy_meaningful and DATASETS["digits"].offline
    assert not DATASETS["synthetic"].accuracy_meaningful and not DATASETS["cifar10"].offline
    # the split is fixed (not the experiment's seed) and disjoint
    y_all = np.repeat(np.arange(10), 50)
    a_train, a_test = embedded.stratified_split(y_all)
    b_train, b_test = embedded.stratified_split(y_all)
    assert np.array_equal(a_test, b_test) and not set(a_train) & set(a_test)
    assert len(a_train) + len(a_test) == 500
    # the same request a second time is read back from the cache, identical
    assert prepare(DataRequest("mnist5k", seed=3), tmp_path).key == mnist.key


def test_data_dir_for_an_embedded_set_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="drop --data-dir"):
        prepare(DataRequest("digits", data_dir=str(tmp_path)), tmp_path)


def test_train_samples_prefix_and_too_many(tmp_path: Path) -> None:
    small = prepare(DataRequest("digits", train_samples=500), tmp_path)
    assert small.n_train == 500 and small.n_test == 359
    assert min(np.bincount(small.load()[1])) > 30  # the shuffled split keeps a prefix balanced
    with pytest.raises(DataError, match="has only 1438 training samples"):
        prepare(DataRequest("digits", train_samples=5000), tmp_path)


def test_registry_matches_spec_validation() -> None:
    assert set(data_mod.LOADERS) == {"synthetic", "mnist5k", "digits", "cifar10"} == set(DATASETS)


@pytest.mark.slow
def test_osu2020_runs_end_to_end_from_a_local_archive(fake: tuple, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The replay file itself, on the (fake) archive given with --data-dir, then `compare` on its store."""
    monkeypatch.setenv("BATCHSCOPE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    toml = ROOT / "experiments" / "osu2020.toml"
    assert main(["run", str(toml), "--frameworks", "pytorch", "--batch-sizes", "4,8", "--epochs", "1",
                 "--device", "cpu", "--data-dir", str(fake[0]), "--out", str(out)]) == 0
    assert main(["compare", str(out)]) == 0
    text = capsys.readouterr().out
    assert "data set cifar10" in text and "No GPU was measured" in text
    with Store.open(out, create=False) as store:
        rows = store.trials()
    assert [(r["status"], r["dataset"], r["epochs_done"]) for r in rows] == [("ok", "cifar10", 1.0)] * 2
    assert all(r["train_steps_n"] == -(-5 * N_PER_BATCH // r["batch_size"]) for r in rows)
