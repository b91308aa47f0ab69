"""Stands in for keras under `make test-fast`: a test that imports a framework must be marked slow."""

raise ImportError("keras is blocked by make test-fast: a test that starts a framework must be marked slow")
