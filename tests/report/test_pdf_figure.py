"""A figure taller than a page is drawn smaller, never refused by the typesetter.

The batch_ramp study's critical-batch figure (four frameworks, each with a ramp variant: eight panels stacked) came out
798 pt tall at the text width, taller than the page's 733 pt frame, and reportlab's LayoutError ended
``batchscope report`` with a traceback.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image

from report.document.pdf import FIGURE_MAX_HEIGHT, TEXT_WIDTH, PdfWriter


def _png(path: Path, width_in: float, height_in: float) -> Path:
    fig, ax = plt.subplots(figsize=(width_in, height_in))
    ax.plot([0, 1], [0, 1])
    fig.savefig(path, dpi=200)
    plt.close(fig)
    return path


def test_a_figure_taller_than_a_page_is_scaled_to_fit_it(tmp_path: Path) -> None:
    tall = _png(tmp_path / "tall.png", 7.0, 12.0)  # 1400 x 2400 px: 864 pt tall at the text width
    with Image.open(tall) as im:
        assert TEXT_WIDTH * im.size[1] / im.size[0] > FIGURE_MAX_HEIGHT  # the case this test is about
    writer = PdfWriter("tall", "footer")
    writer.figure(tall, "A tall figure", "its caption")
    writer.figure(_png(tmp_path / "wide.png", 7.0, 3.0), "A usual figure", "its caption")
    out = tmp_path / "report.pdf"
    writer.save(out)
    assert out.read_bytes().startswith(b"%PDF")
