"""The fault suite (issue 13): every way a run can go wrong is recorded or refused, nothing is lost, no
worker outlives its parent, and no command prints a traceback. One test per case; docs/reliability.md
lists each promise with the test that checks it."""
