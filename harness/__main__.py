"""``python -m harness`` is the ``batchscope`` command."""

from harness.cli import main

raise SystemExit(main())
