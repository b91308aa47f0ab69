"""Running trials: plan them, run each in a fresh worker process, and collect the outcome.

planner -> sweep -> executor (local or Ray) -> worker (the child process) <- protocol."""
