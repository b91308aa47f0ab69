"""The recommendation as a table of text cells, one row per series: the PDF's page 1 and ``batchscope recommend``
print the same rows (no plotting here)."""

from __future__ import annotations

from collections.abc import Sequence

from report.answer.knee import SizeStats
from report.answer.recommend import Recommendation

#: the columns of the recommendation table, as (key, header), shared by the PDF and the terminal
TABLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("framework", "framework"), ("recommended", "recommended batch"), ("why", "why"),
    ("time", "time to target"), ("knee", "throughput knee"), ("max_fit", "max that fits"),
    ("accuracy", "accuracy %: recommended vs best"),
)


def _acc_text(s: SizeStats | None) -> str:
    if s is None or s.accuracy_mean is None:
        return "-"
    sd = f" ± {s.accuracy_sd * 100:.1f}" if s.accuracy_sd is not None else ""
    return f"{s.accuracy_mean * 100:.1f}{sd}"


def table_rows(recs: Sequence[Recommendation], show_variant: bool = False) -> list[dict[str, str]]:
    """The recommendation table as text cells (keys of :data:`TABLE_COLUMNS`)."""
    rows = []
    for r in recs:
        name = r.name if show_variant else r.framework
        if r.batch_size is None:
            size = "none"
        else:
            size = str(r.batch_size) + ("" if r.range_lo == r.range_hi else f" (range {r.range_lo}–{r.range_hi})")
            size += "" if r.supported else ", tentative"
        fit = "-" if r.max_fit is None or r.max_fit.max_batch is None else str(r.max_fit.max_batch)
        if r.max_fit is not None and r.max_fit.max_batch is not None and r.max_fit.margin_mib:
            fit += f" ({r.max_fit.recommended_batch} with a {r.max_fit.margin_mib:g} MiB margin)"
        t = r.target_at(r.batch_size)
        time = "-" if t is None else t.text()
        knee_text = "-" if r.knee_batch is None else str(r.knee_batch)
        if r.knee_batch is not None and r.knee_range[0] != r.knee_range[1]:
            knee_text += f" (range {r.knee_range[0]}–{r.knee_range[1]})"
        best_acc = None if r.target is None else r.target.best_batch
        rows.append({"framework": name, "recommended": size, "why": r.why, "max_fit": fit, "time": time,
                     "knee": knee_text,
                     "accuracy": f"{_acc_text(r.at(r.batch_size))} vs {_acc_text(r.at(best_acc))}"})
    return rows


def show_variants(recs: Sequence[Recommendation]) -> bool:
    """Whether some framework has more than one series (then the series' label is printed with its name)."""
    names = [r.framework for r in recs]
    return len(names) != len(set(names))
