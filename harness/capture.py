"""A child process's output, bounded: the head and the tail kept, how much was dropped between them said.

A worker (or a user's model code described in a child) writes what it likes to stdout and stderr: framework
logs, warnings, a traceback at the end. One that prints without end filled the disk (issue 24: a trial's log
grew to 2.3 GB in 5 seconds). So the child writes into a pipe, and a thread of the parent drains it: the first
``head_bytes`` go to the log file as they arrive (what a crash at start-up printed is on disk at once), the
last ``tail_bytes`` are kept in memory, and the rest is counted and dropped. :meth:`BoundedOutput.close`
writes a line saying how much was dropped, then the tail. The log is never larger than head + tail + a line.

A normal trial prints a few KiB: the thread reads them as they come and then sleeps in ``read``; its cost is
measured in docs/reliability.md ("Bounded worker logs").
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import IO

#: what a worker's log keeps: its first and last MiB (a traceback is at the end, a framework's set-up at the start)
HEAD_BYTES = 1 << 20
TAIL_BYTES = 1 << 20
_CHUNK = 1 << 16


class BoundedOutput:
    """Drains the read end ``fd`` of a pipe in a daemon thread, keeping its head and tail (see the module)."""

    def __init__(self, fd: int, sink: IO[bytes] | None = None, head_bytes: int = HEAD_BYTES,
                 tail_bytes: int = TAIL_BYTES, name: str = "output-drain") -> None:
        self._fd, self._sink = fd, sink
        self.head_bytes, self.tail_bytes = head_bytes, tail_bytes
        self._head = bytearray()
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self.total_bytes = 0
        #: the sink's first failed write (a full disk): nothing more is written to it, the pipe is still drained
        #: (a worker blocked on a full pipe would hang until its timeout), and the owner says what happened
        self.sink_error: OSError | None = None
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)

    def start(self) -> BoundedOutput:
        """Start draining (call once the child holds its copy of the write end)."""
        self._thread.start()
        return self

    @property
    def dropped_bytes(self) -> int:
        """Bytes neither in the head nor in the tail."""
        return max(self.total_bytes - len(self._head) - min(self._tail_len, self.tail_bytes), 0)

    def _keep(self, chunk: bytes) -> None:
        room = self.head_bytes - len(self._head)
        if room > 0:
            first = chunk[:room]
            self._head += first
            self._to_sink(first)
            chunk = chunk[room:]
        if not chunk:
            return
        self._tail.append(chunk)
        self._tail_len += len(chunk)
        while self._tail_len - len(self._tail[0]) >= self.tail_bytes:  # whole chunks that fall out of the tail
            self._tail_len -= len(self._tail.popleft())

    def _to_sink(self, *chunks: bytes) -> None:
        if self._sink is None or self.sink_error is not None:
            return
        try:
            for chunk in chunks:
                self._sink.write(chunk)
            self._sink.flush()
        except OSError as e:
            self.sink_error = e

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, _CHUNK):
                self.total_bytes += len(chunk)
                self._keep(chunk)
        except OSError:  # the parent closed its end (interpreter exit): nothing more to keep
            pass
        finally:
            os.close(self._fd)

    def _tail_bytes(self) -> bytes:
        tail = b"".join(self._tail)
        return tail[-self.tail_bytes:] if len(tail) > self.tail_bytes else tail

    def _marker(self) -> bytes:
        return (f"\n[batchscope: {self.dropped_bytes:,} bytes of output dropped here; kept the first "
                f"{len(self._head):,} and the last {len(self._tail_bytes()):,} of {self.total_bytes:,}]\n").encode()

    def close(self, timeout_s: float = 5.0) -> None:
        """Wait for the end of the output (the child and whatever inherited the pipe are gone), then write the
        marker and the tail to the sink. A reader still blocked after ``timeout_s`` (a grandchild that escaped
        the process group holds the pipe) is left behind as a daemon: what was read so far is written."""
        self._thread.join(timeout_s)
        if self._sink is None:
            return
        self._to_sink(self._marker() if self.dropped_bytes else b"", self._tail_bytes())

    def text(self) -> str:
        """Everything kept, as text: the head, the marker where bytes were dropped, the tail."""
        kept = bytes(self._head) + (self._marker() if self.dropped_bytes else b"") + self._tail_bytes()
        return kept.decode("utf-8", "replace")
