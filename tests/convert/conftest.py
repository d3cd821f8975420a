"""Fixtures that build real files (PDF, OOXML, zips) in tmp_path for the conversion tests."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pymupdf
import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"


def pdf_bytes(pages: int = 3, *, distinct: int = 10, image_only: bool = False, blank: bool = False,
              user_pw: str | None = None, owner_pw: str | None = None) -> bytes:
    """A text PDF with a large bold heading and 40 body lines per page.

    Pages repeat a set of ``distinct`` pages (inserting copies is ~10x faster than drawing
    300 pages of text).
    """
    src = pymupdf.open()
    for i in range(min(pages, distinct)):
        page = src.new_page()
        if image_only:
            pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 64), False)
            pix.set_rect(pix.irect, (120, 160, 200))
            page.insert_image(pymupdf.Rect(72, 72, 400, 400), pixmap=pix)
        elif not blank:
            page.insert_text((72, 72), f"Chapter {i + 1}: Operations", fontsize=18, fontname="hebo")
            body = [f"Line {n} of chapter {i + 1} covers deployment, billing and security."
                    for n in range(40)]
            page.insert_text((72, 110), body, fontsize=10)
    doc = pymupdf.open()
    while doc.page_count < pages:
        doc.insert_pdf(src, to_page=min(src.page_count, pages - doc.page_count) - 1)
    if user_pw or owner_pw:
        return doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw=user_pw or "",
                           owner_pw=owner_pw or user_pw)
    return doc.tobytes(garbage=1)


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in members.items():
            zf.writestr(name, body)
    return buf.getvalue()


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, bytes | str], Path]:
    """write(name, content) -> path of a new file in tmp_path (str content as UTF-8)."""

    def _write(name: str, content: bytes | str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return path

    return _write


@pytest.fixture
def make_pdf() -> Callable[..., bytes]:
    """The :func:`pdf_bytes` factory (fixtures, not imports: conftest modules share a name)."""
    return pdf_bytes


@pytest.fixture
def make_zip() -> Callable[[dict[str, bytes]], bytes]:
    """The :func:`zip_bytes` factory."""
    return zip_bytes
