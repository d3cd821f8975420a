"""The maintenance wing: verify, repair and rebuild a collection.

:mod:`~kbsync.maintenance.verify` (the thorough check, read only),
:mod:`~kbsync.maintenance.repair` (under the write lock, through ingest's own stages),
:mod:`~kbsync.maintenance.rebuild` and :mod:`~kbsync.maintenance.rebuild_checks` (a shadow
collection swapped in behind an evaluation gate), in the one order of
:mod:`~kbsync.maintenance.rebuild_runner` (its executors: in process,
:mod:`~kbsync.maintenance.rebuild_plain`, or ``flows.rebuild_executor``). It may import ingest, eval and catalog;
nothing below imports it (``tests/arch/test_layers.py``). Removing a root is a write path
of ingest (:mod:`kbsync.ingest.remove`): an ingest finishes interrupted removals and
``--rebind`` replaces a root through it.
"""
