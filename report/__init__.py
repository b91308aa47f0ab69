"""The PDF report of a results store: figures, tables and findings computed from the measurements.

Reads only ``results.sqlite`` (see :mod:`report.load`): no framework is imported, no GPU is needed.
Entry point: :func:`report.build.build_report`, or ``batchscope report DIR``.
"""
