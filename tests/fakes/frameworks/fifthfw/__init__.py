"""A stand-in for a fifth framework: a top-level module that no hand-kept list names.

Its adapter is tests/contract/broken/fifth_toplevel.py. Importing it costs nothing; what matters is its
name, which only the registry (the fifth adapter's ``import_name``) knows.
"""
