"""Answers read from a store, kept while the store has not been written: the search path's cache.

A search asks the store the same questions every time: which embedder built the collection,
which roots lack recorded permissions, how many permission profiles there are, whether the
namespace holds chunks older than the filter fields, whether the reader's filter leaves out
any point at all. Each answer is one store call (~0.3-1 ms at 100k chunks, several per search);
none of them changes until something is written. :func:`remember` keeps them, keyed by the
store object and its **revision**.

**The revision.** A store that can say cheaply when it was written has a ``revision()``
method: a value that changes whenever a write has started, or ``None`` while one is in
flight. :class:`~kbsync.store.edge.store.EdgeStore` has one (:class:`Revision`): it holds its
folder's lock for its whole life, so every write to its files goes through this process's
object, and counting them is complete: another process's write cannot happen while it is
open (a second process reads through the relay, and a relay reader has no revision).
Stores without ``revision`` (a Qdrant server, which other processes write at any time; a
relay reader, whose writer is another process) keep nothing: every search asks again, as
before.

**Using an answer to skip work that must be exact** (the reader's filter left out because it
matches every point): read the revision before the answer and again after the search that
relied on it (:func:`still`); if a write started in between, search again the careful way.

Tested by ``tests/query/test_search_memo.py`` (each cached answer changes with a write, a
write in flight keeps nothing, a store without a revision keeps nothing).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")

MAX_ANSWERS = 512
"""Answers kept per store (least recently used go first): filters with dates make many keys."""


class Revision:
    """A store's write counter: ``started`` and ``finished`` writes.

    :meth:`value` is ``started`` when every started write has finished, ``None`` while
    one is in flight (its effect may or may not be visible yet).
    """

    __slots__ = ("_lock", "_started", "_finished")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = 0
        self._finished = 0

    def value(self) -> int | None:
        """The revision now, ``None`` during a write."""
        with self._lock:
            return self._started if self._started == self._finished else None

    def begin(self) -> None:
        """A write starts (before it touches the engine)."""
        with self._lock:
            self._started += 1

    def end(self) -> None:
        """A write ended, done or failed (after the engine returned)."""
        with self._lock:
            self._finished += 1


def revision_of(store: object) -> int | None:
    """``store.revision()``, or ``None`` for a store without one (nothing is kept)."""
    method = getattr(store, "revision", None)
    return method() if callable(method) else None


_answers: "weakref.WeakKeyDictionary[object, OrderedDict[Hashable, tuple[int, Any]]]" = \
    weakref.WeakKeyDictionary()
_answers_lock = threading.Lock()


def remember(store: object, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, kept for ``store`` under ``key`` while its revision stays the same.

    The revision is read before ``compute`` runs, so an answer computed while a write
    started is kept under the older revision and read again next time. Exceptions are not
    kept. A store without a revision (or during a write) computes every time.
    """
    revision = revision_of(store)
    if revision is None:
        return compute()
    with _answers_lock:
        try:
            answers = _answers.get(store)
        except TypeError:  # a store type without weak references: nothing kept
            return compute()
        found = None if answers is None else answers.get(key)
        if found is not None and found[0] == revision:
            answers.move_to_end(key)  # type: ignore[union-attr]
            return found[1]
    value = compute()
    with _answers_lock:
        answers = _answers.setdefault(store, OrderedDict())
        answers[key] = (revision, value)
        answers.move_to_end(key)
        while len(answers) > MAX_ANSWERS:
            answers.popitem(last=False)
    return value


def still(store: object, revision: int | None) -> bool:
    """Whether ``store`` is still at ``revision`` (not ``None``) with no write started since."""
    return revision is not None and revision_of(store) == revision


def forget(store: object) -> None:
    """Drop every answer kept for ``store`` (tests; a store reopened elsewhere)."""
    with _answers_lock:
        try:
            _answers.pop(store, None)
        except TypeError:
            pass
