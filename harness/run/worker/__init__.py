"""The worker: runs exactly one trial in a fresh process, then exits.

Started by the parent as ``python -m harness.run.worker --fd N`` (:mod:`harness.run.worker.__main__`) with a
:class:`~harness.run.protocol.WorkerRequest` on stdin; it answers on file descriptor N with the messages of
:mod:`harness.run.protocol`. This is the only package under ``harness`` that ends up importing a framework,
and it does so through the adapter the request names. One module per concept:

* :mod:`~harness.run.worker.trial`: the trial's phases (setup, training, evaluation, the result or a failure);
* :mod:`~harness.run.worker.steps`: which samples each step trains, one update timed, the loop, its figures;
* :mod:`~harness.run.worker.evaluation`: the evaluation points (the learning curve, the divergence check, and the
  seam for measurements at a point of the training);
* :mod:`~harness.run.worker.memory`: the process's own memory (``/proc`` readings, the ``VmData`` watcher);
* :mod:`~harness.run.worker.lifeline`: the process's ties to its parent and the OS (:func:`die_with_parent`,
  :func:`limit_memory`).
"""

from __future__ import annotations

from harness.run.planner import plan_steps as plan_steps  # importable from here since it moved to the planner
from harness.run.worker.lifeline import die_with_parent as die_with_parent
from harness.run.worker.lifeline import limit_memory as limit_memory
from harness.run.worker.memory import VmDataWatcher as VmDataWatcher
from harness.run.worker.steps import StepRunner as StepRunner
from harness.run.worker.steps import batch_indices as batch_indices
from harness.run.worker.trial import run_trial as run_trial
