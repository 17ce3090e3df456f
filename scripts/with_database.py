"""Run a command with ``DATABASE_URL`` pointing at a PostgreSQL server.

When ``DATABASE_URL`` is already set it is used as is.  Otherwise an embedded
PostgreSQL is started with pgserver in ``.pgdata/`` beside the project (kept
between runs, stopped when the command ends), so the demo and the test suite
work on a fresh clone with nothing but Python and the package registries.

Usage: python scripts/with_database.py COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    env = dict(os.environ)
    server = None
    if not env.get("DATABASE_URL"):
        warnings.simplefilter("ignore")  # platformdirs warns without XDG_RUNTIME_DIR
        import pgserver

        data = ROOT / ".pgdata"
        print(f"DATABASE_URL is not set: starting embedded PostgreSQL in {data}", file=sys.stderr)
        server = pgserver.get_server(data, cleanup_mode="stop")
        env["DATABASE_URL"] = server.get_uri()
    try:
        return subprocess.call(argv, env=env)  # noqa: S603 - runs the command we were given
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
