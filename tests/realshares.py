"""Real shares built from Debian documentation packages and PyPI sdists.

Used by ``tests/bench/real_shares.py`` and ``tests/real/``. A share is a
deterministic subset of one package's documents, copied (never linked: kbsync
follows symlinks only inside a root, and mutations must not touch the cache)
into a folder of its own with the package's relative paths.

Downloads go to a cache outside the repository, ``$KBSYNC_REAL_SHARES_CACHE``
or ``~/.cache/kbsync-real-shares``: ``debs/`` holds the ``.deb`` files,
``pkgs/<package>/`` their extracted trees, ``sdist/`` the sdists. A package is
downloaded and extracted once; a tree is only trusted once its ``.complete``
marker exists, so an interrupted extraction is redone.

Limits: ``.deb`` packages need ``apt-get`` and ``dpkg-deb`` run as root (CI
runs as root on a fresh machine); :class:`FetchUnavailable` says when they are
missing. Any other failure (no candidate after ``apt-get update``, a failed
download) raises :class:`subprocess.CalledProcessError` or
:class:`FetchFailed`: loudly, never a silent skip.

Held-out packages (kept for acceptance) are refused by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

#: Never used for tests, benchmarks or tuning: acceptance keeps them.
HELD_OUT = frozenset({
    "python3.11-doc", "debian-faq-zh-cn", "debian-reference-zh-cn", "maint-guide-zh-cn",
    "libreoffice-help-zh-cn",
})


class FetchUnavailable(RuntimeError):
    """The tools to fetch a package are not here (no apt-get/dpkg-deb, or not root)."""


class FetchFailed(RuntimeError):
    """A fetch was possible but did not produce the package."""


@dataclass(frozen=True)
class ShareSpec:
    """Where a share's documents come from.

    Attributes:
        name: short name used on the command line and in tables.
        source: ``deb`` (a Debian package) or ``sdist`` (PyPI source archives).
        packages: Debian package names or PyPI project names.
        under: path prefixes inside the extracted tree(s) to take files from.
        suffixes: lower-case file suffixes to take.
        note: what the share stands for.
    """

    name: str
    source: str
    packages: tuple[str, ...]
    under: tuple[str, ...]
    suffixes: tuple[str, ...]
    note: str


SPECS: dict[str, ShareSpec] = {s.name: s for s in (
    ShareSpec("postgresql-html", "deb", ("postgresql-doc-15",),
              ("usr/share/doc/postgresql-doc-15/html",), (".html",), "PostgreSQL 15 manual"),
    ShareSpec("git-html", "deb", ("git-doc",), ("usr/share/doc/git-doc",), (".html",),
              "git manual pages as HTML"),
    ShareSpec("octave-html", "deb", ("octave-doc",), ("usr/share/doc/octave",), (".html",),
              "GNU Octave manual"),
    ShareSpec("texlive-pdf", "deb", ("texlive-latex-base-doc",), ("usr/share/doc",),
              (".pdf",), "LaTeX base documentation PDFs (odd fonts)"),
    ShareSpec("texlive-zh-pdf", "deb", ("texlive-lang-chinese",), ("usr/share/doc",),
              (".pdf",), "Chinese TeX package documentation PDFs"),
    ShareSpec("handbook-zh-html", "deb", ("debian-handbook",),
              ("usr/share/doc/debian-handbook/html/zh-CN",), (".html",),
              "Debian Administrator's Handbook, zh-CN"),
    ShareSpec("handbook-en-html", "deb", ("debian-handbook",),
              ("usr/share/doc/debian-handbook/html/en-US",), (".html",),
              "Debian Administrator's Handbook, en-US: the zh-CN share's pages in English"),
    ShareSpec("linux-zh-html", "deb", ("linux-doc-6.1",),
              ("usr/share/doc/linux-doc-6.1/html/translations/zh_CN",), (".html",),
              "Linux kernel documentation, zh_CN translation"),
    ShareSpec("office", "sdist", ("python-docx", "python-pptx", "pypdf"), ("",),
              (".docx", ".pptx", ".xlsx", ".pdf"),
              "test documents of the python-docx, python-pptx and pypdf sdists"),
)}


def cache_dir() -> Path:
    """The download cache (created): ``$KBSYNC_REAL_SHARES_CACHE`` or ``~/.cache/...``."""
    path = Path(os.environ.get("KBSYNC_REAL_SHARES_CACHE")
                or Path.home() / ".cache" / "kbsync-real-shares")
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_deb_tools() -> None:
    """Raise :class:`FetchUnavailable` unless apt-get and dpkg-deb can run as root here."""
    missing = [tool for tool in ("apt-get", "apt-cache", "dpkg-deb") if shutil.which(tool) is None]
    if missing:
        raise FetchUnavailable(f"{', '.join(missing)} not found: not a Debian-like machine")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise FetchUnavailable("apt-get download needs root here (CI runs as root)")


def _has_candidate(package: str) -> bool:
    out = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True,
                         check=False).stdout
    line = next((ln for ln in out.splitlines() if "Candidate:" in ln), "")
    return bool(line) and "(none)" not in line


def fetch_deb(package: str) -> Path:
    """The extracted tree of Debian ``package`` (downloaded and extracted once).

    Raises:
        ValueError: a held-out package.
        FetchUnavailable: no apt tools or not root.
        FetchFailed / subprocess.CalledProcessError: the download or extraction failed.
    """
    if package in HELD_OUT:
        raise ValueError(f"{package} is held out for acceptance: never use it")
    tree = cache_dir() / "pkgs" / package
    if (tree / ".complete").exists():
        return tree
    check_deb_tools()
    debs = cache_dir() / "debs"
    debs.mkdir(exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        if not _has_candidate(package):
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        if not _has_candidate(package):
            raise FetchFailed(f"apt has no candidate for {package} even after apt-get update")
        # -o ... keeps apt from warning that _apt cannot write to a root-owned cache.
        subprocess.run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", package],
                       cwd=debs, check=True, capture_output=True)
        found = sorted(debs.glob(f"{package}_*.deb"))
        if not found:
            raise FetchFailed(f"apt-get download {package} left no .deb in {debs}")
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(tree)], check=True, capture_output=True)
    (tree / ".complete").touch()
    return tree


def fetch_sdist(project: str) -> Path:
    """The extracted sdist of PyPI ``project`` (``pip download --no-binary :all:``, once).

    Raises:
        FetchFailed / subprocess.CalledProcessError: pip failed or left no archive.
    """
    sdist = cache_dir() / "sdist"
    sdist.mkdir(exist_ok=True)
    stem = project.replace("-", "_").lower()
    tree = sdist / f"{stem}.tree"
    if (tree / ".complete").exists():
        return tree
    archives = [p for p in sdist.glob("*.tar.gz") if p.name.lower().replace("-", "_").startswith(stem + "_")]
    if not archives:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", "-d", str(sdist), project],
                       check=True, capture_output=True)
        archives = [p for p in sdist.glob("*.tar.gz")
                    if p.name.lower().replace("-", "_").startswith(stem + "_")]
    if not archives:
        raise FetchFailed(f"pip download {project} left no sdist in {sdist}")
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir()
    with tarfile.open(sorted(archives)[-1]) as tar:
        tar.extractall(tree, filter="data")
    (tree / ".complete").touch()
    return tree


def source_files(spec: ShareSpec) -> list[tuple[Path, str]]:
    """Every candidate document of ``spec`` as (absolute path, share-relative path), sorted."""
    found: list[tuple[Path, str]] = []
    for package in spec.packages:
        tree = fetch_deb(package) if spec.source == "deb" else fetch_sdist(package)
        prefix = package if spec.source == "sdist" else ""
        for under in spec.under:
            base = tree / under if under else tree
            for path in sorted(base.rglob("*")):
                if path.is_file() and not path.is_symlink() and path.suffix.lower() in spec.suffixes:
                    rel = path.relative_to(base).as_posix()
                    found.append((path, f"{prefix}/{rel}" if prefix else rel))
    return found


def spread(items: list, count: int | None) -> list:
    """``count`` items spread evenly over ``items`` (all when count is None or large), in order."""
    if count is None or count >= len(items):
        return list(items)
    if count <= 0:
        return []
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


def build_share(spec: ShareSpec, dest: Path, max_files: int | None = None) -> list[str]:
    """Copy up to ``max_files`` documents of ``spec`` (evenly spread, deterministic) to ``dest``.

    Returns:
        The share-relative paths copied, sorted.

    Raises:
        FileExistsError: ``dest`` exists and is not empty.
    """
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty")
    chosen = spread(source_files(spec), max_files)
    for src, rel in chosen:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    return sorted(rel for _, rel in chosen)


def unused_files(spec: ShareSpec, used: set[str], count: int) -> list[tuple[Path, str]]:
    """Up to ``count`` documents of ``spec`` not in ``used`` (to add to a share)."""
    return spread([item for item in source_files(spec) if item[1] not in used], count)
