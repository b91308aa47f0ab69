"""A max-batch answer (:class:`~harness.records.MaxBatchResult`, typed parts) as a ``maxbatch`` row and back: the one
place its parts are flattened to columns and its JSON columns are written and read (issue 39).

Each stored field of the record and of its parts names its column (``column`` metadata, the record's flat name before
issue 39); the column's SQL type is the field's, TEXT for the fields stored as JSON. The columns keep the order stores
have them in (:data:`MAXBATCH_COLUMN_ORDER`): a new field is a new column at the end, added to older stores on open.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from harness.records import (
    MAXBATCH_PARTS,
    MaxBatchResult,
    ProbeResult,
    SettleRun,
    maxbatch_fields,
)

#: the maxbatch table's columns in the order stores have them (the first ones are the agreed report columns):
#: append, never rename or reorder (the report and ``recommend`` read them by name; old stores must still open)
MAXBATCH_COLUMN_ORDER = (
    "run_id", "experiment", "framework", "model", "dataset", "device", "precision", "strategy", "budget_mib",
    "budget_kind", "margin_mib", "max_batch", "first_fail_batch", "first_fail_status", "first_fail_reason",
    "recommended_batch", "recommended_pow2", "recommended_mult8", "probes_n", "wall_s", "formula_batch",
    "formula_error_pct", "param_count", "per_sample_activation_mib", "fit_a_mib", "fit_b_mib_per_sample", "probes_json",
    "env_json", "finished_at", "formula_analytic_batch", "formula_analytic_error_pct",
    "analytic_activation_mib_per_sample", "model_state_mib", "capped", "versions_json", "confirm_steps",
    "margin_jitter_mib", "margin_growth_mib", "margin_total_mib", "train_env_json", "verify_steps", "verify_status",
    "verify_reason", "verify_peak_mib", "setting", "accumulate_steps", "effective_batch", "adapter_options_json",
    "answer_peak_mib", "answer_samples_per_s", "margin_heap_mib", "heap_settle_json", "heap_settle_steps", "math_mode",
    "resolution", "cuda_context_mib", "spread_mib", "resolution_note", "estimate_batch", "estimate_error_pct",
    "estimate_mib_per_sample", "estimate_step_fixed_mib", "estimate_fixed_cost_mib", "estimate_note", "fit_source",
)


def _paths() -> dict[str, tuple[str, str, bool, Any]]:
    """column -> (the part holding it, "" for the record's own field; its field; JSON?; its type)."""
    out: dict[str, tuple[str, str, bool, Any]] = {}
    for part, cls in (("", MaxBatchResult), *MAXBATCH_PARTS.items()):
        hints = typing.get_type_hints(cls)
        for attr, column, is_json in maxbatch_fields(cls):
            if column in out:
                raise TypeError(f"two fields of MaxBatchResult are stored in the column {column!r}")
            out[column] = (part, attr, is_json, hints[attr])
    if set(out) != set(MAXBATCH_COLUMN_ORDER):  # a new field must be appended to the order, a column never dropped
        raise TypeError(f"MaxBatchResult's columns {sorted(set(out) ^ set(MAXBATCH_COLUMN_ORDER))} are not both "
                        "fields and in MAXBATCH_COLUMN_ORDER")
    return out


_PATHS = _paths()


def maxbatch_columns(sql_type: Any) -> tuple[tuple[str, str], ...]:
    """(name, SQL type) of each column after ``result_id``, in :data:`MAXBATCH_COLUMN_ORDER` (``sql_type``: the
    schema's field type to column type)."""
    return tuple((c, "TEXT" if _PATHS[c][2] else sql_type(_PATHS[c][3])) for c in MAXBATCH_COLUMN_ORDER)


def _encode(column: str, value: Any) -> str | None:
    """A JSON column's text, as the prober wrote it before issue 39 (so a row's text does not change)."""
    if column == "probes_json":  # written for every search, [] where it had none
        return json.dumps([asdict(v) for v in value])
    if column == "heap_settle_json":  # NULL where no settling ran
        return json.dumps([asdict(v) for v in value]) if value else None
    if value is None:
        return None
    if column == "adapter_options_json":
        return json.dumps(dict(value), sort_keys=True, default=str)
    return json.dumps(value, default=str)


def _decode(column: str, text: Any) -> Any:
    """A JSON column's value typed: the probes and settling runs as records (() where NULL or unreadable), a mapping
    as a dict (None where NULL or unreadable: not recorded)."""
    try:
        data = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        data = None
    if column == "probes_json":
        return tuple(ProbeResult.from_dict(p) for p in data if isinstance(p, dict)) if isinstance(data, list) else ()
    if column == "heap_settle_json":
        runs = data if isinstance(data, list) else []
        return tuple(SettleRun(int(r["batch"]), int(r["run"]), str(r["status"])) for r in runs
                     if isinstance(r, dict) and {"batch", "run", "status"} <= set(r))
    return data if isinstance(data, dict) else None


def maxbatch_row(result: MaxBatchResult) -> dict[str, Any]:
    """The ``maxbatch`` row of ``result``: one value per column of :data:`MAXBATCH_COLUMN_ORDER` (no ``result_id``)."""
    row: dict[str, Any] = {}
    for column in MAXBATCH_COLUMN_ORDER:
        part, attr, is_json, _ = _PATHS[column]
        value = getattr(getattr(result, part) if part else result, attr)
        row[column] = _encode(column, value) if is_json else int(value) if isinstance(value, bool) else value
    return row


def maxbatch_record(row: Mapping[str, Any]) -> MaxBatchResult:
    """The record of a stored row. Its ``result_id`` and any column this version does not know (a newer store's) are
    left out; a NULL reads as the field's default where that is not None ("" for a name, 0 for max_batch)."""
    values: dict[str, dict[str, Any]] = {}
    for column, value in row.items():
        if column not in _PATHS or value is None:
            continue
        part, attr, is_json, hint = _PATHS[column]
        if is_json:
            value = _decode(column, value)
        elif bool in typing.get_args(hint) or hint is bool:
            value = bool(value)
        values.setdefault(part, {})[attr] = value
    parts = {name: cls(**values.get(name, {})) for name, cls in MAXBATCH_PARTS.items()}
    return MaxBatchResult(**values.get("", {}), **parts)
