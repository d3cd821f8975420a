"""A small typed Python API for agent frameworks: add_text, search, ask, stats, delete.

Two ways to use it::

    from kbsync import api
    api.add_text("Tessera keys rotate every 90 days.", "notes/keys", namespace="agent")
    hits = api.search("key rotation", namespace="agent")

    with api.KnowledgeBase() as kb:          # keeps the store open across calls
        kb.add_text(...); kb.ask(...)

The module functions open the store for the call and close it again, so a
long-lived agent never holds the embedded engine's folder (one handle per
folder) between calls; the embedding model stays loaded for the process.
Settings come from ``KBSYNC_*`` unless passed.

``add_text`` is a document like any file: it goes through the same chunk ->
embed -> upsert -> delete stale -> commit state path, under the same write
lock, with the same incremental rule (same text and same settings fingerprint
= unchanged, nothing embedded). Its state record has root ``<api>``, so a
full-mode ingest of a directory root (named after the directory unless
``NAME=PATH`` says otherwise) never deletes it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kbsync.app.locks import write_locks
from kbsync.errors import UsageError
from kbsync.catalog.lock import DistributedLock, WriteLocks
from kbsync.models import DocStatus, PlanAction, SourceFile, control_character
from kbsync.perms.rule import owner_only_profile
from kbsync.query.request import SearchRequest, as_request
from kbsync.settings import Settings, load_settings
from kbsync.store.base import Filter

if TYPE_CHECKING:
    from kbsync.query.answer import Answer
    from kbsync.query.llm import ChatModel
    from kbsync.query.search import SearchResult
    from kbsync.runtime import Runtime

log = logging.getLogger(__name__)

API_ROOT = "<api>"
AddStatus = Literal["added", "updated", "unchanged", "healed"]


@dataclass(frozen=True)
class AddResult:
    """What :func:`add_text` did.

    ``status`` is ``added`` (new doc_id), ``updated`` (text or settings changed),
    ``unchanged`` (nothing embedded or written) or ``healed`` (unchanged text
    whose zero-vector chunks were embedded again).
    """

    doc_id: str
    namespace: str
    status: AddStatus
    chunks: int
    embeddings_computed: int
    embeddings_cached: int
    embeddings_failed: int
    content_hash: str
    partial: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class DeleteResult:
    """What :func:`delete` removed (``deleted`` is False when the doc_id was unknown)."""

    doc_id: str
    namespace: str
    deleted: bool
    chunks_removed: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


@dataclass(frozen=True)
class Stats:
    """The contents of the knowledge base (same data as ``kbsync stats --json``)."""

    collection: str
    embedding: dict[str, Any]
    namespaces: dict[str, dict[str, int]]
    embedding_recorded: bool = True  # False: an older store; ``embedding`` is the configured one
    configured_embedding: dict[str, Any] | None = None  # set when it differs from ``embedding``

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


class KnowledgeBase:
    """The knowledge base behind one :class:`Settings`, opened on first use.

    Not thread-safe; use one instance per thread, or the module functions.
    Close it (or use ``with``) to release the store.

    It follows the active collection, as ``kbsync serve`` does: after a ``kbsync rebuild``
    swapped in a new collection, or a rollback swapped back, in another process, its next
    call answers from the collection now active, with that collection's model (a stat of
    the pointer files per call; against a server, one aliases request).

    Writes (``add_text``, ``delete``) hold the ingest's write lock with the doors' one
    decision, made once here (:func:`kbsync.app.locks.write_locks`): against a Qdrant
    server, or with ``PREFECT_API_URL`` set, the flows' Prefect limit is taken first
    (:mod:`kbsync.catalog.lock`), so writers on other machines are excluded too.
    ``distributed_lock`` replaces that limit with another
    :class:`~kbsync.catalog.lock.DistributedLock` (taken against a server store only,
    like the limit).
    """

    def __init__(self, settings: Settings | None = None, *,
                 distributed_lock: DistributedLock | None = None) -> None:
        from kbsync.catalog.active import pointer_mark, resolve

        self._configured = settings or load_settings()
        # The active pointer's mark when last resolved (None: unknown), taken before resolving
        # so that a swap in between shows; a server's needs the open store (first call).
        self._mark: object = None if self._configured.qdrant_url else pointer_mark(self._configured)
        # The collection a rebuild made active, with its own model (kbsync.catalog.active);
        # followed after a swap or rollback by another process (_follow_active).
        self.settings = resolve(self._configured)
        self._runtime: Runtime | None = None
        # The door's one lock decision, carried to every write below (kbsync.catalog.lock).
        self._locks = (WriteLocks(self.settings, distributed=distributed_lock)
                       if distributed_lock is not None else write_locks(self.settings))

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the store handle (the embedding model stays cached for the process)."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def _open(self, *, embed: bool):
        from kbsync.runtime import Runtime

        while True:
            if self._runtime is None:
                self._runtime = Runtime.open(self.settings, with_embedder=embed)
            if self._follow_active():
                break
        if embed and self._runtime.service is None:
            from kbsync.embed import build_embedding_service

            self._runtime.service = build_embedding_service(self.settings)
        return self._runtime

    def _follow_active(self) -> bool:
        """Whether the open runtime still serves the active collection. A ``kbsync rebuild``
        (its swap) or ``--rollback`` in another process repoints it; as ``kbsync serve`` does
        per request, the next call then serves the collection now active, with its own
        model: the runtime is closed here (False) and :meth:`_open` opens the new one.
        Costs a stat of the pointer files per call (a server: one aliases request); resolves
        again only when they changed."""
        from kbsync.catalog.active import pinned, pointer_mark, resolve

        runtime = self._runtime
        assert runtime is not None
        if pinned(self._configured):
            return True  # a command's resolved() answers for its duration, asking nothing
        mark = pointer_mark(self._configured, runtime.store)
        if self._mark is not None and mark == self._mark:
            return True
        now = resolve(self._configured, runtime.store, warn=False)
        self._mark = mark
        if now == self.settings:
            return True
        log.info("collection %s now serves from %s (was %s): following it",
                 now.logical_collection, now.collection, self.settings.collection)
        runtime.close()
        self._runtime, self.settings = None, now
        return False

    # -- actions -----------------------------------------------------------------------------
    def add_text(self, text: str, doc_id: str, namespace: str = "default", *,
                 title: str | None = None) -> AddResult:
        """Store ``text`` as document ``doc_id`` of ``namespace`` (replacing an older text).

        Raises:
            UsageError: blank text or namespace; a doc_id that is not a plain one
                (:func:`check_doc_id`).
            RootConflict: a root owns ``doc_id`` (a file's document, or ``NAME/...`` of a
                bound root NAME, in any case or width: ``Docs/...``, ``ｄｏｃｓ/...``).
            EmbedderMismatch: the collection was built with another embedder.
            EmptyDocument: the text chunks to nothing.
            SecretDetected: the text holds a secret (a private key, an access key, a password
                assignment: docs/SECURITY.md) and ``KBSYNC_SECRETS`` is ``refuse``; with
                ``redact`` it is stored with each secret replaced by ``[REDACTED:<kind>]``.
            EmbeddingOutage: every chunk failed to embed (the previous version stays).
            LockHeld: an ingest holds the write lock past ``lock_timeout_s``.
            KbsyncError: a store failure (the previous version stays).
        """
        check_doc_id(doc_id)
        _check_id("namespace", namespace)
        if not text.strip():
            raise UsageError("text is empty")
        from kbsync.ingest.executor import InProcess
        from kbsync.ingest.texts import TextRequest, ingest_text

        runtime = self._open(embed=True)
        data = text.encode("utf-8")
        # A text is no file of a share: only its writer (the store's owner) and root read it.
        access = owner_only_profile(os.geteuid())
        source = SourceFile(doc_id=doc_id, root=API_ROOT, path=Path(doc_id), rel_path=doc_id,
                            size=len(data), mtime_ns=0,
                            content_hash=hashlib.sha256(data).hexdigest(),
                            access=access.id, access_grants=access.grants)
        request = TextRequest(source=source, text=text, title=title or _title(text, doc_id),
                              namespace=namespace, run_id=f"api-{uuid.uuid4()}")
        done = ingest_text(request, InProcess(runtime, locks=self._locks, purpose="add_text"))
        counters = done.counters
        statuses: dict[PlanAction, AddStatus] = {
            PlanAction.NEW: "added", PlanAction.CHANGED: "updated",
            PlanAction.HEAL: "healed", PlanAction.UNCHANGED: "unchanged"}
        status = statuses[done.action]
        return AddResult(doc_id=doc_id, namespace=namespace, status=status,
                         chunks=done.state.chunk_count,
                         embeddings_computed=counters["embeddings_computed"],
                         embeddings_cached=counters["embeddings_cached"],
                         embeddings_failed=counters["embeddings_failed"],
                         content_hash=source.content_hash or "",
                         partial=(done.action is not PlanAction.UNCHANGED
                                  and done.state.status is DocStatus.PARTIAL))

    def search(self, query: str | SearchRequest, namespace: str | None = None, *,
               llm: ChatModel | None = None, **options: Any) -> SearchResult:
        """Search one namespace (``"default"`` unless given).

        ``query``: a :class:`kbsync.query.request.SearchRequest`, or the text with
        ``options``, the keywords of :meth:`SearchRequest.build
        <kbsync.query.request.SearchRequest.build>`: ``k`` (default 5), ``min_score``,
        ``mode``, ``mqe``, ``hyde``, and the filters ``root``, ``path_prefix``, ``types``
        (``"pdf,html"`` or a list) and ``modified_since`` (ISO string, date or datetime;
        no timezone = UTC), which narrow the namespace (:mod:`kbsync.query.filters`), and
        ``as_user`` (a user name or uid): only what that user may read on the share, never
        more than this process may (docs/permissions.md).
        ``llm``: the chat model of ``mqe``/``hyde`` (none: the plain query is searched, and
        a note says so).

        Raises:
            UsageError: a malformed filter value.
            ValueError: a blank query, ``k`` or ``mqe`` out of range, an unknown mode.
        Returns:
            :class:`kbsync.query.search.SearchResult`.
        """
        from kbsync.query.search import search

        request = _request(query, namespace, options)
        runtime = self._open(embed=True)
        return search(request, store=runtime.store, service=runtime.service,
                      collection=runtime.collection, llm=llm)

    def ask(self, question: str | SearchRequest, namespace: str | None = None, *,
            llm: ChatModel | None = None, **options: Any) -> Answer:
        """Answer from the namespace's best chunks with ``[n]`` citations.

        Args:
            question: a :class:`kbsync.query.request.SearchRequest`, or the question with
                ``options``: ``k`` (default 5), ``min_score`` (the relevance threshold;
                ``None`` uses :data:`kbsync.query.answer.DEFAULT_MIN_SCORE`) and the
                filters, as for :meth:`search`.
            llm: a chat model; default: the configured ``KBSYNC_LLM_*`` one.
        Returns:
            :class:`kbsync.query.answer.Answer`.
        """
        from kbsync.query.answer import DEFAULT_MIN_SCORE, ask
        from kbsync.query.llm import chat_model

        unused = sorted(set(options) & {"mode", "mqe", "hyde"})
        if unused:
            raise TypeError(f"ask does not take {', '.join(unused)}: it searches the plain "
                            "question, dense")
        if options.get("min_score") is None:
            options.pop("min_score", None)  # None here means the default threshold
        if isinstance(question, SearchRequest) and question.min_score is None:
            question = replace(question, min_score=DEFAULT_MIN_SCORE)
        request = _request(question, namespace, options, min_score=DEFAULT_MIN_SCORE)
        model = llm if llm is not None else chat_model(self.settings)
        runtime = self._open(embed=True)
        return ask(request, store=runtime.store, service=runtime.service,
                   collection=runtime.collection, llm=model)

    def stats(self, namespace: str | None = None, *, as_user: str | None = None) -> Stats:
        """Documents, chunks and failed embeddings per namespace (loads no model), of what
        this process may read, narrowed to what ``as_user`` may read when given."""
        from kbsync.query.stats import collect_stats

        runtime = self._open(embed=False)
        return Stats(**collect_stats(runtime.store, self.settings, namespace, as_user=as_user))

    def delete(self, doc_id: str, namespace: str = "default") -> DeleteResult:
        """Remove one document (points, then state record) under the write lock.

        A file's document comes back with the next ingest of its root while the
        file exists; this is meant for texts added with :meth:`add_text`.
        """
        _check_id("doc_id", doc_id)
        _check_id("namespace", namespace)
        from kbsync.ingest.write import delete_documents

        runtime = self._open(embed=False)
        with self._locks.hold(namespace, "delete"):
            previous = runtime.states.get(namespace, doc_id)
            chunks = 0
            if runtime.store.collection_dimension(runtime.collection) is not None:
                chunks = runtime.store.count(runtime.collection,
                                             Filter.where(namespace=namespace, doc_id=doc_id))
            if previous is None and chunks == 0:
                return DeleteResult(doc_id, namespace, deleted=False, chunks_removed=0)
            delete_documents([doc_id], store=runtime.store, states=runtime.states,
                             collection=runtime.collection, namespace=namespace)
        return DeleteResult(doc_id, namespace, deleted=True, chunks_removed=chunks)


def _request(query: str | SearchRequest, namespace: str | None, options: dict[str, Any],
             **defaults: Any) -> SearchRequest:
    """The request of an API call: a :class:`SearchRequest` as it is, else the text with
    ``namespace`` and ``options`` (``defaults`` fill what ``options`` leave out)."""
    if namespace is not None:
        if isinstance(query, SearchRequest):
            raise TypeError("a SearchRequest carries its own namespace")
        options = {**options, "namespace": namespace}
    if isinstance(query, SearchRequest):
        return as_request(query, **options)
    return as_request(query, **{**defaults, **options})


def _check_id(name: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise UsageError(f"{name} must be a non-blank string without surrounding spaces, "
                         f"got {value!r}")


MAX_DOC_ID_CHARS = 1024
"""The longest doc_id :func:`add_text` takes: a name, not a text (it is stored in every
chunk's payload and shown in every citation)."""


def check_doc_id(doc_id: str) -> None:
    """Refuse a doc_id that is not a plain ``segment/segment`` name.

    A text's doc_id sits beside the files' doc_ids (``ROOT/rel/path``) in one
    namespace, so it must not pass for another: no ``.``/``..`` or empty segment (no
    leading, trailing or doubled ``/``), no control character, no backslash, and
    NFKC-normal (fullwidth ``ｄｏｃｓ`` or a ligature would show as another doc_id's
    twin); at most :data:`MAX_DOC_ID_CHARS` characters. Case variants of a root's
    NAME are refused by the owner check (:func:`kbsync.ingest.texts.check_owner`).

    Raises:
        UsageError: one line naming the rule the doc_id breaks.
    """
    _check_id("doc_id", doc_id)
    problem = _doc_id_problem(doc_id)
    if problem is not None:
        shown = repr(doc_id) if len(doc_id) <= 80 else f"{doc_id[:60]!r}... ({len(doc_id)} characters)"
        raise UsageError(f"doc_id {shown} {problem}")


def _doc_id_problem(doc_id: str) -> str | None:
    import unicodedata

    if len(doc_id) > MAX_DOC_ID_CHARS:
        return f"is longer than {MAX_DOC_ID_CHARS} characters"
    odd = control_character(doc_id)
    if odd is not None:
        return f"holds the control character U+{ord(odd):04X}"
    if "\\" in doc_id:
        return "holds a backslash; separate its parts with '/'"
    if any(part in ("", ".", "..") for part in doc_id.split("/")):
        return "has an empty, '.' or '..' part; write it as parts joined by single '/'"
    normal = unicodedata.normalize("NFKC", doc_id)
    if normal != doc_id:
        return f"is not in Unicode NFKC form (it would pass for {normal!r}); write {normal!r}"
    return None


def _title(text: str, doc_id: str) -> str:
    """The first Markdown heading, else the first line (80 characters at most), else doc_id."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("#"):
            return line.lstrip("#").strip()[:80] or doc_id
    return lines[0][:80] if lines else doc_id


# -- module functions: one short-lived KnowledgeBase per call ---------------------------------
def add_text(text: str, doc_id: str, namespace: str = "default", *,
             settings: Settings | None = None, title: str | None = None) -> AddResult:
    """See :meth:`KnowledgeBase.add_text`."""
    with KnowledgeBase(settings) as kb:
        return kb.add_text(text, doc_id, namespace, title=title)


def search(query: str | SearchRequest, namespace: str | None = None, *,
           settings: Settings | None = None, llm: ChatModel | None = None,
           **options: Any) -> SearchResult:
    """See :meth:`KnowledgeBase.search` (options: k, min_score, mode, mqe, hyde, the
    filters root, path_prefix, types, modified_since, and as_user)."""
    with KnowledgeBase(settings) as kb:
        return kb.search(query, namespace, llm=llm, **options)


def ask(question: str | SearchRequest, namespace: str | None = None, *,
        settings: Settings | None = None, llm: ChatModel | None = None,
        **options: Any) -> Answer:
    """See :meth:`KnowledgeBase.ask` (options: k, min_score, the filters root,
    path_prefix, types, modified_since, and as_user)."""
    with KnowledgeBase(settings) as kb:
        return kb.ask(question, namespace, llm=llm, **options)


def stats(namespace: str | None = None, *, settings: Settings | None = None,
          as_user: str | None = None) -> Stats:
    """See :meth:`KnowledgeBase.stats`."""
    with KnowledgeBase(settings) as kb:
        return kb.stats(namespace, as_user=as_user)


def delete(doc_id: str, namespace: str = "default", *,
           settings: Settings | None = None) -> DeleteResult:
    """See :meth:`KnowledgeBase.delete`."""
    with KnowledgeBase(settings) as kb:
        return kb.delete(doc_id, namespace)
