"""``python -m harness.envs.locking``: each framework's lock files resolved anew from their ``.in`` files
(``make locks``), with the hashes of the files pip may install for each pin.

A lock is the exact set pip resolves for ``adapters/<framework>/locks/<kind>.in``: every distribution with ``==``,
numpy included, each followed by ``--hash=sha256:...`` lines (what pip-compile's ``--generate-hashes`` writes), so
the builder can install it with ``--require-hashes``: a changed or substituted wheel is refused. CPU locks are
resolved with this machine's pip configuration (which serves its CPU torch wheel); CUDA locks with none
(``--isolated``: PyPI alone) for Linux x86-64 wheels of this interpreter's version, since they are meant for a GPU
machine, not this one. Nothing is installed: pip's ``--dry-run --report`` is read. A pin's hashes are the file pip
chose here and every file of the same version on PyPI that CPython of that version on Linux x86-64 may take (another
manylinux tag, for an older glibc): read from PyPI's simple index (JSON, PEP 691), so no wheel is downloaded. A
version with a local label (this machine's torch 2.13.0+cpu, served by its pip configuration) is pinned with the label
and gets its own file's hash alone: PyPI's 2.13.0 is another build (CUDA's, which does not import without its CUDA
libraries). Pinned as ``==2.13.0`` with both hashes, pip took PyPI's even here (it prefers a file whose index gives a
matching hash to one whose hash it learns on download), and uv, which looks hashes up by the exact version it
resolved (2.13.0+cpu), found none.

The lock's current pins are kept where they still satisfy the ``.in`` file (passed to pip as constraints), as
pip-compile does; ``--upgrade`` resolves without them (newest versions).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.envs.spec import pin_of, requirement_lines

#: the manylinux tags a CUDA lock is resolved for: glibc 2.17 to 2.39 on x86-64 (PyPI's wheels use several)
LINUX_X86_64 = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(39, 16, -1)) + ("manylinux2014_x86_64",
                                                                                       "linux_x86_64")
#: where the other files of a pinned release are listed (the JSON form of the simple index, PEP 691)
PYPI_SIMPLE = "https://pypi.org/simple"
HTTP_TIMEOUT_S = 60


@dataclass(frozen=True)
class Pin:
    """One distribution of a lock: its normalised name, its version (a local label such as ``+cpu`` included) and
    the sha256 of the file pip chose for it."""

    name: str
    version: str
    sha256: str


def platform_flags(python_version: str) -> list[str]:
    """pip flags that resolve binary wheels for Linux x86-64 and CPython ``python_version`` (``3.11``)."""
    flags = ["--isolated", "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in LINUX_X86_64:
        flags += ["--platform", tag]
    return flags


def resolve(requirements: Path, kind: str, python_version: str, keep: tuple[str, ...] = ()) -> list[Pin]:
    """Every distribution pip would install for ``requirements``, with the hash of the file it chose.
    ``keep``: pins (``name==version``) to hold where they still fit (the lock's current ones)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "-r", str(requirements)]
        if keep:
            constraints = Path(tmp) / "keep.txt"
            constraints.write_text("\n".join(keep) + "\n")
            cmd += ["-c", str(constraints)]
        if kind == "cuda":
            cmd += [*platform_flags(python_version), "--target", str(Path(tmp) / "target")]
        subprocess.run(cmd, check=True)
        data = json.loads(report.read_text())
    pins = []
    for item in data["install"]:
        archive = item.get("download_info", {}).get("archive_info", {})
        sha256 = archive.get("hashes", {}).get("sha256") or archive.get("hash", "").partition("sha256=")[2]
        if not sha256:
            raise RuntimeError(f"pip reported no sha256 for {item['metadata']['name']} ({item['download_info']})")
        pins.append(Pin(item["metadata"]["name"].lower().replace("_", "-"), item["metadata"]["version"], sha256))
    return sorted(pins, key=lambda p: p.name)


def target_tags(python_version: str) -> set[str]:
    """Every wheel tag CPython ``python_version`` on Linux x86-64 (glibc 2.17 to 2.39) accepts, as text."""
    from packaging import tags  # the parent's dev tools hold packaging (pytest needs it); only `make locks` does

    version = tuple(int(part) for part in python_version.split("."))
    found = [*tags.cpython_tags(version, platforms=LINUX_X86_64),
             *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms=LINUX_X86_64)]
    return {str(tag) for tag in found}


def release_wheels(name: str, version: str, python_version: str, index: str = PYPI_SIMPLE) -> list[dict[str, Any]]:
    """The index's JSON entries (``filename``, ``hashes``, ``size``...) of every wheel of ``name`` ``version`` that
    CPython ``python_version`` on Linux x86-64 may install; empty where the index has none (a local version such as
    ``2.13.0+cpu``: PyPI has no local labels). Nothing is downloaded but the index's page."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            files = json.loads(response.read())["files"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise
    wanted, accepted = str(Version(version)), target_tags(python_version)
    out = []
    for entry in files:
        try:
            _, file_version, _, file_tags = parse_wheel_filename(entry["filename"])
        except InvalidWheelFilename:  # an sdist or an old format: the locks install wheels
            continue
        if str(file_version) == wanted and {str(t) for t in file_tags} & accepted:
            out.append(entry)
    return out


def release_hashes(name: str, version: str, python_version: str, index: str = PYPI_SIMPLE) -> set[str]:
    """sha256 of every wheel of ``name`` ``version`` that CPython ``python_version`` on Linux x86-64 may install
    (:func:`release_wheels`)."""
    return {e["hashes"]["sha256"] for e in release_wheels(name, version, python_version, index)
            if e.get("hashes", {}).get("sha256")}


def lock_text(framework: str, kind: str, source: Path, pins: list[Pin], hashes: dict[str, set[str]],
              python_version: str) -> str:
    """The lock file: a header saying what it is and how it was made, then ``name==version`` per distribution, each
    followed by its hashes (``--hash=sha256:...``, one a line, sorted)."""
    today = datetime.date.today().isoformat()
    header = [f"# batchscope lock: {framework}, {kind}. Exact versions resolved by pip for CPython {python_version} "
              f"on Linux x86-64 ({today}), with the sha256 of each file pip may install",
              f"# from {source.name}; regenerate with `make locks` (docs/environments.md). Installed with "
              "--require-hashes; the managed environment is named by a hash of these lines."]
    lines = []
    for pin in pins:
        digests = sorted(hashes[pin.name] | {pin.sha256})
        lines.append(" \\\n".join([f"{pin.name}=={pin.version}",
                                    *(f"    --hash=sha256:{d}" for d in digests)]))
    return "\n".join(header + lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.envs.locking", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("frameworks", nargs="*", help="the frameworks to lock (default: every built-in)")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--upgrade", action="store_true", help="resolve without the current pins (newest versions)")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2] / "adapters"
    for inputs in sorted(root.glob("*/locks/*.in")):
        framework, kind = inputs.parent.parent.name, inputs.stem
        if args.frameworks and framework not in args.frameworks:
            continue
        out = inputs.with_suffix(".txt")
        keep = () if args.upgrade or not out.exists() else tuple(
            "==".join(pin_of(line)) for line in requirement_lines(out.read_text()))
        try:
            pins = resolve(inputs, kind, args.python_version, keep)
        except subprocess.CalledProcessError:
            print(f"{inputs.relative_to(root.parent)}: pip could not resolve it"
                  f"{' with the current pins held (--upgrade resolves without them)' if keep else ''}",
                  file=sys.stderr)
            return 1
        hashes = {pin.name: release_hashes(pin.name, pin.version, args.python_version) for pin in pins}
        out.write_text(lock_text(framework, kind, inputs, pins, hashes, args.python_version))
        print(f"{out.relative_to(root.parent)}: {len(pins)} distributions, "
              f"{sum(len(h | {p.sha256}) for p, h in zip(pins, hashes.values(), strict=True))} hashes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
