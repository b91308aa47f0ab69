"""Typesetting the report with reportlab: headings with PDF bookmarks, prose, tables, figures.

reportlab rather than matplotlib's PdfPages because the report is mostly text and tables: reportlab
flows paragraphs, wraps long command lines, splits long tables across pages with their header
repeated, and writes real text (searchable, and checkable by tests with pypdf). Figures are drawn by
matplotlib and placed as 200-dpi PNG; the SVGs beside the PDF are the vector copies.

The fonts are the DejaVu TrueType files matplotlib ships, embedded, so symbols such as ±, ≥, ², ₂
and × print (the PDF base-14 fonts cannot).
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reportlab.lib import colors
from reportlab.lib.enums import TA_LEFT
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import cm
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import (
    CondPageBreak,
    Flowable,
    Image,
    KeepTogether,
    PageBreak,
    Paragraph,
    Preformatted,
    SimpleDocTemplate,
    Spacer,
    TableStyle,
)
from reportlab.platypus import Table as RLTable

from report.document.tables import Table

MARGIN = 1.7 * cm
TEXT_WIDTH = A4[0] - 2 * MARGIN
#: the tallest a figure may be drawn: the page's text height less room for its title and a caption line and the
#: frame's padding (a taller image cannot be placed on any page: reportlab raises a LayoutError)
FIGURE_MAX_HEIGHT = A4[1] - 2 * MARGIN - 100
_FONTS_READY = False


def _register_fonts() -> None:
    """Embed matplotlib's DejaVu fonts (once per process)."""
    global _FONTS_READY
    if _FONTS_READY:
        return
    import matplotlib

    ttf = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    for name, file in (("DejaVu", "DejaVuSans.ttf"), ("DejaVu-Bold", "DejaVuSans-Bold.ttf"),
                       ("DejaVu-Oblique", "DejaVuSans-Oblique.ttf"),
                       ("DejaVu-BoldOblique", "DejaVuSans-BoldOblique.ttf"),
                       ("DejaVuMono", "DejaVuSansMono.ttf")):
        pdfmetrics.registerFont(TTFont(name, str(ttf / file)))
    pdfmetrics.registerFontFamily("DejaVu", normal="DejaVu", bold="DejaVu-Bold", italic="DejaVu-Oblique",
                                  boldItalic="DejaVu-BoldOblique")
    _FONTS_READY = True


def _styles() -> dict[str, ParagraphStyle]:
    base = ParagraphStyle("body", fontName="DejaVu", fontSize=9, leading=12.5, alignment=TA_LEFT, spaceAfter=5)
    return {
        "body": base,
        "title": ParagraphStyle("title", parent=base, fontName="DejaVu-Bold", fontSize=20, leading=25, spaceAfter=8),
        "subtitle": ParagraphStyle("subtitle", parent=base, fontSize=10, textColor=colors.HexColor("#444444")),
        # headings keep with what follows: a heading alone at the foot of a page reads as broken
        "h1": ParagraphStyle("h1", parent=base, keepWithNext=1, fontName="DejaVu-Bold", fontSize=15, leading=19,
                             spaceBefore=6, spaceAfter=6, textColor=colors.HexColor("#1a3a5c")),
        "h2": ParagraphStyle("h2", parent=base, keepWithNext=1, fontName="DejaVu-Bold", fontSize=11.5, leading=15,
                             spaceBefore=9, spaceAfter=4, textColor=colors.HexColor("#1a3a5c")),
        "h3": ParagraphStyle("h3", parent=base, keepWithNext=1, fontName="DejaVu-Bold", fontSize=9.5, leading=12.5,
                             spaceBefore=6, spaceAfter=3),
        "caption": ParagraphStyle("caption", parent=base, fontSize=8, leading=10.5,
                                  textColor=colors.HexColor("#333333")),
        "absent": ParagraphStyle("absent", parent=base, fontName="DejaVu-Oblique", textColor=colors.HexColor("#555555"),
                                 leftIndent=10, borderPadding=4),
        "cell": ParagraphStyle("cell", parent=base, fontSize=7.2, leading=9, spaceAfter=0),
        "cellb": ParagraphStyle("cellb", parent=base, fontName="DejaVu-Bold", fontSize=7.2, leading=9, spaceAfter=0),
        "bullet": ParagraphStyle("bullet", parent=base, leftIndent=12, bulletIndent=2),
        "banner": ParagraphStyle("banner", parent=base, fontName="DejaVu-Bold", fontSize=10, leading=13.5,
                                 textColor=colors.HexColor("#7a1010"), backColor=colors.HexColor("#fdecea"),
                                 borderColor=colors.HexColor("#c0392b"), borderWidth=1, borderPadding=7,
                                 spaceBefore=8, spaceAfter=12),
        "mono": ParagraphStyle("mono", parent=base, fontName="DejaVuMono", fontSize=6.5, leading=8),
    }


def esc(text: Any) -> str:
    """Text escaped for reportlab's paragraph markup."""
    return html.escape(str(text), quote=False)


class _Heading(Paragraph):
    """A paragraph that also adds a PDF bookmark (outline entry) at its level."""

    def __init__(self, text: str, style: ParagraphStyle, level: int, key: str) -> None:
        super().__init__(text, style)
        self.level, self.key, self.plain = level, key, text

    def draw(self) -> None:
        super().draw()
        canvas = self.canv
        canvas.bookmarkPage(self.key)
        canvas.addOutlineEntry(html.unescape(self.plain), self.key, level=self.level, closed=self.level > 0)


class _PageMark(Flowable):
    """Takes no room; remembers the page it was drawn on (where a section began)."""

    def __init__(self) -> None:
        super().__init__()
        self.page: int | None = None

    def wrap(self, avail_width: float, avail_height: float) -> tuple[float, float]:
        return 0, 0

    def draw(self) -> None:
        self.page = self.canv.getPageNumber()


class _NewPageUnlessSpilled(CondPageBreak):
    """A page break, unless the section that began at ``mark`` has spilled onto the page this lands on: then what
    follows uses the rest of that page (a few lines of bullets would otherwise have a page to themselves)."""

    def __init__(self, mark: _PageMark) -> None:
        super().__init__(0)
        self.mark = mark

    def wrap(self, avail_width: float, avail_height: float) -> tuple[float, float]:
        canv = getattr(self, "canv", None)  # set by the frame's wrapOn; without it, a plain page break
        spilled = canv is not None and self.mark.page is not None and canv.getPageNumber() != self.mark.page
        self.height = 0 if spilled else avail_height + 1  # more than is left: the next page
        return super().wrap(avail_width, avail_height)  # type: ignore[no-any-return]


class PdfWriter:
    """Accumulates the report's flowables, then writes the PDF."""

    def __init__(self, title: str, footer: str) -> None:
        _register_fonts()
        self.title, self.footer = title, footer
        self.styles = _styles()
        self.story: list[Flowable] = []
        self._n = 0
        self._level = -1

    def _key(self) -> str:
        self._n += 1
        return f"h{self._n}"

    def heading(self, text: str, level: int) -> None:
        """A heading at ``level`` (0: section, 1: subsection, 2: minor), bookmarked in the PDF outline."""
        # the outline may not skip a level: clamp to one below the last heading
        level = min(level, self._level + 1)
        self._level = level
        style = self.styles[("h1", "h2", "h3")[min(level, 2)]]
        self.story.append(_Heading(esc(text), style, level, self._key()))

    def title_block(self, title: str, lines: Sequence[str]) -> None:
        """The report's title and its subtitle lines."""
        self.story.append(Paragraph(esc(title), self.styles["title"]))
        for line in lines:
            self.story.append(Paragraph(line, self.styles["subtitle"]))

    def para(self, markup: str, style: str = "body") -> None:
        """A paragraph (``markup`` may hold <b>/<i>; escape plain text with :func:`esc`)."""
        self.story.append(Paragraph(markup, self.styles[style]))

    def banner(self, text: str) -> None:
        """A boxed warning the reader cannot miss."""
        self.story.append(Paragraph(esc(text), self.styles["banner"]))

    def bullets(self, items: Sequence[str]) -> None:
        """A bulleted list (items are escaped)."""
        for item in items:
            self.story.append(Paragraph(esc(item), self.styles["bullet"], bulletText="•"))

    def mono(self, text: str) -> None:
        """Preformatted monospace text (e.g. a resolved experiment spec)."""
        self.story.append(Preformatted(text, self.styles["mono"]))

    def kv(self, rows: Sequence[tuple[str, str]]) -> None:
        """A two-column label/value table."""
        data = [[Paragraph(esc(k), self.styles["cellb"]), Paragraph(esc(v), self.styles["cell"])] for k, v in rows]
        t = RLTable(data, colWidths=[4.2 * cm, TEXT_WIDTH - 4.2 * cm], hAlign="LEFT")
        t.setStyle(TableStyle([("VALIGN", (0, 0), (-1, -1), "TOP"),
                               ("LINEBELOW", (0, 0), (-1, -1), 0.25, colors.lightgrey),
                               ("BOTTOMPADDING", (0, 0), (-1, -1), 2), ("TOPPADDING", (0, 0), (-1, -1), 2)]))
        self.story.append(t)
        self.story.append(Spacer(1, 6))

    def table(self, table: Table, col_widths: Sequence[float] | None = None) -> None:
        """A data table with a repeated header row, zebra rows and its note underneath."""
        header = [Paragraph(esc(h), self.styles["cellb"]) for h in table.headers]
        body = [[Paragraph(esc(v), self.styles["cell"]) for v in row] for row in table.rows]
        t = RLTable([header, *body], colWidths=col_widths, repeatRows=1, hAlign="LEFT")
        style = [("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#dfe7ef")),
                 ("VALIGN", (0, 0), (-1, -1), "TOP"), ("LINEBELOW", (0, 0), (-1, 0), 0.6, colors.grey),
                 ("TOPPADDING", (0, 0), (-1, -1), 1.5), ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5),
                 ("LEFTPADDING", (0, 0), (-1, -1), 3), ("RIGHTPADDING", (0, 0), (-1, -1), 3)]
        for i in range(2, len(body) + 1, 2):
            style.append(("BACKGROUND", (0, i), (-1, i), colors.HexColor("#f5f7f9")))
        t.setStyle(TableStyle(style))
        self.story.append(t)
        if table.note:
            self.story.append(Paragraph(esc(table.note), self.styles["caption"]))
        self.story.append(Spacer(1, 8))

    def figure(self, png: Path, title: str, caption: str, notes: Sequence[str] = ()) -> None:
        """A figure scaled to the text width, kept together with its title and caption."""
        from PIL import Image as PILImage  # matplotlib depends on Pillow, so it is always there

        with PILImage.open(png) as im:
            w_px, h_px = im.size
        width = min(TEXT_WIDTH, w_px / 200 * 72)  # 200 dpi PNG: never upscale a narrow figure
        height = width * h_px / w_px
        if height > FIGURE_MAX_HEIGHT:  # a tall figure (one panel per framework and study line) fits one page
            width, height = width * FIGURE_MAX_HEIGHT / height, FIGURE_MAX_HEIGHT
        parts: list[Flowable] = [Paragraph(f"<b>{esc(title)}</b>", self.styles["body"]),
                                 Image(str(png), width=width, height=height),
                                 Paragraph(esc(caption), self.styles["caption"])]
        parts += [Paragraph(esc(n), self.styles["caption"]) for n in notes]
        self.story.append(KeepTogether(parts))
        self.story.append(Spacer(1, 8))

    def absent(self, title: str, reason: str) -> None:
        """What stands in place of a figure whose data is absent: its title and the sentence saying why."""
        self.story.append(KeepTogether([Paragraph(f"<b>{esc(title)}</b>", self.styles["body"]),
                                        Paragraph(esc(reason), self.styles["absent"])]))

    def page_break(self) -> None:
        """Start a new page."""
        self.story.append(PageBreak())

    def mark_page(self) -> _PageMark:
        """Mark where a section begins (for :meth:`new_page_unless_spilled`)."""
        mark = _PageMark()
        self.story.append(mark)
        return mark

    def new_page_unless_spilled(self, mark: _PageMark) -> None:
        """Start a new page, unless the section begun at ``mark`` already ran onto another page: then go on there."""
        self.story.append(_NewPageUnlessSpilled(mark))

    def _decorate(self, canvas: Any, doc: Any) -> None:
        canvas.saveState()
        canvas.setFont("DejaVu", 7)
        canvas.setFillColor(colors.grey)
        canvas.drawString(MARGIN, 1.0 * cm, self.footer[:150])
        canvas.drawRightString(A4[0] - MARGIN, 1.0 * cm, f"page {doc.page}")
        canvas.restoreState()

    def save(self, path: Path) -> None:
        """Write the PDF to ``path`` (the caller makes it atomic)."""
        doc = SimpleDocTemplate(str(path), pagesize=A4, leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN,
                                bottomMargin=MARGIN, title=self.title, author="batchscope",
                                subject="batch-size measurements", creator="batchscope report",
                                creationDate=dt.datetime.now(dt.timezone.utc))
        doc.build(list(self.story), onFirstPage=self._decorate, onLaterPages=self._decorate)
