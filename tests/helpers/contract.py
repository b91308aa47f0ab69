"""Verdicts on probe results that more than one contract test module asks for (the pure judgements themselves are
in :mod:`tests.contract.verdicts`)."""

from __future__ import annotations

from tests.contract import verdicts
from tests.contract.conftest import ProbeResult


def batchnorm_verdict(this: ProbeResult, ref: ProbeResult) -> str | None:
    """The BatchNorm-statistics verdict of ``this`` against the reference probe."""
    record, ref_record = this.check("batchnorm"), ref.check("batchnorm")
    arrays = {
        side: {k: [p.arrays[f"bn/{i}/{k}"] for i in range(len(r["n"]))] for k in ("mean", "var")}
        for side, p, r in (("this", this, record), ("ref", ref, ref_record))
    }
    return verdicts.batchnorm_statistics(arrays["this"], {**ref_record, **arrays["ref"]}, record["declared"])
