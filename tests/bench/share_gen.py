"""Generate a share that looks like a real one: many formats, sizes, folders.

Deterministic for a given seed. Roughly: 45% Markdown, 15% text, 10% HTML,
8% CSV, 7% JSON, 7% PDF (3-20 pages), 5% DOCX, 3% source code. With
``office=False`` the PDF and DOCX shares are Markdown instead, for scale runs: 100k
files in 144 s on a loaded 2-core machine (~700 files/s; ~20 files/s with office files).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("deploy cluster billing invoice token rotate key policy incident outage latency "
         "replica shard backup restore schema migration queue worker retry timeout quota "
         "tenant namespace index search vector embedding chunk ingest pipeline release "
         "rollback canary audit access role permission secret vault metric alert dashboard").split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _paragraphs(rng: random.Random, count: int) -> list[str]:
    return [" ".join(_sentence(rng, rng.randint(8, 20)) for _ in range(rng.randint(2, 6)))
            for _ in range(count)]


def _markdown(rng: random.Random, i: int) -> str:
    parts = [f"# Topic {i}"]
    for s in range(rng.randint(1, 6)):
        parts.append(f"## Section {s}")
        parts += _paragraphs(rng, rng.randint(1, 5))
    return "\n\n".join(parts) + "\n"


def _pdf(path: Path, rng: random.Random, i: int) -> None:
    import pymupdf

    doc = pymupdf.open()
    for p in range(rng.randint(3, 20)):
        page = doc.new_page()
        page.insert_text((72, 72), f"Chapter {p + 1} of manual {i}", fontsize=18)
        y = 110
        for para in _paragraphs(rng, 3):
            box = pymupdf.Rect(72, y, 520, y + 200)
            page.insert_textbox(box, para, fontsize=10)
            y += 210
    doc.save(path)


def _docx(path: Path, rng: random.Random, i: int) -> None:
    import docx

    document = docx.Document()
    document.add_heading(f"Memo {i}", level=1)
    for para in _paragraphs(rng, rng.randint(2, 8)):
        document.add_paragraph(para)
    document.save(path)


def generate(root: Path, files: int, seed: int = 1, office: bool = True) -> Path:
    """Write ``files`` files under ``root`` (created) and return it.

    ``office=False`` writes Markdown where a PDF or DOCX would be (same names
    otherwise, same random stream up to that file).
    """
    rng = random.Random(seed)
    for i in range(files):
        folder = root / f"team{i % 13}" / f"area{i % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        roll = rng.random()
        if roll < 0.45:
            (folder / f"page{i}.md").write_text(_markdown(rng, i), encoding="utf-8")
        elif roll < 0.60:
            (folder / f"notes{i}.txt").write_text("\n\n".join(_paragraphs(rng, 4)), "utf-8")
        elif roll < 0.70:
            body = "".join(f"<h2>Part {k}</h2><p>{p}</p>"
                           for k, p in enumerate(_paragraphs(rng, 4)))
            (folder / f"wiki{i}.html").write_text(
                f"<html><head><title>Wiki {i}</title></head><body><nav>Home</nav>"
                f"<main><h1>Wiki {i}</h1>{body}</main><footer>(c)</footer></body></html>",
                encoding="utf-8")
        elif roll < 0.78:
            rows = ["id,owner,status,comment"] + [
                f"{r},{rng.choice(WORDS)},{rng.choice(['open', 'closed'])},{_sentence(rng, 8)}"
                for r in range(rng.randint(5, 80))]
            (folder / f"table{i}.csv").write_text("\n".join(rows), encoding="utf-8")
        elif roll < 0.85:
            data = {"service": f"svc-{i}", "owners": [rng.choice(WORDS) for _ in range(3)],
                    "description": " ".join(_paragraphs(rng, 2))}
            (folder / f"svc{i}.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
        elif roll < 0.97 and not office:
            (folder / f"page{i}.md").write_text(_markdown(rng, i), encoding="utf-8")
        elif roll < 0.92:
            _pdf(folder / f"manual{i}.pdf", rng, i)
        elif roll < 0.97:
            _docx(folder / f"memo{i}.docx", rng, i)
        else:
            (folder / f"tool{i}.py").write_text(
                f'"""Tool {i}."""\n\n\ndef run():\n    """{_sentence(rng, 10)}"""\n    return {i}\n',
                encoding="utf-8")
    return root
