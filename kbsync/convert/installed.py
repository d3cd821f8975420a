"""The installed version of a distribution, read without importing ``importlib.metadata``.

``importlib.metadata`` costs ~16 ms to import (it parses metadata with the ``email``
package). The converters' package needs one version when it is imported (html-to-markdown's,
part of the document fingerprint), and every ingest imports the converters, a no-op sync
included (issue 42). An installed wheel is a ``<name>-<version>.dist-info`` folder on
``sys.path`` whose ``METADATA`` file has a ``Version:`` header: this reads that header, in
the first ``sys.path`` entry that holds the distribution, as ``importlib.metadata`` does.
Anything else (an egg, two copies in one entry, no header) is asked of
``importlib.metadata``, which answers as before.
"""

from __future__ import annotations

import os
import re
import sys

_SEPARATORS = re.compile(r"[-_.]+")


def installed_version(name: str) -> str:
    """The version of distribution ``name`` (as ``importlib.metadata.version(name)``).

    Raises:
        importlib.metadata.PackageNotFoundError: ``name`` is not installed.
    """
    folders = _dist_info(_normalized(name))
    if len(folders) == 1:
        version = _version_header(os.path.join(folders[0], "METADATA"))
        if version:
            return version
    from importlib.metadata import version as metadata_version

    return metadata_version(name)


def _dist_info(normalized: str) -> list[str]:
    """The ``<name>-<version>.dist-info`` folders whose name is ``normalized``, in the first
    ``sys.path`` entry that has any."""
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as listing:
                found = [e.path for e in listing if e.name.endswith(".dist-info")
                         and _name_of(e.name) == normalized]
        except OSError:  # a zip file, a folder gone or unreadable
            continue
        if found:
            return found
    return []


def _name_of(folder: str) -> str:
    """The normalized distribution name of a ``<name>-<version>.dist-info`` folder."""
    return _normalized(folder.partition("-")[0])


def _normalized(name: str) -> str:
    """``name`` as dist-info folders spell it: runs of ``-_.`` one ``_``, lowercase."""
    return _SEPARATORS.sub("_", name).lower()


def _version_header(path: str) -> str | None:
    """The ``Version:`` header of a ``METADATA`` file, or None (unreadable, not there)."""
    try:
        with open(path, encoding="utf-8") as metadata:
            for line in metadata:
                if not line.strip():
                    return None  # the headers end at the first blank line
                key, _, value = line.partition(":")
                if key.strip().lower() == "version":
                    return value.strip() or None
    except (OSError, UnicodeDecodeError):
        return None
    return None
