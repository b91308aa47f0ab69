"""The bounds an experiment's values are checked against (what the store, the OS and the plan can hold) and the
settling runs' default length: plain numbers, read by :mod:`harness.config.experiment` (which exports them too),
its checks (in :mod:`harness.config.experiment`) and the CLI."""

from __future__ import annotations

#: the store keeps whole numbers in SQLite INTEGER columns (signed 64-bit): larger ones would fail the
#: write *after* the trial ran, so they are refused up front
SQLITE_INT_MAX = 2**63 - 1
#: the longest experiment name: it is a directory name and the stem of file names (a file name may be 255 bytes)
MAX_NAME_CHARS = 100
#: frameworks x batch sizes x repeats: the plan is held in memory, and 10^5 trials is weeks of running
MAX_TRIALS = 100_000
#: an OS memory limit is set in bytes (RLIMIT_DATA takes < 2^63); 2^30 MiB = 1 PiB is beyond any machine
MAX_MEMORY_LIMIT_MIB = float(2**30)
MAX_TIMEOUT_S = 30 * 24 * 3600.0
MAX_SAMPLE_INTERVAL_MS = 3_600_000.0
#: micro-batches per update (the max-batch search's --accumulate-steps takes as many)
MAX_ACCUMULATE_STEPS = 1024
#: the largest count a step-like key may take (warm-up, timed steps): 10^9 steps is years of training at 10 kHz, so
#: a larger value is a typo; the trial's timeout ends any run before it anyway (issue 32)
MAX_STEPS = 10**9
#: evaluation points and gradient-noise groups per point: each point pauses the training, and each group is
#: BIG_FACTOR gradients; beyond 10^4 a point costs more than any training it describes (issue 32: 10^8 ran for ever)
MAX_POINTS = 10_000
#: framework threads per trial: more than any machine's cores (a framework asked for 10^6 starts them or crashes)
MAX_THREADS = 4096
#: a batch size or a count of samples or classes an experiment key may name (the data set is held in memory)
MAX_SIZE = 2**31 - 1
#: timed steps of each heap-settling run of a CPU max-batch search under glibc's default malloc (issue 22; measured in
#: docs/maxbatch.md: settled with 20-step runs the answer trained 9 of 10 plain runs of 100 steps, with 100-step runs
#: 10 of 10 of 100 and of 300); ``max_batch_settle_steps`` here, ``maxbatch --settle-steps`` on the command line
DEFAULT_SETTLE_STEPS = 100
