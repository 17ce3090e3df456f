"""Jobs for the worker processes of the security tests (``awa_worker --import``)."""

from __future__ import annotations

import time

from django.db import connection

from awa_django import job

#: Seconds a job waits for the leader's first prunes.
PRUNE_WAIT = 60.0


@job(kind="tests.security.until_pruned")
def until_pruned() -> dict[str, str]:
    """Wait until the maintenance leader of this worker recorded a prune of
    every ring, and return the outcomes: a ``--burst`` worker running it
    cannot exit before its maintenance has run (as the worker's role)."""
    deadline = time.monotonic() + PRUNE_WAIT
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT ring, outcome FROM awa.ring_status WHERE action = 'prune'")
            outcomes = dict(cursor.fetchall())
        if len(outcomes) == 3 or time.monotonic() > deadline:
            return outcomes
        time.sleep(0.05)
