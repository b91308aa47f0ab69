"""Every ``--json`` output strict (RFC 8259): JSON has no NaN or infinity, and ``json.dump``'s default writes them as
``NaN`` / ``Infinity``, which jq and ``JSON.parse`` reject (issue 43: ``recommend --json`` printed ``"lr": Infinity``
for a rate stored as inf). A non-finite number is written as ``null``, with the reason beside it: ``KEY_null_reason``
in the same object, and for an item of a list the item's path under ``null_reasons`` at the top. The dump itself runs
with ``allow_nan=False``, so a non-finite value this walk does not reach fails loudly (in the tests) rather than
printing invalid JSON."""

from __future__ import annotations

import json
import math
from typing import Any

#: the top-level key listing non-finite list items made null (an object's own keys carry ``KEY_null_reason``)
NULL_REASONS = "null_reasons"


def _reason(value: float) -> str:
    return f"{value!r} is not a number JSON can hold (non-finite); written as null"


def _strict(value: Any, path: str, found: list[dict[str, str]]) -> Any:
    """``value`` with every non-finite float replaced by None; list items so replaced are appended to ``found``."""
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(item, float) and not math.isfinite(item):
                out[key] = None
                out[f"{key}_null_reason"] = _reason(item)
            else:
                out[key] = _strict(item, f"{path}.{key}" if path else str(key), found)
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for i, item in enumerate(value):
            if isinstance(item, float) and not math.isfinite(item):
                found.append({"path": f"{path}[{i}]", "reason": _reason(item)})
                items.append(None)
            else:
                items.append(_strict(item, f"{path}[{i}]", found))
        return items
    if isinstance(value, float) and not math.isfinite(value):  # a bare number at the top
        found.append({"path": path or "$", "reason": _reason(value)})
        return None
    return value


def strict(value: Any) -> Any:
    """``value`` as strict JSON data: non-finite numbers as null, each with its reason (the module's docstring)."""
    found: list[dict[str, str]] = []
    out = _strict(value, "", found)
    if found and isinstance(out, dict):
        out[NULL_REASONS] = found
    return out


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`strict`'s ``value`` with ``allow_nan=False`` (ValueError on anything it missed)."""
    return json.dumps(strict(value), allow_nan=False, **kwargs)
