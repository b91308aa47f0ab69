"""What compiling a training step cost: an optional part of the adapter contract (re-exported by
:mod:`adapters.base`), which an adapter without compilation leaves out entirely.

An adapter whose framework compiles the step up front may declare two things (the worker reads both with
``getattr``, so a plugin without them runs as before):

* ``compiles_per_shape = True`` (a class attribute): the step is compiled once per batch shape in
  ``prepare_batch``; the worker then prepares one full batch before the training clock starts, so compiling is
  start-up, never training time;
* ``compile_stats() -> CompileStats | None``: what compiling has cost so far, asked before the first timed step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class CompileStats:
    """What compiling the training step cost before the first timed step (:meth:`Adapter.compile_stats`).

    ``cache``: ``cold`` (something was compiled afresh), ``warm`` (all of it came from the persistent cache),
    ``off`` (no cache used). ``cold_s``: what a fresh process without the cache would have spent (``compile_s``
    where cold; where warm, plus the compile time the framework records the cache saved), None where unknown.
    """

    compile_s: float
    cache: Literal["cold", "warm", "off"]
    cold_s: float | None = None
