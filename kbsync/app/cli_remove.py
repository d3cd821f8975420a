"""``kbsync remove``: drop a share or a namespace on purpose (wired in by :mod:`kbsync.app.cli`).

On a terminal it shows what would go and asks; without a terminal it needs
``--yes`` (exit 2 otherwise, nothing removed). It takes the ingest's write lock
with the doors' one decision (:func:`kbsync.app.locks.write_locks`: on a Qdrant
server also the Prefect global concurrency limit), so it never interleaves with an
ingest. The work is :mod:`kbsync.ingest.remove`.

The collection is resolved again once the lock is held
(:meth:`kbsync.catalog.lock.WriteLocks.hold` with ``follow``): a removal that waited for a
rebuild applies to the collection the rebuild made active, not to the one it replaced.

After ``kbsync rebuild`` swapped, a removal applies to the previous collection too (the
one ``kbsync rebuild --rollback`` would serve again), and says so: a rollback never
brings back what was removed.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kbsync.app import cli_support
from kbsync.app.cli_support import EXIT_OK, namespace_argument
from kbsync.errors import UsageError
from kbsync.models import root_name_problem

if TYPE_CHECKING:  # imported when `remove` runs: `kbsync --help` need not load the store wing
    from kbsync.ingest.remove import Removal, Target


def register(sub) -> None:
    """Add ``remove`` to the ``kbsync`` subparsers."""
    rm = sub.add_parser(
        "remove", help="drop a share (--root NAME) or a whole namespace from the knowledge base",
        epilog="Points go first, then the documents' state records, then the root's binding "
               "(a crash in between is finished by running it again).")
    what = rm.add_mutually_exclusive_group(required=True)
    what.add_argument("--root", metavar="NAME", type=_root_name,
                      help="every document of root NAME (the doc_id prefix) in one namespace")
    what.add_argument("--namespace", metavar="NS", type=namespace_argument,
                      help="every document of namespace NS")
    rm.add_argument("--namespace-of-root", metavar="NS", type=namespace_argument, default=None,
                    help="the namespace of --root NAME (default: default)")
    rm.add_argument("--yes", action="store_true",
                    help="do not ask (needed when stdin is not a terminal)")
    rm.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _root_name(text: str) -> str:
    problem = root_name_problem(text) or ("holds a '='" if "=" in text else None)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"root NAME {text!r} {problem}")
    return text


_root_name.__name__ = "root NAME"  # argparse names the type in its message


def run_remove(args, settings) -> int:
    """``kbsync remove``: 0 removed (or nothing to remove, or declined), 2 usage error
    (also an unknown ``--root NAME``)."""
    from kbsync.ingest.remove import Removal, Target, remove

    if args.namespace is not None and args.namespace_of_root is not None:
        raise UsageError("argument --namespace-of-root: only goes with --root "
                         "(see `kbsync remove --help`)")
    target = Target(namespace=args.namespace or args.namespace_of_root or "default",
                    root=args.root)
    interactive = sys.stdin.isatty()
    if not args.yes and not interactive:
        raise UsageError(f"remove of {target.describe()} needs --yes when stdin is not a "
                         "terminal; nothing was removed")
    planned = _measure(settings, target)  # UsageError: --root names no root of the store
    if planned.empty():
        return _report(args, planned, f"nothing to remove: {target.describe()} holds no "
                                      f"documents in collection {settings.collection!r}")
    if not args.yes and not _confirm(planned, target):
        return _report(args, Removal(settings.collection, target.namespace, target.root),
                       "not confirmed: nothing was removed", confirmed=False)
    from kbsync.app.locks import write_locks
    from kbsync.store import open_store

    # follow: a rebuild that swapped while this removal waited for the lock made another
    # collection active; the removal applies to that one (and to the one it replaced).
    with write_locks(settings).hold(target.namespace, "remove", follow=True) as settings:
        # a writer: `kbsync serve` holding the store hands it over, and reads through
        # this process's relay meanwhile (kbsync.serve.holder)
        store = open_store(settings, serve_readers=True)
        try:
            removed = remove(store, collection=settings.collection,
                             state_collection=settings.state_collection, target=target)
            also = _remove_from_previous(store, settings, target)
        finally:
            store.close()
    line = (f"removed {target.describe()}: {removed.documents} documents, {removed.chunks} "
            f"chunks, {removed.root_bindings} root bindings (collection {settings.collection!r})")
    if also is not None:
        line += (f"; also from {also.collection!r}, the collection `kbsync rebuild --rollback` "
                 f"would serve: {also.documents} documents")
    return _report(args, removed, line, previous=also)


def _remove_from_previous(store, settings, target: Target) -> Removal | None:
    """The same removal from the collection a rollback would serve again (the rule: a
    removal applies to the previous collection too, so no rollback brings it back)."""
    from kbsync.catalog.active import previous_collection
    from kbsync.ingest.remove import remove

    previous = previous_collection(settings, store)
    if previous is None:
        return None
    return remove(store, collection=previous, state_collection=settings.state_collection_of(previous),
                  target=target)


def _measure(settings, target: Target) -> Removal:
    """What would go; opens nothing (creates nothing) when the store does not exist.

    Raises:
        UsageError: ``--root NAME`` names no root of the namespace (a typo must not
            pass for a removal that found nothing).
    """
    from kbsync.ingest.remove import Removal, known_roots, measure

    store = cli_support.indexed_store(settings)
    if store is None:
        planned, known = Removal(settings.collection, target.namespace, target.root), {}
    else:
        try:
            planned = measure(store, collection=settings.collection,
                              state_collection=settings.state_collection, target=target)
            known = ({} if not planned.empty() or target.root is None else
                     known_roots(store, state_collection=settings.state_collection))
        finally:
            store.close()  # the embedded store admits one process: not held while asking
    if planned.empty() and target.root is not None and \
            target.root not in known.get(target.namespace, ()):
        raise UsageError(_unknown_root(settings, target, known))
    return planned


def _unknown_root(settings, target: Target, known: dict[str, set[str]]) -> str:
    """One line: the unknown NAME, the roots the namespace has, and where NAME is bound."""
    roots = sorted(known.get(target.namespace, ()))
    listed = (f"its roots are {', '.join(map(repr, roots))}" if roots else
              f"it has no roots in collection {settings.collection!r}")
    elsewhere = sorted(ns for ns, names in known.items() if target.root in names)
    hint = (f"; root {target.root!r} is in namespace {elsewhere[0]!r}: add "
            f"--namespace-of-root {elsewhere[0]}" if elsewhere else "")
    return (f"unknown root {target.root!r} in namespace {target.namespace!r}: {listed}"
            f"{hint}; nothing was removed")


def _confirm(planned: Removal, target: Target) -> bool:
    sys.stderr.write(f"Remove {target.describe()} from collection {planned.collection!r}: "
                     f"{planned.documents} documents, {planned.chunks} chunks? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _report(args, removal: Removal, line: str, *, confirmed: bool = True,
            previous: Removal | None = None) -> int:
    if args.json:
        cli_support.emit({**removal.to_dict(), "confirmed": confirmed,
                          "previous": previous.to_dict() if previous else None})
    else:
        from kbsync.app.console import out

        out.print(line, highlight=False, markup=False, soft_wrap=True)
    return EXIT_OK


COMMANDS = {"remove": run_remove}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
