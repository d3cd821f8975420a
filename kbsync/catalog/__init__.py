"""The catalog wing: what a collection is.

Its payload schema and point ids (:mod:`~kbsync.catalog.schema`), its state records and
fingerprints (:mod:`~kbsync.catalog.state`), what it is bound to: root bindings and the
embedder identity (:mod:`~kbsync.catalog.identity`, :mod:`~kbsync.catalog.overlap`,
:mod:`~kbsync.catalog.model_keep`), which physical collection is active
(:mod:`~kbsync.catalog.active`), the collection checks (:mod:`~kbsync.catalog.checks`) and
the one lock policy of its writers (:mod:`~kbsync.catalog.lock`).

Ingest and query are sibling wings above it; maintenance sits above ingest. The catalog
imports only the ground floor and the floors (store, text; embed lazily), never a wing
above it, ``tasks``, ``flows`` or Prefect: the distributed lock is injected
(``tests/arch/test_layers.py``).
"""
