"""``python -m kbsync``: the same command as the ``kbsync`` console script
(:func:`kbsync.app.cli.main`), for a venv whose ``bin/`` is not on ``PATH``."""

import sys

from kbsync.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
