"""Helpers that more than one test module uses, one module per subject, so that no test module imports another.

Shared fakes (objects that stand in for a framework, a clock, a device) live in :mod:`tests.fakes`; what only
one test module uses stays in it.
"""
