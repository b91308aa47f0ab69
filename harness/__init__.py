"""batchscope: measure training across batch sizes and frameworks, one worker process per trial.

The packages under ``harness`` run in the parent process and never import a framework; the
only exception is :mod:`harness.run.worker`, which runs in the child and imports one adapter.
"""

__version__ = "0.2.0"  # the one version source (pyproject.toml reads it); CHANGELOG.md says what each one holds
