"""The worker process's ties to what started it: it dies with its parent, and lives within its memory budget.

Both are set up by :func:`harness.run.worker.__main__.main` before the trial starts and before any framework is
imported: :func:`die_with_parent` first (so that no worker outlives a parent that was killed), then
:func:`limit_memory` as soon as the request is read.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time

#: how often the worker looks whether its parent is still there (seconds)
PARENT_CHECK_S = 0.2
#: the exit code of a worker that found its parent gone
ORPHAN_EXIT_CODE = 70


def die_with_parent(parent_pid: int | None, interval_s: float = PARENT_CHECK_S) -> None:
    """Exit (with this worker's whole process group) as soon as the parent that started us is gone.

    The parent kills our group on every way out it can catch; this covers the ones it cannot (SIGKILL,
    the kernel's OOM killer, a crash of the interpreter). When a parent dies its children are re-parented
    (to init or a subreaper), so ``getppid()`` changes: a daemon thread polls it. Not PR_SET_PDEATHSIG:
    that fires when the *thread* that forked us ends, which in a thread pool (Ray) is not the parent's end.
    A stopped worker (SIGSTOP) cannot run this thread: the parent starts it in a process group of its own in the
    parent's session, so when the parent dies the group is orphaned and the kernel sends it SIGHUP then SIGCONT
    (POSIX's rule for orphaned groups with a stopped member; harness/run/executor.py), and it dies.
    """
    if not parent_pid:
        return
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(ORPHAN_EXIT_CODE)

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid:
                try:  # stderr is a pipe the parent drained: with the parent gone, the write fails (EPIPE)
                    sys.stderr.write("batchscope worker: the parent process is gone; exiting\n")
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                try:
                    os.killpg(os.getpgid(0), signal.SIGKILL)  # our group: ourselves and anything we started
                finally:
                    os._exit(ORPHAN_EXIT_CODE)

    # a small stack: under a max-batch probe's RLIMIT_DATA the default 8 MiB thread stack would count
    old = threading.stack_size(256 * 1024)
    try:
        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    finally:
        threading.stack_size(old)


def limit_memory(limit_mib: float | None) -> None:
    """Put the trial's CPU memory budget on this process, before the framework is imported.

    RLIMIT_DATA, not RLIMIT_AS: since Linux 4.7 it counts private writable mappings (heap, anonymous
    mmap: what the frameworks allocate), not shared libraries or PROT_NONE reservations. Measured on
    deep_cnn 3x32x32 bs 256: RLIMIT_DATA fails below ~1050 MiB for a peak RSS of ~1060 MiB, while
    RLIMIT_AS needs ~1600 MiB for torch and ~2550 MiB for TensorFlow (see docs/maxbatch.md). The limit
    covers what the process already holds, so setting it here is the same budget as setting it at exec;
    doing it here (not in the parent's ``preexec_fn``) avoids running Python between fork and exec in a
    parent that has threads, which can deadlock (seen: probe workers that never started).
    """
    if limit_mib:
        limit = int(limit_mib * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
