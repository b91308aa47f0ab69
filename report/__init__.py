"""The PDF report of a results store: figures, tables and findings computed from the measurements.

Three layers (docs/architecture.md), each importing only those before it:

* the input: :mod:`report.load` (reads only ``results.sqlite``: no framework is imported, no GPU is needed) and
  :mod:`harness.cells` (statistics per framework × batch size over the repeats);
* :mod:`report.answer`: the recommendation, the critical batch size, the findings, the studies' verdicts;
* :mod:`report.document`: figures, tables and the PDF. Entry point: :func:`report.document.build.build_report`, or
  ``batchscope report DIR``.
"""
