"""How much of a page's ink the OCR'd words cover (did Tesseract read the whole page?), and
the page segmentation that follows from it (:data:`PSM`, :func:`incomplete`,
:func:`better_reading`).

Tesseract's confidence is the mean over the words it found; it says nothing of the words it
never found. A page segmentation that takes two lines of body text for an image, or a layout
it cannot split, leaves the page's confidence high while most of its text is missing. So
each OCR'd page is also measured here: the page (grayscale) is cut into square cells of
about 1/150 of its shorter side (16 px at 300 dpi, 1.4 mm), a cell is *ink* when at least
:data:`INK_SHARE` of its pixels are dark, and the coverage is the share of ink cells that
some recognised word's box overlaps. A page under :data:`MIN_COVERAGE` is named in the
document's warnings.

Limits: cells over :data:`SOLID_SHARE` dark (solid fills, photographs' dark areas, thick
rules) are left out, but a drawing, a photo's lighter areas or a stamp still count as ink:
such a page can be flagged although all its text was read (the warning says "may").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# numpy is imported by the functions that measure a page, not here: the converters' package
# imports this module, and so does every ingest (a no-op one converts nothing).

DARK = 128
"""A pixel darker than this (0-255 gray) is ink."""
INK_SHARE = 0.02
"""A cell with at least this share of dark pixels holds ink (a few stray pixels do not)."""
SOLID_SHARE = 0.6
"""A cell over this share of dark pixels is a fill or a picture, not text: left out."""
MIN_COVERAGE = 0.6
"""Pages whose recognised words cover less of their ink than this are flagged. Whole-page
reads measured 0.90-1.00 on the layouts of ``tests/bench/ocr_bench.py``; the three-line
Chinese scan of the tests, read by psm 3 alone (nothing whole), 0.21 and 0.34."""

# Page segmentation (tesseract --psm), measured by tests/bench/ocr_bench.py --layouts: five
# layouts (single column, title + paragraphs, two columns, table, sparse lines) x English,
# Chinese x 200, 300 dpi, generated scans read with eng+chi_sim (Tesseract 5.3.0; two runs,
# the last two columns in the second; load average 5-14, so the seconds are noise-bound):
#   psm              3      4      6     11    3,4    3,6  3,4,6
#   mean recall   89.2%  94.2%  97.9%  97.2%  94.2%  97.9%  97.9%  (characters of the lines)
#   worst page     0.0%  15.8%  89.5%  85.5%  15.8%  89.5%  89.5%  (a Chinese table, 200 dpi)
#   in order      87.7%  87.4%  91.0%  90.7%  94.1%  97.7%  97.8%  (2 columns read across: ~63%)
#   mean s         2.75   2.39   1.91   1.99   3.37   3.89   3.83   (per page)
# English pages: 99.6-100% with every mode (a two-column page in order with 3 only).
# Tesseract's default (3, automatic layout) keeps columns apart and in order, but drops or
# misreads whole lines of Chinese pages (a title read as Latin letters; nothing at all from
# a table or from short sparse lines). 6 (one uniform block) reads every layout best alone,
# but reads two columns across, a line of each glued together; 4 (one column) reads some
# pages 6 misses (the tests' three-line Chinese scan at 300 dpi: its title). So 3, then 4,
# then 6, each only while the best reading still looks incomplete: the recall of 6 with the
# column order of 3. A second run was needed on 7 of these 20 pages (6 of the 10 Chinese
# ones, an English table), a third on fewer.
PSM: tuple[int, ...] = (3, 4, 6)
RETRY_COVERAGE = 0.9
RETRY_CONFIDENCE = 85.0
"""A reading under either is read again with the next page segmentation (whole-page reads
measured coverage 0.90-1.00 and confidence 85-96, Chinese tables 80-89; readings that had
lost lines: coverage 0.04-0.76, or coverage 0.95 with confidence 67)."""
BETTER_BY = 1.05
"""A later reading replaces the first only when its score is over 5% higher: a two-column
page read across scored 3% more than read column by column."""

Box = tuple[int, int, int, int]
"""A word's box in pixels: left, top, width, height (Tesseract's TSV columns)."""


def gray_pixels(samples: bytes, width: int, height: int, stride: int) -> np.ndarray:
    """A grayscale pixmap's samples (one byte a pixel, rows ``stride`` bytes apart) as an array."""
    import numpy as np

    return np.frombuffer(samples, dtype=np.uint8).reshape(height, stride)[:, :width]


def cell_size(gray: np.ndarray) -> int:
    return max(4, min(gray.shape) // 150)


def ink_coverage(gray: np.ndarray, boxes: list[Box]) -> float:
    """The share of the page's ink cells that the word ``boxes`` overlap (1.0 on a blank page).

    Invariant: 0.0 <= result <= 1.0; no boxes on a page with ink gives 0.0.
    """
    import numpy as np

    cell = cell_size(gray)
    rows, cols = -(-gray.shape[0] // cell), -(-gray.shape[1] // cell)
    dark = np.zeros((rows * cell, cols * cell), dtype=np.uint16)
    dark[:gray.shape[0], :gray.shape[1]] = gray < DARK
    counts = dark.reshape(rows, cell, cols, cell).sum(axis=(1, 3))
    area = cell * cell
    ink = (counts >= INK_SHARE * area) & (counts <= SOLID_SHARE * area)
    total = int(ink.sum())
    if total == 0:
        return 1.0
    covered = np.zeros_like(ink)
    for left, top, width, height in boxes:
        if width <= 0 or height <= 0:
            continue
        covered[top // cell:(top + height - 1) // cell + 1, left // cell:(left + width - 1) // cell + 1] = True
    return float((ink & covered).sum()) / total


def incomplete(coverage: float, confidence: float) -> bool:
    """Whether a page's reading may have missed or misread lines (worth another reading)."""
    return coverage < RETRY_COVERAGE or confidence < RETRY_CONFIDENCE


def better_reading(candidate: tuple[float, float], best: tuple[float, float] | None) -> bool:
    """Whether ``candidate`` (coverage, confidence) beats ``best``: coverage x confidence,
    roughly the share of the ink read right, over :data:`BETTER_BY` times higher."""
    if best is None:
        return True
    return candidate[0] * candidate[1] > BETTER_BY * best[0] * best[1]


def coverage_warning(pages: dict[int, float]) -> str | None:
    """The document warning naming its pages under :data:`MIN_COVERAGE`, or None.

    Args:
        pages: page number -> coverage, for each OCR'd page.
    """
    low = sorted(n for n, c in pages.items() if c < MIN_COVERAGE)
    if not low:
        return None
    shown = ", ".join(f"page {n} ({pages[n]:.0%})" for n in low[:10])
    more = f" and {len(low) - 10} more" if len(low) > 10 else ""
    return (f"OCR may have missed text on {len(low)} page(s): the words it read cover under "
            f"{MIN_COVERAGE:.0%} of the ink on {shown}{more}")
