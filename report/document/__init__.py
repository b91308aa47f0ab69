"""The document: the answer (:mod:`report.answer`) and the measurements drawn (:mod:`.figures`, :mod:`.curves`,
:mod:`.drift`), tabulated (:mod:`.tables`, text for the PDF and numbers for its CSV), put in context (:mod:`.context`)
and typeset (:mod:`.pdf`, reportlab) into the PDF by :func:`.build.build_report`.
"""
