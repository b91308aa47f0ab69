"""How much a lock downloads: each pin's wheel size, recorded beside the lock (``<kind>.sizes.json``).

A CUDA environment is several GB of wheels; before anything is fetched for one on a machine where NVML sees no GPU,
batchscope refuses and says how much it would have downloaded (:func:`harness.envs.guard.managed_kind`).
The figure comes from a table, not from the network at that moment: ``python -m harness.envs.sizes`` (run by
``make locks`` after the locks are resolved) asks the package index's JSON API (PEP 691, sizes per PEP 700: a few KB
per distribution, nothing downloaded) for the wheel each pin installs on Linux x86-64 and CPython of this version,
and writes the sizes beside the lock. A pin missing from the table (a lock regenerated without it) is counted as
unknown, and the estimate says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.envs.spec import requirement_lines, requirement_name


@dataclass(frozen=True)
class DownloadSize:
    """What installing a set of pins fetches: ``known_bytes`` over the pins the table has, ``unknown`` the others."""

    known_bytes: int
    pins: int
    unknown: tuple[str, ...]

    def text(self) -> str:
        """``about 5.4 GB (31 wheels)``, or ``at least ...`` with the pins whose size is not known."""
        gb = f"{self.known_bytes / 1e9:.1f} GB"
        if not self.unknown:
            return f"about {gb} ({self.pins} wheels)"
        return f"at least {gb} ({self.pins} wheels; no size recorded for {', '.join(self.unknown)})"


def sizes_file(lock: Path) -> Path:
    """The size table beside ``lock``: ``cuda.txt`` -> ``cuda.sizes.json``."""
    return lock.with_name(f"{lock.stem}.sizes.json")


def read_sizes(lock: Path) -> dict[str, int]:
    """``{"torch==2.14.1": bytes, ...}`` recorded for ``lock`` (``{}`` where there is no table)."""
    try:
        data = json.loads(sizes_file(lock).read_text())
    except (OSError, ValueError):
        return {}
    sizes = data.get("sizes") if isinstance(data, dict) else None
    return {str(k): int(v) for k, v in sizes.items()} if isinstance(sizes, dict) else {}


def _keys(requirements: tuple[str, ...]) -> list[str]:
    """``Typing_Extensions==4.16.0`` -> ``typing-extensions==4.16.0`` for each pin (extras, markers, hashes and lines
    that name no distribution left out)."""
    return [f"{name}=={version}" for r in requirements if (named := requirement_name(r)) for name, version in [named]]


def download_size(requirements: tuple[str, ...], lock: Path) -> DownloadSize:
    """What installing ``requirements`` (a lock's pins) downloads, from ``lock``'s size table."""
    table = read_sizes(lock)
    keys = _keys(requirements)
    return DownloadSize(sum(table.get(k, 0) for k in keys), len(keys), tuple(k for k in keys if k not in table))


def wheel_size(pin: str, python_version: str) -> int | None:
    """The size of the wheel ``pin`` installs here, from the index's JSON page (None: no fitting wheel listed): of the
    wheels :func:`harness.envs.locking.release_wheels` finds, one for this exact CPython first."""
    from harness.envs.locking import release_wheels  # make locks only: it reads wheel tags with packaging

    name, _, version = _keys((pin,))[0].partition("==")
    fitting = [f for f in release_wheels(name, version, python_version) if f.get("size") is not None]
    exact = [f for f in fitting if f"-cp{python_version.replace('.', '')}-" in f["filename"]]
    chosen = (exact or fitting)[:1]
    return int(chosen[0]["size"]) if chosen else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.envs.sizes", description=__doc__)
    parser.add_argument("kinds", nargs="*", default=["cuda"], help="which locks (default: cuda)")
    parser.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2] / "adapters"
    for lock in sorted(root.glob("*/locks/*.txt")):
        if lock.stem not in args.kinds:
            continue
        sizes, missing = {}, []
        for pin in requirement_lines(lock.read_text()):
            keys = _keys((pin,))
            if not keys:  # an option on a line of its own (a hash)
                continue
            key, size = keys[0], wheel_size(pin, args.python_version)
            if size is None:
                missing.append(key)
            else:
                sizes[key] = size
        sizes_file(lock).write_text(json.dumps({
            "about": f"the wheel each pin of {lock.name} installs on Linux x86-64, CPython {args.python_version}, "
                     f"as https://pypi.org/simple lists it (PEP 700 sizes), {datetime.date.today().isoformat()}: "
                     "python -m harness.envs.sizes", "sizes": sizes}, indent=1, sort_keys=True) + "\n")
        total = DownloadSize(sum(sizes.values()), len(sizes) + len(missing), tuple(missing))
        print(f"{sizes_file(lock).relative_to(root.parent)}: {total.text()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
