"""The results store: one SQLite file per output directory (:mod:`harness.store.db`) and its export."""

from harness.store.db import SAMPLE_COLUMNS, Store, store_path
from harness.store.maxbatch_row import maxbatch_record, maxbatch_row
from harness.store.schema import (
    CURVE_COLUMN_NAMES,
    CURVE_COLUMNS,
    MAXBATCH_COLUMN_NAMES,
    MAXBATCH_COLUMNS,
    SCHEMA_VERSION,
    STORE_NAME,
    TRIAL_COLUMN_NAMES,
    TRIAL_COLUMNS,
    outcome_row,
)
from harness.store.trial_record import RunRecord, TrialRecord, TrialSettings

__all__ = ["CURVE_COLUMNS", "CURVE_COLUMN_NAMES", "MAXBATCH_COLUMNS",
           "MAXBATCH_COLUMN_NAMES", "SAMPLE_COLUMNS", "SCHEMA_VERSION", "STORE_NAME",
           "RunRecord", "TRIAL_COLUMNS", "TRIAL_COLUMN_NAMES", "Store", "TrialRecord", "TrialSettings",
           "maxbatch_record", "maxbatch_row", "outcome_row", "store_path"]
