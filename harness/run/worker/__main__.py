"""Entry point of ``python -m harness.run.worker``: one trial, then exit.

The order matters: the worker ties its life to its parent's before anything else, reads its request, puts
the trial's memory budget on itself, and only then runs the trial (which imports the framework).
"""

from __future__ import annotations

import argparse
import os
import sys

from harness.errors import WorkerProtocolError
from harness.run.protocol import Channel, End, Failure, WorkerRequest
from harness.run.worker.lifeline import die_with_parent, limit_memory
from harness.run.worker.trial import run_trial

#: the exit code of a worker whose request it cannot read (another protocol version, not a request)
BAD_REQUEST_EXIT_CODE = 2


def main(argv: list[str] | None = None) -> int:
    """Run the trial of the request on stdin, answering on ``--fd``; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness.run.worker")
    parser.add_argument("--fd", type=int, required=True, help="file descriptor for protocol messages")
    args = parser.parse_args(argv)
    parent = os.environ.get("BATCHSCOPE_PARENT_PID", "")
    die_with_parent(int(parent) if parent.isdigit() else None)
    chan = Channel(args.fd)
    try:
        try:
            request = WorkerRequest.from_json(sys.stdin.read())
        except WorkerProtocolError as e:  # the parent reads this failure as what it is (or as a version mismatch)
            chan.send(Failure(oom=False, error_type=f"{type(e).__module__}.{type(e).__qualname__}",
                              message=str(e), traceback="", phase="setup"))
            return BAD_REQUEST_EXIT_CODE
        limit_memory(request.os_memory_limit_mib)
        code = run_trial(request, chan)
        chan.send(End())
    finally:
        chan.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
