"""The per-document write order: upsert new points, delete stale ones, commit state.

Invariant: until a document's state is committed, its previous version stays
searchable; a crash at any point leaves the old state, and re-running redoes the
document idempotently because point ids are deterministic (uuid5 over namespace,
doc_id, chunk index, text hash: :func:`kbsync.catalog.schema.point_id`). Nothing here
deletes a document because something failed. Tested by (a store failure between upsert
and commit; the re-run converges on a clean run's index)
``tests/ingest/test_runner.py::test_a_failure_between_upsert_and_commit_converges_on_rerun``
and (a failed file keeps its previous version, searchable)
``tests/ingest/test_sync.py::test_failing_file_keeps_its_previous_version``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from kbsync.catalog.access import record_profiles
from kbsync.catalog.schema import PreparedDoc, build_points, stored_indexed_text
from kbsync.catalog.state import StateStore, utc_now
from kbsync.models import DocState, DocStatus, SourceFile
from kbsync.store.base import Filter, Match, Point, VectorStore
from kbsync.text.sparse import SparseEncoder

if TYPE_CHECKING:
    from kbsync.embed.base import Embedder
    from kbsync.embed.service import EmbedOutcome

log = logging.getLogger(__name__)


def write_document(
    doc: PreparedDoc,
    *,
    store: VectorStore,
    states: StateStore,
    collection: str,
    namespace: str,
    fingerprint: str,
    run_id: str,
    sparse: SparseEncoder,
) -> DocState:
    """Replace one document in the store, in the crash-safe order.

    1. upsert the new points (old and new coexist: the old version still answers);
    2. delete this document's points that are not in the new set;
    3. commit the state record.

    ``fingerprint`` is the document's own (:func:`kbsync.catalog.state.document_fingerprint`),
    recorded with its ``scanned_pages``.

    Returns:
        The committed state.
    Raises:
        KbsyncError: a store failure; the previous state is then left as it was.
    """
    points = build_points(doc, namespace, sparse=sparse)
    record_profiles(states, [doc.source])  # before any point names it
    store.upsert(collection, points)
    keep = {p.id for p in points}
    flt = Filter.where(namespace=namespace, doc_id=doc.source.doc_id)
    stale = [p.id for p in store.scroll(collection, flt, with_payload=False) if p.id not in keep]
    if stale:
        store.delete_ids(collection, stale)
    state = DocState(
        doc_id=doc.source.doc_id, namespace=namespace, root=doc.source.root,
        path=doc.source.display, content_hash=doc.source.content_hash or "",
        fingerprint=fingerprint, chunk_count=len(points), status=doc.status,
        updated_at=utc_now(), run_id=run_id, size=doc.source.size,
        mtime_ns=doc.source.mtime_ns, scanned_pages=doc.scanned_pages, access=doc.source.access,
    )
    states.commit([state])
    log.debug("wrote %s: %d points, %d stale removed", doc.source.doc_id, len(points), len(stale))
    return state


def delete_documents(
    doc_ids: Sequence[str], *, store: VectorStore, states: StateStore, collection: str,
    namespace: str,
) -> int:
    """Remove documents: their points first, then their state records.

    A crash between the two leaves a record without points, which the next run
    sees as missing again and deletes idempotently.

    Returns:
        The number of documents removed.
    """
    for doc_id in doc_ids:
        store.delete(collection, Filter.where(namespace=namespace, doc_id=doc_id))
    states.remove(namespace, doc_ids)
    return len(doc_ids)


def touch_states(sources: Sequence[SourceFile], previous: Sequence[DocState],
                 states: StateStore) -> None:
    """Record a new size/mtime (and permission profile) for files whose content hash proved
    unchanged: the points of a changed profile must already carry it
    (:func:`update_permissions`: state is committed last).

    This keeps the next run's quick stat check hash-free after a ``touch`` or copy.
    """
    updated = []
    for source, state in zip(sources, previous, strict=True):
        access = source.access if source.access is not None else state.access
        if (state.size, state.mtime_ns, state.access) != (source.size, source.mtime_ns, access):
            updated.append(replace(state, size=source.size, mtime_ns=source.mtime_ns,
                                   access=access))
    states.commit(updated)


PERMISSION_UPDATE_IDS = 1_000
"""doc_ids per filtered payload update (one keyword-index match each)."""


def update_permissions(sources: Sequence[SourceFile], *, store: VectorStore,
                       states: StateStore, collection: str, namespace: str) -> None:
    """Give every point of each source's document its new profile id (``access``): one
    filtered payload update per profile and :data:`PERMISSION_UPDATE_IDS` documents, nothing
    converted or embedded. The profiles are recorded first; the caller commits the states
    last (:func:`touch_states`), so a crash in between is redone by the next run."""
    record_profiles(states, sources)
    by_access: dict[str, list[str]] = {}
    for source in sources:
        if source.access is not None:
            by_access.setdefault(source.access, []).append(source.doc_id)
    for access, doc_ids in by_access.items():
        for start in range(0, len(doc_ids), PERMISSION_UPDATE_IDS):
            wanted = tuple(doc_ids[start:start + PERMISSION_UPDATE_IDS])
            store.set_payload(collection, Filter.where(namespace=namespace).and_also(
                Match("doc_id", any_of=wanted)), {"access": access})


def heal_document(
    source: SourceFile, previous: DocState, *, store: VectorStore, states: StateStore,
    service: Embedder, collection: str, namespace: str, run_id: str, sparse: SparseEncoder,
    contextual: bool = False,
) -> tuple[DocState, EmbedOutcome]:
    """Re-embed the zero-vector chunks of an unchanged ``partial`` document.

    No conversion or chunking: the flagged points' stored texts are embedded
    again and upserted under the same ids. The state becomes ``ok`` only when
    no flagged point is left. With ``contextual`` the texts are rebuilt from the
    payload's title and heading path exactly as :meth:`PreparedDoc.indexed_text`
    built them, so a healed point's vectors equal a fresh write's.

    Returns:
        The committed state and the embedding outcome (for the counters).
    """
    flt = Filter.where(namespace=namespace, doc_id=source.doc_id, embedding_failed=True)
    flagged = list(store.scroll(collection, flt))
    texts = [stored_indexed_text(p.payload, contextual) for p in flagged]
    outcome = service.embed_passages(texts)
    # An upsert replaces every vector of a point: the sparse one is written again too.
    healed = [Point(id=p.id, payload={**p.payload, "embedding_failed": False}, vector=v,
                    sparse=sparse.encode_document(text))
              for p, text, v, failed in zip(flagged, texts, outcome.vectors, outcome.failed,
                                            strict=True)
              if not failed]
    if healed:
        store.upsert(collection, healed)
    access = previous.access
    if source.access is not None and source.access != previous.access:
        update_permissions([source], store=store, states=states, collection=collection,
                           namespace=namespace)
        access = source.access
    status = DocStatus.PARTIAL if len(healed) < len(flagged) else DocStatus.OK
    state = replace(previous, status=status, updated_at=utc_now(), run_id=run_id,
                    size=source.size, mtime_ns=source.mtime_ns, access=access)
    states.commit([state])
    return state, outcome
