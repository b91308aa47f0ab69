"""Start ``batchscope`` in a process of its own, as a user would, with test-only adapters registered and
optionally under an OS memory limit or a largest file size (a full disk, without filling one). Run as
``python -m tests.faults.launch ARGS...``.

Environment: ``BATCHSCOPE_TEST_ADAPTERS`` = ``name=module:Class,...`` adds entry points (the fake adapter,
a broken plugin); ``BATCHSCOPE_TEST_RLIMIT_DATA_MIB`` caps this process's data segment (RLIMIT_DATA), so a
memory test can never grow the machine: past the cap an allocation fails instead.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import resource
import sys

ADAPTERS_ENV = "BATCHSCOPE_TEST_ADAPTERS"
RLIMIT_ENV = "BATCHSCOPE_TEST_RLIMIT_DATA_MIB"
#: a largest file size (KiB): writes past it fail with EFBIG, as on a full disk (SIGXFSZ is ignored)
FSIZE_ENV = "BATCHSCOPE_TEST_RLIMIT_FSIZE_KIB"


def main() -> int:
    limit = os.environ.get(RLIMIT_ENV)
    if limit:
        size = int(limit) * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (size, size))
    fsize = os.environ.get(FSIZE_ENV)
    if fsize:
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(fsize) * 1024, int(fsize) * 1024))
    from harness import registry

    extra = {}
    for item in filter(None, os.environ.get(ADAPTERS_ENV, "").split(",")):
        name, _, target = item.partition("=")
        extra[name] = md.EntryPoint(name=name, value=target, group=registry.GROUP)
    if extra:
        real = dict(registry._entry_points())
        registry._entry_points = lambda: {**real, **extra}  # type: ignore[assignment]
    from harness.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
