"""Plain console output shared by the commands: aligned tables and argument parsers for lists."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _csv_ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None


def path_arg(name: str) -> Callable[[str], str]:
    """An argparse ``type`` for a path: an empty one (an unset shell variable) is refused, naming ``name``, rather
    than read as the default or as the current directory."""

    def check(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{name} is empty (an unset shell variable?); give a path")
        return text

    return check


def target_accuracy_arg(text: str) -> float:
    """An argparse ``type`` for ``--target-accuracy``: a percent in (0, 100], or 0 for the default target."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--target-accuracy: {text!r} is not a number; give a percent such as "
                                         "97.5 (0: the best mean accuracy minus 1 point)") from None
    if not 0 <= value <= 100 or value != value:
        raise argparse.ArgumentTypeError(f"--target-accuracy: {text} is not a percent in [0, 100]")
    if 0 < value < 1:
        raise argparse.ArgumentTypeError(f"--target-accuracy: {text} is read as a percent ({value:g} %, below any "
                                         f"useful target); give {value * 100:g} for {value * 100:g} %")
    return value


TARGET_HELP = ("the accuracy (percent) the time to target is measured to, instead of the experiment's "
               "target_accuracy; 0: each series' best mean final accuracy minus 1 point (docs/recommend.md)")


def _csv_names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def print_table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str, str]], file: Any = None) -> None:
    """Print rows as a plain aligned table; columns are (key, header, format)."""
    file = file or sys.stdout
    cells = [[h for _, h, _ in columns]] + [[_fmt(r.get(k), f) for k, _, f in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    for n, row in enumerate(cells):
        padded = (c.rjust(w) if n and i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        print("  ".join(padded).rstrip(), file=file)


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at a word boundary with an ellipsis (never mid-word)."""
    import textwrap

    return textwrap.shorten(text, width, placeholder=" …") if len(text) > width else text
