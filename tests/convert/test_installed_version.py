"""kbsync.convert.installed answers as importlib.metadata does, without importing it (issue 42)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from kbsync.convert.installed import installed_version


def test_every_installed_distribution_reads_as_importlib_metadata_reads_it():
    names = sorted({d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]})
    assert len(names) > 50  # the project's environment, Prefect and the converters included
    differ = [(n, installed_version(n), metadata.version(n)) for n in names
              if installed_version(n) != metadata.version(n)]
    assert not differ


def test_importing_the_converters_leaves_importlib_metadata_unimported():
    """The converters' package is imported by every ingest, a no-op's included."""
    probe = ("import sys, kbsync.convert; "
             "print(sorted(m for m in ('importlib.metadata', 'email') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out
