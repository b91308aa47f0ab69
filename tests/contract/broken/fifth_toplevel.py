"""A fifth framework's adapter that imports its framework at module level.

No list kept by hand names ``fifthfw``: the contract's "imports no framework at module level" check must learn
it from the registry (the adapter's ``import_name``). ``fifthfw`` lives in ``tests/fakes/frameworks``, which
the test puts on the path.
"""

from __future__ import annotations

import fifthfw  # noqa: F401 - the defect: the parent imports this module to list adapters

from tests.fakes.adapter import FakeAdapter


class FifthTopLevel(FakeAdapter):
    name = "fifth"
    distributions = ("fifthfw",)
    import_name = "fifthfw"
