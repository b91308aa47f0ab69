"""Findings computed from the measurements and worded from them.

Each finding is a sentence built from the cells' numbers (never canned text): the batch size with the
best throughput per framework and whether its lead over the runner-up is larger than the spread of the
repeats; where accuracy peaks and whether that is at an end of the sweep or inside it; how much memory
each extra sample costs (least-squares slope, per memory view); the most frugal batch in energy; and
what did not finish. The thesis's qualitative findings are judged by :func:`report.answer.thesis.thesis_findings`
and only worded here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.cells import ACCURACY, DRIFT_READINGS, METRICS, Cell, Series, Stat
from harness.numbers import linear_fit
from report.answer.studies import line_label
from report.load import StoredExperiment

MEMORY_VIEWS = ("framework_peak_mib", "proc_gpu_mem_peak_mib", "gpu_mem_used_peak_mib", "rss_peak_mib")


@dataclass(frozen=True)
class Finding:
    """One finding: a topic and the sentence worded from the data."""

    topic: str
    text: str


def _by_line(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> dict[str, list[Cell]]:
    """The cells by line (:attr:`harness.cells.Cell.line`: a framework, or a framework under one named variant), in
    the order of ``lines`` (a plain name stands for a framework's line without variant), then as found; each keyed
    by the words that name its line in a sentence."""
    grouped: dict[Series, list[Cell]] = {Series(framework=x) if isinstance(x, str) else x: [] for x in lines}
    for c in cell_list:
        grouped.setdefault(c.line, []).append(c)
    return {line_label(line): group for line, group in grouped.items()}


def _num(value: float, fmt: str) -> str:
    return format(value, fmt if fmt != ".0f" else ",.0f")


def _distinct(a: Stat, b: Stat) -> bool | None:
    """Whether two means differ by more than their spread (None when there is no spread to judge by)."""
    if a.sd is None or b.sd is None:
        return None
    return abs(a.mean - b.mean) > (a.sd + b.sd)


def best_throughput(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Per framework: the batch size with the highest mean throughput, and how clear its lead is."""
    out = []
    for fw, group in _by_line(cell_list, lines).items():
        ranked = sorted(((c, st) for c in group if (st := c.get("step_samples_per_s"))), key=lambda cs: -cs[1].mean)
        if not ranked:
            continue
        (best, s), rest = ranked[0], ranked[1:]
        assert s is not None
        e2e = best.get("e2e_samples_per_s")
        text = (f"{fw}'s step throughput was highest at batch {best.batch_size}: {_num(s.mean, '.0f')} samples/s "
                f"(mean of {s.n} repeat{'s' if s.n != 1 else ''}"
                + (f"; end-to-end {_num(e2e.mean, '.0f')} samples/s" if e2e is not None else "") + ")")
        if rest:
            runner, rs = rest[0]
            assert rs is not None
            gap = (s.mean - rs.mean) / rs.mean * 100
            clear = _distinct(s, rs)
            text += (f", {gap:.0f}% ahead of batch {runner.batch_size} ({_num(rs.mean, '.0f')} samples/s)")
            if clear is None:
                text += "; with a single repeat the lead cannot be told apart from timing noise (±10-25% here)"
            elif not clear:
                text += "; the two overlap within one standard deviation, so they are not distinguishable on this run"
            else:
                text += "; the lead is larger than the spread of the repeats"
        smallest = min(group, key=lambda c: c.batch_size)
        ss = smallest.get("step_samples_per_s")
        if ss is not None and smallest is not best:
            text += f". Against the smallest batch ({smallest.batch_size}) that is ×{s.mean / ss.mean:.1f}"
        out.append(Finding("throughput", text + "."))
    return out


def drift(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Per framework: the cells whose step time drifted beyond its noise, with the size of the change, and
    whether the repeats agree (the workload's change) or not (most likely the machine's)."""
    out = []
    for fw, group in _by_line(cell_list, lines).items():
        flagged = [c for c in group if c.drift_flagged_n]
        if not flagged:
            continue
        parts = [f"batch {c.batch_size} {c.drift_text()} ({c.drift_flagged_n} of {c.n_ok} trial(s): "
                 f"{DRIFT_READINGS[c.drift_reading]})" for c in flagged]
        out.append(Finding("drift", f"{fw}'s step time drifted during training (median of the last tenth of the "
                                    f"steps against the first tenth, beyond the steps' own spread): "
                                    + "; ".join(parts) + ". Its figures are over the whole training, so they "
                                    "include the change; a short early window would have missed it."))
    return out


def denormals(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Whether the frameworks ran under different denormal behaviour (which makes their speeds incomparable)."""
    by_fw = {fw: sorted({d for c in group for d in c.cpu_denormals})
             for fw, group in _by_line(cell_list, lines).items()}
    by_fw = {fw: ds for fw, ds in by_fw.items() if ds}
    if len({tuple(ds) for ds in by_fw.values()}) < 2:
        return []
    said = "; ".join(f"{fw}: {'/'.join(ds)}" for fw, ds in by_fw.items())
    return [Finding("denormals", f"The frameworks ran under different denormal-float behaviour ({said}). On a "
                                 "CPU, 'keep' can make steps many times slower once weights become tiny, so "
                                 "their speeds are not comparable; run with denormals = 'flush' for a fair "
                                 "comparison (docs/denormals.md).")]


def math_modes(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Whether the frameworks computed float32 in different arithmetics on the GPU (TF32 in one, true float32 in
    another), as each read its math mode back: then their speeds measure partly which one turned TF32 on."""
    by_fw = {fw: sorted({str(a) for c in group for a in c.arithmetic if a.read_back})
             for fw, group in _by_line(cell_list, lines).items()}
    by_fw = {fw: arith for fw, arith in by_fw.items() if arith}
    if len({tuple(arith) for arith in by_fw.values()}) < 2:
        return []
    said = "; ".join(f"{fw}: {'/'.join(arith)}" for fw, arith in by_fw.items())
    return [Finding("math mode", f"The frameworks computed in different arithmetics on the GPU ({said}, as each "
                                 "read its math mode back). TF32 tensor cores run float32 convolutions and matmuls "
                                 "several times faster than true float32, so their speeds are not comparable; "
                                 "run with math_mode = 'ieee' (or 'tf32') for a fair comparison (docs/precision.md).")]


def accuracy_peak(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Per framework: where accuracy peaks, and whether the peak is inside the sweep."""
    out = []
    for fw, group in _by_line(cell_list, lines).items():
        scored = [(c, st) for c in group if (st := c.get(ACCURACY)) is not None]
        if len(scored) < 2:
            continue
        scored.sort(key=lambda cs: cs[0].batch_size)
        best, bs = max(scored, key=lambda cs: cs[1].mean)
        worst, ws = min(scored, key=lambda cs: cs[1].mean)
        assert bs is not None and ws is not None
        where = ("at the smallest batch size tried" if best is scored[0][0] else
                 "at the largest batch size tried" if best is scored[-1][0] else
                 "at a middle batch size: both smaller and larger batches did worse")
        out.append(Finding("accuracy", f"{fw}'s accuracy peaks at batch {best.batch_size} "
                                       f"({bs.text('.1f')}%), {where}; its lowest is {ws.mean:.1f}% at batch "
                                       f"{worst.batch_size} (a spread of {bs.mean - ws.mean:.1f} points)."))
    return out


def memory_growth(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Per framework and memory view: the least-squares MiB per extra sample and the fixed part."""
    out = []
    for fw, group in _by_line(cell_list, lines).items():
        parts = []
        for view in MEMORY_VIEWS:
            points = [(c.batch_size, st.mean) for c in group if (st := c.get(view)) is not None]
            fit = linear_fit(points)
            if fit is None:
                continue
            r2 = f", R² {fit.r2:.2f}" if fit.r2 is not None else ""
            parts.append(f"{METRICS[view].label}: {fit.slope * 1024:.0f} KiB per sample over a fixed "
                         f"{fit.intercept:.0f} MiB (batches {fit.x_lo:.0f}-{fit.x_hi:.0f}{r2})")
        if parts:
            out.append(Finding("memory", f"{fw}'s memory grows linearly with the batch as " + "; ".join(parts)
                               + "."))
    return out


def energy_best(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """Per framework: the batch size with the least energy per sample."""
    out = []
    for fw, group in _by_line(cell_list, lines).items():
        unread = [c for c in group if c.get("j_per_sample") is None and c.readings_notes]
        if unread:  # the least energy among the cells that could be read is no answer: say why there is none
            out.append(Finding("energy", f"{fw}'s energy per sample is not measurable at batch "
                                         f"{', '.join(str(c.batch_size) for c in unread)}: "
                                         f"{unread[0].readings_notes[0]}" + _steady_words(group) + "."))
            continue
        scored = [(c, st) for c in group if (st := c.get("j_per_sample")) is not None]
        if len(scored) < 2:
            continue
        best, s = min(scored, key=lambda cs: cs[1].mean)
        worst, w = max(scored, key=lambda cs: cs[1].mean)
        assert s is not None and w is not None
        out.append(Finding("energy", f"{fw} used the least energy per sample at batch {best.batch_size} "
                                     f"({s.mean:.3g} J), {w.mean / s.mean:.1f}× less than at batch "
                                     f"{worst.batch_size} ({w.mean:.3g} J)."))
    return out


def _steady_words(group: Sequence[Cell]) -> str:
    """What the steady phase after the final evaluation measured instead, where it did."""
    steady = [(c.batch_size, c.get("steady_j_per_sample")) for c in group if c.get("steady_j_per_sample")]
    if not steady:
        return ""
    return ("; the steady phase after training measured " +
            ", ".join(f"{s.mean:.3g} J at batch {bs}" for bs, s in steady if s is not None))


def failures(cell_list: Sequence[Cell], lines: Sequence[Series | str]) -> list[Finding]:
    """What did not finish: the first failing size per framework and the reason."""
    out = []
    for fw, group in _by_line(cell_list, lines).items():
        bad = [c for c in group if c.n_ok < c.n]
        if not bad:
            continue
        first = min(bad, key=lambda c: c.batch_size)
        ok_sizes = [c.batch_size for c in group if c.n_ok]
        reason = f" ({first.reasons[0][:160]})" if first.reasons else ""
        text = (f"{fw}: {sum(c.n - c.n_ok for c in bad)} trial(s) did not finish, first at batch "
                f"{first.batch_size} ({first.status_text()}){reason}.")
        if ok_sizes:
            text += f" The largest batch that finished was {max(ok_sizes)}."
        out.append(Finding("failures", text))
    return out


def compute(exp: StoredExperiment, cell_list: Sequence[Cell]) -> list[Finding]:
    """Every finding computed from one experiment's cells, in reading order."""
    lines = exp.line_series
    return [*denormals(cell_list, lines), *math_modes(cell_list, lines), *drift(cell_list, lines),
            *best_throughput(cell_list, lines), *accuracy_peak(cell_list, lines), *memory_growth(cell_list, lines),
            *energy_best(cell_list, lines), *failures(cell_list, lines)]


def thesis_verdicts(rows: Sequence[dict[str, Any]]) -> list[Finding]:
    """The thesis's findings as judged on this run by :func:`report.answer.thesis.thesis_findings`."""
    words = {True: "holds on this run", False: "does not hold on this run", None: "cannot be judged on this run"}
    return [Finding("thesis", f"{r.get('finding', '?')}: {words.get(r.get('holds'), 'not judged')}"
                              + (f" ({str(r['evidence']).rstrip('.')})" if r.get("evidence") else "") + ".")
            for r in rows]
