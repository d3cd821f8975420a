"""Build kbsync's labelled retrieval sets from real Debian documentation packages.

Two sets, each a share of real documents plus a JSONL query file
(``{"query": ..., "relevant": [doc_id]}``) committed beside this script:

* **English** (``en_rfaq_git.jsonl``, root name ``en``): the questions of the R FAQ
  (r-doc-html) and of gitfaq (git-doc) become queries and their answers, with the
  question removed, become documents; the one-line NAME descriptions of Git's manual
  pages become queries for those pages (HTML, with the NAME section removed).
  Distractors: the other R manuals and the rest of git-doc's HTML pages.
* **Chinese** (``zh_manpages.jsonl``, root name ``zh``): the Chinese one-line
  descriptions (名称) of the manual pages in manpages-zh become queries for those
  pages, rendered to Markdown with the 名称 section removed. Every other page of the
  package is a distractor.

The packages are pinned (``PACKAGES``) and fetched with ``apt-get download``, so the
shares are rebuilt byte for byte; they are not committed (they are the packages'
text). None of the packages held out for acceptance is used.

Usage::

    python data/eval/build_sets.py --out ~/.cache/kbsync-eval
    kbsync ingest en=~/.cache/kbsync-eval/en --namespace eval-en
    kbsync eval data/eval/en_rfaq_git.jsonl --namespace eval-en --modes dense,hybrid -k 10
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import logging
import random
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("build_sets")
HERE = Path(__file__).resolve().parent
PACKAGES = {
    "r-doc-html": "4.2.2.20221110-2",
    "git-doc": "1:2.39.5-0+deb12u3",
    "manpages-zh": "1.6.4.0-1",
}
SEED = 20261201  # which manual pages become queries: fixed, so the sets are stable
MAX_GIT_PAGE_QUERIES = 100
MAX_ZH_QUERIES = 150
ZH_DISTRACTORS = 200  # pages without a query; more would only slow every evaluation down
# The user-facing R manuals (R-exts and R-ints, ~1.5 MB of internals, are left out for time).
R_DISTRACTORS = ("R-intro.html", "R-admin.html", "R-data.html", "R-lang.html")
_CJK = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class Labelled:
    """One query and the doc_id that answers it."""

    query: str
    doc_id: str

    def to_json(self) -> str:
        return json.dumps({"query": self.query, "relevant": [self.doc_id]}, ensure_ascii=False)


# --- fetching ----------------------------------------------------------------------------------
def fetch(package: str, cache: Path) -> Path:
    """Extract the pinned ``package`` under ``cache`` (downloaded once) and return the folder."""
    target = cache / "pkg" / package
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        spec = f"{package}={PACKAGES[package]}"
        subprocess.run(["apt-get", "download", spec], cwd=tmp, check=True,
                       capture_output=True, text=True)
        (deb,) = Path(tmp).glob("*.deb")
        partial = target.with_suffix(".partial")
        partial.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(partial)], check=True)
        partial.rename(target)
    return target


# --- English: R FAQ ----------------------------------------------------------------------------
_R_HEADING = re.compile(r"<h([34])[^>]*>(?P<title>.*?)</h\1>", re.S)
_R_SECTION_END = re.compile(r'<div class="(?:section|subsection|chapter|header)"|<h[234]')


def _text(fragment: str) -> str:
    """HTML fragment to plain text (paragraphs kept, tags dropped)."""
    fragment = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", fragment, flags=re.S)
    fragment = re.sub(r"<(?:p|br|div|pre|li|tr|h\d)[^>]*>", "\n", fragment)
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment))
    lines = [line.rstrip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def r_faq(pkg: Path, share: Path) -> list[Labelled]:
    """Each R FAQ question -> a Markdown answer document without the question."""
    manual = pkg / "usr/share/R/doc/manual"
    source = (manual / "R-FAQ.html").read_text(encoding="utf-8")
    labelled = []
    for match in _R_HEADING.finditer(source):
        title = " ".join(_text(match["title"]).split())
        number, _, question = title.partition(" ")
        if not question.endswith("?"):
            continue
        end = _R_SECTION_END.search(source, match.end())
        body = _text(source[match.end():end.start() if end else len(source)])
        if len(body) < 40:
            continue
        rel = f"rfaq/{number}.md"
        (share / rel).parent.mkdir(parents=True, exist_ok=True)
        (share / rel).write_text(f"# R FAQ {number}\n\n{body}\n", encoding="utf-8")
        labelled.append(Labelled(question, f"en/{rel}"))
    (share / "rman").mkdir(parents=True, exist_ok=True)
    for other in sorted(manual.glob("R-*.html")):  # distractors, as the real HTML
        if other.name in R_DISTRACTORS:
            shutil.copyfile(other, share / "rman" / other.name)
    return labelled


# --- English: Git --------------------------------------------------------------------------------
_FAQ_ITEM = re.compile(r"^\[\[(?P<anchor>[\w-]+)\]\]\n(?P<question>.+?)::\n(?P<body>.*?)"
                       r"(?=^\[\[|^[A-Z][^\n]*\n-{3,}\n|\Z)", re.S | re.M)
_GIT_NAME = re.compile(r"<h2>NAME</h2>\s*<div class=\"sectionbody\">\s*<p>(?P<desc>.*?)</p>"
                       r"\s*</div>", re.S)


def git_faq(pkg: Path, share: Path) -> list[Labelled]:
    """gitfaq's questions -> answer documents (AsciiDoc text as Markdown-ish text)."""
    source = (pkg / "usr/share/doc/git-doc/gitfaq.txt").read_text(encoding="utf-8")
    labelled = []
    for match in _FAQ_ITEM.finditer(source):
        question = match["question"].replace("`", "").strip()
        body = re.sub(r"^\+$", "", match["body"], flags=re.M).strip()
        body = re.sub(r"linkgit:([\w-]+)\[\d\]", r"\1", body)
        rel = f"gitfaq/{match['anchor']}.md"
        (share / rel).parent.mkdir(parents=True, exist_ok=True)
        (share / rel).write_text(f"# Git FAQ: {match['anchor']}\n\n{body}\n", encoding="utf-8")
        labelled.append(Labelled(question, f"en/{rel}"))
    return labelled


def git_pages(pkg: Path, share: Path, rng: random.Random) -> list[Labelled]:
    """Git's HTML pages; for a sample, the NAME description is the query and is removed."""
    docs = pkg / "usr/share/doc/git-doc"
    (share / "git").mkdir(parents=True, exist_ok=True)
    candidates = []
    for page in sorted(docs.glob("*.html")):
        text = page.read_text(encoding="utf-8", errors="replace")
        match = _GIT_NAME.search(text) if page.name.startswith("git-") else None
        if match is None:
            shutil.copyfile(page, share / "git" / page.name)  # a distractor, unchanged
            continue
        _, _, desc = " ".join(_text(match["desc"]).split()).partition(" - ")
        desc = " ".join(desc.split())
        candidates.append((page, text, match, desc))
    chosen = {c[0].name for c in rng.sample(candidates, min(MAX_GIT_PAGE_QUERIES,
                                                              len(candidates)))}
    labelled = []
    for page, text, match, desc in candidates:
        if page.name in chosen and len(desc.split()) >= 3:
            text = text[:match.start()] + text[match.end():]
            labelled.append(Labelled(desc, f"en/git/{page.name}"))
        (share / "git" / page.name).write_text(text, encoding="utf-8")
    return labelled


# --- Chinese: manpages-zh ------------------------------------------------------------------------
_NAME_SECTIONS = ("名称", "名字", "NAME", "名 称")


def roff_to_markdown(source: str) -> tuple[str, str]:
    """A man page (roff) as Markdown, and its NAME line (``cmd - description``).

    Only what man pages use: ``.SH``/``.SS`` headings, paragraphs, font escapes.
    The NAME section is returned apart and left out of the Markdown.
    """
    out: list[str] = []
    name_lines: list[str] = []
    in_name = False
    for raw in source.splitlines():
        if raw.startswith(('.\\"', "'\\\"")):
            continue
        line = _roff_inline(raw)
        if raw.startswith((".SH", ".SS")):
            parts = line.split(None, 1)
            title = parts[1].strip().strip('"') if len(parts) > 1 else ""
            in_name = title in _NAME_SECTIONS
            if not in_name:
                out.append(f"\n{'##' if raw.startswith('.SH') else '###'} {title}\n")
            continue
        if raw.startswith("."):
            request = raw[1:3]
            parts = line.split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            if request in ("PP", "LP", "P", "TP", "IP", "sp", "br"):
                out.append("")
                if request == "IP" and rest:
                    out.append(rest.strip('"'))
            elif request in ("B", "I", "BI", "IB", "BR", "RB", "IR", "RI") and rest:
                (name_lines if in_name else out).append(rest.replace('"', ""))
            continue
        (name_lines if in_name else out).append(line)
    markdown = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    return markdown, " ".join(" ".join(name_lines).split())


def _roff_inline(text: str) -> str:
    text = re.sub(r"\\f(?:\[[^\]]*\]|\(..|.)", "", text)
    text = re.sub(r"\\[/,&]", "", text)
    return (text.replace("\\-", "-").replace("\\(em", "—").replace("\\e", "\\")
            .replace("\\ ", " ").replace("\\(co", "©"))


def zh_manpages(pkg: Path, share: Path, rng: random.Random) -> list[Labelled]:
    """Every zh_CN man page as Markdown; a sample's 名称 description is the query."""
    candidates, pages = [], {}
    for page in sorted((pkg / "usr/share/man/zh_CN").glob("man*/*.gz")):
        try:
            source = gzip.decompress(page.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            log.warning("skipping %s: not gzip'd UTF-8 roff", page.name)
            continue
        if source.startswith(".so "):
            continue  # an alias of another page
        markdown, name = roff_to_markdown(source)
        if len(markdown) < 80:
            continue
        rel = f"{page.parent.name}/{page.name[:-3]}.md"
        pages[rel] = f"# {page.name[:-3]}\n\n{markdown}\n"
        _, sep, desc = name.partition(" - ")
        desc = desc.strip()
        if sep and len(_CJK.findall(desc)) >= 4:
            candidates.append(Labelled(desc, f"zh/{rel}"))
    seen: dict[str, int] = {}
    for item in candidates:  # a description shared by two pages cannot be labelled
        seen[item.query] = seen.get(item.query, 0) + 1
    unique = [c for c in candidates if seen[c.query] == 1]
    chosen = sorted(rng.sample(unique, min(MAX_ZH_QUERIES, len(unique))), key=lambda x: x.doc_id)
    labelled_rels = {c.doc_id.removeprefix("zh/") for c in chosen}
    others = sorted(set(pages) - labelled_rels)
    keep = labelled_rels | set(rng.sample(others, min(ZH_DISTRACTORS, len(others))))
    for rel in sorted(keep):
        (share / rel).parent.mkdir(parents=True, exist_ok=True)
        (share / rel).write_text(pages[rel], encoding="utf-8")
    return chosen


# --- main --------------------------------------------------------------------------------------
def build(out: Path) -> dict[str, int]:
    """Build both shares under ``out`` and write the query files beside this script."""
    rng = random.Random(SEED)
    counts = {}
    en, zh = out / "en", out / "zh"
    for share in (en, zh):
        shutil.rmtree(share, ignore_errors=True)
        share.mkdir(parents=True)
    english = (r_faq(fetch("r-doc-html", out), en) + git_faq(fetch("git-doc", out), en)
               + git_pages(fetch("git-doc", out), en, rng))
    chinese = zh_manpages(fetch("manpages-zh", out), zh, rng)
    for name, items in (("en_rfaq_git.jsonl", english), ("zh_manpages.jsonl", chinese)):
        (HERE / name).write_text("".join(i.to_json() + "\n" for i in items), encoding="utf-8")
        counts[name] = len(items)
    counts["en_documents"] = sum(1 for p in en.rglob("*") if p.is_file())
    counts["zh_documents"] = sum(1 for p in zh.rglob("*") if p.is_file())
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path.home() / ".cache" / "kbsync-eval",
                        help="where the shares and downloaded packages go")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for key, value in build(args.out.expanduser()).items():
        log.info("%s: %d", key, value)


if __name__ == "__main__":
    main()
