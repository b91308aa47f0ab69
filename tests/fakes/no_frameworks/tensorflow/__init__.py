"""Stands in for tensorflow under `make test-fast`: a test that imports a framework must be marked slow."""

raise ImportError("tensorflow is blocked by make test-fast: a test that starts a framework must be marked slow")
