"""Where the test suite's time goes: each test's wall time and CPU time (its own and its subprocesses'), by kind.

``make test`` on a 2-core machine is CPU-bound (issue 30: /proc/stat read 99-100 % busy throughout), so a test's
cost is its CPU seconds, most of them in the framework processes it starts. As a pytest plugin this module records,
per test, the wall time and the CPU time of the pytest worker (``RUSAGE_SELF``) and of the processes it waited for
(``RUSAGE_CHILDREN``: a worker's CPU reaches it once the process is reaped, with its own children's), and its kind:
``alone`` / ``slow`` (starts a real framework) / ``fast``. Run as a script it sums what the plugin wrote.

Usage::

    BATCHSCOPE_SUITE_CPU=/tmp/suite-cpu .venv/bin/python -m pytest -n 2 --dist loadfile -p benchmarks.suite_cpu
    python benchmarks/suite_cpu.py /tmp/suite-cpu [--top 30]

CPU time of a process nobody waited for (a daemon, a worker killed and never reaped) is not counted, so the
figures are a floor. The totals are the point; one test's figure moves by 10-25 % from run to run here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.scheduling import kind_of

ENV = "BATCHSCOPE_SUITE_CPU"


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


_rows: list[dict[str, Any]] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Iterator[None]:
    t0, (self0, kids0) = time.monotonic(), _cpu()
    yield
    self1, kids1 = _cpu()
    _rows.append({"test": item.nodeid, "kind": kind_of(item.keywords), "wall_s": round(time.monotonic() - t0, 3),
                  "self_cpu_s": round(self1 - self0, 3), "children_cpu_s": round(kids1 - kids0, 3)})


def pytest_sessionfinish(session: Any) -> None:
    if not _rows:
        return
    out = Path(os.environ.get(ENV, "suite-cpu"))
    out.mkdir(parents=True, exist_ok=True)
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (out / f"{name}.json").write_text(json.dumps(_rows))


def summarise(directory: Path, top: int) -> str:
    rows = [r for f in sorted(directory.glob("*.json")) for r in json.loads(f.read_text())]
    if not rows:
        return f"no records in {directory}"
    cpu = lambda r: r["self_cpu_s"] + r["children_cpu_s"]  # noqa: E731
    lines = [f"{len(rows)} tests: wall {sum(r['wall_s'] for r in rows):.0f} s summed over the workers, "
             f"CPU {sum(map(cpu, rows)):.0f} s ({sum(r['children_cpu_s'] for r in rows):.0f} s in subprocesses)"]
    n, c, w = Counter(), Counter(), Counter()
    for r in rows:
        n[r["kind"]] += 1
        c[r["kind"]] += cpu(r)
        w[r["kind"]] += r["wall_s"]
    lines += [f"  {k:5s} {n[k]:5d} tests  CPU {c[k]:7.0f} s  wall {w[k]:7.0f} s" for k in ("alone", "slow", "fast")]
    by_module: Counter[str] = Counter()
    for r in rows:
        by_module[r["test"].split("::")[0]] += cpu(r)
    lines.append("modules by CPU seconds:")
    lines += [f"  {s:7.1f}  {m}" for m, s in by_module.most_common(top)]
    lines.append("tests by CPU seconds:")
    lines += [f"  {cpu(r):7.1f}  {r['kind']:5s}  {r['test']}" for r in sorted(rows, key=cpu, reverse=True)[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help=f"where the plugin wrote (${ENV})")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    print(summarise(args.directory, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
