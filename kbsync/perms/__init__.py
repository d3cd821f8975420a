"""Who may read a file, as the kernel decides it: capture at discovery, the rule at query time.

A floor of its own (the ground floor only beneath it): :mod:`kbsync.perms.acl` reads a
file's or folder's mode bits and POSIX access ACL into a :class:`~kbsync.perms.rule.Grant`
(one permission bit, normalised), :mod:`kbsync.perms.rule` holds the kernel's rule and the
:class:`~kbsync.perms.rule.Profile` a document is indexed under (the file's ``r`` and every
folder's ``x`` from ``/`` down), and :mod:`kbsync.perms.reader` says who is asking. Where
profiles are stored and how a search is narrowed by them is the catalog's
(:mod:`kbsync.catalog.access`). See docs/permissions.md.
"""
