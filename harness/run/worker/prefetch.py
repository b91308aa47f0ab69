"""The next update's batches prepared on a second thread while the current update trains (the ``prefetch`` key).

A user's input pipeline overlaps the host work with the step (PyTorch DataLoader workers with ``pin_memory``,
``tf.data``'s ``prefetch``, a JAX prefetch to the device); a harness that gathers serially makes the device wait
and understates end-to-end throughput. With ``prefetch`` on, the worker's training thread hands the next update's
index batch to one background thread as the current update starts; that thread gathers the samples (NumPy fancy
indexing into a contiguous array), applies the augmentation, and, where the adapter has the optional
``prepare_batch_ahead`` hook (:class:`adapters.base.Adapter`), converts it and copies it to the device too.

What each figure means stays as it was: a step's time is still ``train_step`` alone; ``data_s`` is the data time
the training thread still spends (waiting for a prefetched batch that is not ready, plus an adapter's
``prepare_batch`` where it has no hook); the end-to-end throughput includes every remaining wait.

Determinism: the background thread prepares exactly the update the training thread will take next, from the same
indices and the same augmentation draws, one update at a time and in order; a batch is identical with prefetch on
and off (tests/run/test_prefetch.py, and with real frameworks test_prefetch_frameworks.py).

Threads: the background thread is one extra thread besides the framework's ``threads``. It runs for a fraction of
each step, and what it does (NumPy copies, a framework's host-to-device copy) releases the GIL. On a 1-thread trial
it may share the framework's one CPU (JAX restricts the whole process's affinity to it): the work is then done in
the step's gaps or time-sliced with it, never more of it than without prefetch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")

#: one update's job: (step, index batch) -> what the training thread needs to train it
Prepare = Callable[[int, Any], Any]


def with_next(items: Iterable[T]) -> Iterator[tuple[T, T | None]]:
    """Each item with the one after it (None after the last): what the training loop hands to the prefetcher."""
    it = iter(items)
    try:
        current = next(it)
    except StopIteration:
        return
    for following in it:
        yield current, following
        current = following
    yield current, None


class Prefetcher:
    """Runs ``prepare(step, idx)`` for the next update on one background thread while the current one trains.

    :meth:`take` returns the prepared update for ``step``: the background thread's result where :meth:`ahead`
    submitted that step, else ``inline(step, idx)`` run here, on the training thread (the first update, which
    nothing ran before; it may differ from ``prepare``: JAX compiles in ``prepare_batch``, never ahead). One update
    is in flight at a time.
    """

    def __init__(self, prepare: Prepare, inline: Prepare) -> None:
        self.prepare, self.inline = prepare, inline
        self._pool: ThreadPoolExecutor | None = None
        self._pending: tuple[int, Future[Any]] | None = None

    def ahead(self, step: int, idx: Any) -> None:
        """Start preparing update ``step`` (indices ``idx``) on the background thread."""
        if self._pending is not None:  # a step that was never taken (the loop stopped): nothing waits for it
            _drop(self._pending[1])
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batchscope-prefetch")
        try:
            self._pending = (step, self._pool.submit(self.prepare, step, idx))
        except RuntimeError as exc:  # the thread could not start: under a max-batch probe's OS memory limit, its
            # stack is what did not fit (it counts in RLIMIT_DATA); an out-of-memory, not an error to retry
            raise MemoryError(f"out of memory: the prefetch thread could not start ({exc}); "
                              "prefetch = false runs without it") from exc

    def take(self, step: int, idx: Any) -> Any:
        """Update ``step`` prepared: the prefetched one (waiting for it if needed; its error re-raised here) or,
        when none was prefetched for this step, prepared now."""
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] == step:
            return pending[1].result()
        if pending is not None:
            _drop(pending[1])
        return self.inline(step, idx)

    def close(self) -> None:
        """Wait for the background thread to end (a prefetched update nobody took is dropped)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            _drop(pending[1])
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _drop(future: Future[Any]) -> None:
    """Forget an update prepared ahead that will not be trained; one already running is let finish first, so that
    two preparations never run at once (the augmenter keeps its epoch's draws between calls)."""
    if not future.cancel():
        wait([future])
