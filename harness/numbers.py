"""One rule for a number read from outside (a stored row, a sampler reading, a computed float): finite, or None."""

from __future__ import annotations

import math
from typing import Any


def finite_or_none(value: Any) -> float | None:
    """``value`` as a finite float, else None: NULL, text that is not a number, a bool, NaN and inf all give None
    (JSON and SQLite have no NaN or inf, and a reading that is not a number is no reading)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None
