"""Print, per trial of one or more stores, the old headline beside the whole-training figures (Markdown).

    python benchmarks/throughput_table.py results/replay_flush results/replay_keep

Columns: the first-20-timed-step median figure that was the headline before schema 2 (recomputed from
the stored step times), the step and end-to-end figures over every post-warm-up step, their ratio, the
drift, and the denormal setting asked for and what the CPU did. Used for docs/denormals.md.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
from pathlib import Path

OLD_WINDOW_STEPS = 20


def rows(store_dir: Path) -> list[str]:
    """Markdown rows, one per ok trial of the store in ``store_dir``."""
    conn = sqlite3.connect(store_dir / "results.sqlite")
    conn.row_factory = sqlite3.Row
    out = []
    try:
        for t in conn.execute("SELECT * FROM trials WHERE status = 'ok' ORDER BY framework, batch_size, repeat"):
            timed = [r[0] for r in conn.execute("SELECT time_ms FROM step_times WHERE trial_hash = ? AND "
                                                "phase = 'timed' ORDER BY step", (t["trial_hash"],))]
            old = t["batch_size"] / (statistics.median(timed[:OLD_WINDOW_STEPS]) / 1e3) if timed else None
            drift = f"{t['drift_change_pct']:+.0f}%" + (" **flagged**" if t["drift_flagged"] else "") \
                if t["drift_change_pct"] is not None else "-"
            ratio = old / t["e2e_samples_per_s"] if old and t["e2e_samples_per_s"] else None
            out.append(f"| {t['framework']} | {t['batch_size']} | {t['denormals']} | {t['cpu_denormals']} | "
                       f"{old:,.0f} | {t['step_samples_per_s']:,.0f} | {t['e2e_samples_per_s']:,.0f} | "
                       f"{'-' if ratio is None else f'{ratio:.1f}x'} | {drift} | {t['measured_steps_n']} |")
    finally:
        conn.close()
    return out


def main(argv: list[str]) -> int:
    """Print the table for the stores named in ``argv``."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 0 if argv else 2
    missing = [d for d in argv if not (Path(d) / "results.sqlite").is_file()]
    if missing:
        print(f"no results store (results.sqlite) in: {', '.join(missing)}", file=sys.stderr)
        return 2
    print("| framework | batch | denormals asked | CPU did | old headline: first 20 steps (samples/s) | "
          "step (samples/s) | end-to-end (samples/s) | old / e2e | drift | steps |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in argv:
        print("\n".join(rows(Path(d))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
