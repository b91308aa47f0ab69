"""Deliberately broken adapters: each is a passing adapter with one defect that the contract suite must catch.

They are PyTorch underneath (PyTorch is the suite's reference and is installed wherever the suite runs),
so what fails is the defect, not the framework. ``tests/contract/test_broken_adapters.py`` runs the
contract's checks on each and asserts that the check aimed at its defect fails with a message that names
the likely cause. They are not registered as entry points.
"""
