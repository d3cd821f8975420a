"""``kbsync verify [--namespace NS] [--repair] [--json]``: does the store hold what the state says?

Plain library code (no Prefect server): :func:`kbsync.maintenance.verify.verify` reads every
chunk point of the namespace(s) once; ``--repair`` runs :func:`kbsync.maintenance.repair.repair`
under the ingest write lock, with the door's one lock decision
(:func:`kbsync.app.locks.write_locks`, passed to every repair step). Exit 0: no drift (after ``--repair``: none left);
3: drift or damage found (after ``--repair``: drift left, e.g. documents whose file is gone).

Damage (issue 37, :mod:`kbsync.maintenance.damage`): the sealed segments whose files differ from
their seal are named (``damaged``), and a collection the engine cannot read through is said
(``unreadable``) instead of ending the command; ``--repair`` moves the damage aside (``set_aside``)
and rebuilds it from the shares, a damaged state collection included (``state_rebuilt``).
"""

from __future__ import annotations

from kbsync.app.cli_support import EXIT_OK, EXIT_PARTIAL, emit, namespace_argument


def register(sub) -> None:
    """Add ``verify`` to the ``kbsync`` subparsers."""
    ver = sub.add_parser(
        "verify", help="check every document's points against its state record; --repair "
                       "fixes the drift (exit 3 when drift is found or left)")
    ver.add_argument("--namespace", type=namespace_argument, default=None, metavar="NS",
                     help="only this namespace (default: all)")
    ver.add_argument("--repair", action="store_true",
                     help="set damaged segments or collections aside (kept), delete orphan "
                          "points and rebuild drifted documents from their files (documents "
                          "whose file is gone are kept as they are)")
    ver.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run_verify(args, settings) -> int:
    """The ``verify`` command; returns the exit code."""
    from kbsync.runtime import Runtime
    from kbsync.maintenance.verify import VerifyReport

    removals: dict = {"pending_removals": [], "removals_finished": []}
    damage: dict = {"damaged": [], "unreadable": None, "set_aside": [], "state_rebuilt": None}
    if not settings.qdrant_url and not settings.store_path.is_dir():
        # Nothing was ever stored here; reading must not create the store's folders.
        report, result, after = VerifyReport(settings.collection, False, {}), None, None
    else:
        from kbsync.app.locks import write_locks

        locks = write_locks(settings)  # the door decides once; every repair step holds it
        runtime = Runtime.open(settings, with_embedder=args.repair)
        try:
            report, result, after = _verified(runtime, args, locks, removals, damage)
        finally:
            runtime.close()
    from kbsync.catalog.active import unserved_collections

    data = {**report.to_dict(), **damage,
            "repair": result.to_dict() if result else None,
            "remaining": (after if after is not None else report).drifted(), **removals,
            "unserved_collections": unserved_collections(settings)}
    if args.json:
        emit(data)
    else:
        from kbsync.app.cli_support import nothing_indexed

        _print(data, empty=nothing_indexed(settings, args.namespace))
    broken = not args.repair and (data["damaged"] or data["unreadable"])
    return EXIT_PARTIAL if data["remaining"] or data["pending_removals"] or broken else EXIT_OK


def _verified(runtime, args, locks, removals: dict, damage: dict):
    """Name the damage, set it aside (``--repair``), then verify and repair the drift:
    ``(report, repair result or None, report after the repair or None)``."""
    from kbsync.maintenance import damage as dm
    from kbsync.maintenance.verify import VerifyReport, verify

    settings = runtime.settings
    found = dm.find(runtime)
    damage["damaged"] = [d.to_dict() for d in found]
    if args.repair:
        from kbsync.maintenance.repair import set_aside_damaged

        folder, segments = dm.set_aside_segments(runtime, found, locks=locks)
        if folder is not None:
            damage["set_aside"].append({"collection": runtime.collection, "path": str(folder),
                                        "segments": segments})
        whole = set_aside_damaged(runtime, locks=locks)  # the engine cannot open it
        if whole is not None:
            damage["set_aside"].append({"collection": runtime.collection, "path": str(whole),
                                        "segments": None})
        state = settings.state_collection
        if any(d.collection == state for d in found) or dm.unreadable(runtime, state):
            from kbsync.maintenance.state_rebuild import rebuild_state

            rebuilt = rebuild_state(runtime, locks=locks)
            damage["state_rebuilt"] = rebuilt.to_dict()
            damage["set_aside"].append({"collection": state, "path": rebuilt.set_aside,
                                        "segments": None})

    def scan() -> VerifyReport:
        _removals(runtime, args, removals, locks)  # before verify: never rebuild what goes
        return verify(runtime.store, collection=settings.collection,
                      state_collection=settings.state_collection, namespace=args.namespace)

    try:
        report = scan()
    except dm.DAMAGE_ERRORS as exc:
        if not args.repair:  # named, and the scan that could not finish is said
            damage["unreadable"] = " ".join(str(exc).split())
            return VerifyReport(settings.collection, False, {}), None, None
        if dm.unreadable(runtime, settings.state_collection) is not None:
            raise  # the state collection: its records cannot be rebuilt here
        whole = dm.set_aside_collection(runtime, runtime.collection, locks=locks)
        damage["set_aside"].append({"collection": runtime.collection, "path": str(whole),
                                    "segments": None})
        report = scan()
    if not args.repair or not report.drifted():
        return report, None, None
    from kbsync.maintenance.repair import repair

    result, after = repair(runtime, report, namespace=args.namespace, locks=locks,
                           keep_orphans=damage["state_rebuilt"] is not None)
    result.set_aside = next((a["path"] for a in damage["set_aside"]), None)
    return report, result, after


def _removals(runtime, args, removals: dict, locks) -> None:
    """Interrupted ``kbsync remove`` runs: finished with ``--repair``, else reported."""
    from kbsync.ingest.remove import pending
    from kbsync.maintenance.repair import finish_removals

    if args.repair:
        removals["removals_finished"] = finish_removals(runtime, args.namespace, locks=locks)
        return
    removals["pending_removals"] = [
        {"namespace": t.namespace, "root": t.root} for t in pending(
            runtime.store, state_collection=runtime.settings.state_collection,
            namespace=args.namespace)]


def _print(data: dict, *, empty: str = "nothing is indexed yet") -> None:
    """The readable report: one line per namespace, one per kind of drift; ``empty`` when
    nothing was there to check (rather than "no drift")."""
    from kbsync.app.console import out

    def say(text: str) -> None:
        out.print(text, highlight=False, markup=False)

    for item in data["damaged"]:
        where = f"{item['file']} " if item["file"] else ""
        say(f"damaged: collection {item['collection']}, sealed segment {item['segment']}: "
            f"{where}{item['problem']}" + ("" if data["repair"] is not None or data["set_aside"]
                                            else ": `kbsync verify --repair` rebuilds it"))
    if data["unreadable"]:
        say(f"unreadable: {data['unreadable']}")
    rebuilt = data["state_rebuilt"]
    if rebuilt:
        say(f"state records rebuilt from the shares: {len(rebuilt['roots'])} roots"
            + "".join(f"; not rebuilt: root {r['root']} of namespace {r['namespace']} "
                      f"({r['why']})" for r in rebuilt["not_rebuilt"]))
    for aside in data["set_aside"]:
        what = (f"segments {', '.join(aside['segments'])}" if aside["segments"]
                else "the whole collection")
        say(f"set aside: {what} of {aside['collection']} moved to {aside['path']} (kept)")
    if data["collection_missing"]:
        say(f"collection {data['collection']}: missing, while documents are recorded")
    for ns, info in data["namespaces"].items():
        say(f"namespace {ns}: {info['documents']} documents, {info['points']} points, "
            f"{info['drifted']} drifted")
        for kind, entry in info["drift"].items():
            shown = ", ".join(entry["doc_ids"][:5])
            more = ", ..." if entry["documents"] > 5 else ""
            say(f"  {kind}: {entry['documents']} documents, {entry['points']} points "
                f"({shown}{more})")
    for target in data["pending_removals"]:
        what = f"root {target['root']} of namespace" if target["root"] else "namespace"
        say(f"interrupted removal: {what} {target['namespace']} is half removed; "
            "`kbsync verify --repair` finishes the removal")
    for done in data["removals_finished"]:
        what = f"root {done['root']} of namespace" if done["root"] else "namespace"
        say(f"finished the interrupted removal of {what} {done['namespace']}: "
            f"{done['documents']} documents, {done['chunks']} chunks removed")
    if data["unserved_collections"]:
        say(f"collections {', '.join(data['unserved_collections'])} are neither served nor kept "
            "for a rollback (left by a crashed rebuild or a lost pointer): `kbsync rebuild "
            "--restore NAME` serves one; the next rebuild resumes or deletes the newest")
    repair = data["repair"]
    if repair:
        say(f"repair: {repair['orphans_deleted']} orphan points deleted, "
            f"{repair['reprocessed']} documents rebuilt, {repair['failed']} failed, "
            f"{repair['kept_count']} kept (no file to rebuild from)")
    if not repair and (data["damaged"] or data["unreadable"]):
        say("the store is damaged: `kbsync verify --repair` sets the damage aside and rebuilds "
            "what it held from the files")
    if not (data["namespaces"] or data["remaining"] or data["collection_missing"]
            or data["damaged"] or data["unreadable"] or data["set_aside"]
            or data["pending_removals"] or data["removals_finished"] or repair):
        out.print(empty, highlight=False, markup=False, soft_wrap=True)
        return
    say("no drift" if not data["remaining"] else
        f"{data['remaining']} documents drifted" + ("" if repair else
                                                     ": `kbsync verify --repair` fixes it"))


COMMANDS = {"verify": run_verify}
"""Subcommand name -> handler ``(args, settings) -> exit code``, merged into cli.main's table."""
