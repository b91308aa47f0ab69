"""The answer, computed from the report's input (:mod:`report.load`, :mod:`harness.cells`): which batch size to
train with (:mod:`.recommend`: the time to a target, :mod:`.target`; the throughput knee, :mod:`.knee`), the critical
batch size (:mod:`.critical`, :mod:`.critical_batch`), the findings worded from the measurements (:mod:`.findings`),
the seed studies' verdicts (:mod:`.studies`) and our run beside the published one (:mod:`.thesis`).

No plotting and no PDF here: ``batchscope recommend`` and ``batchscope compare`` print these without matplotlib or
reportlab; :mod:`report.document` draws and typesets them.
"""
