"""Outbox mode at a glance: what waits to be relayed, and for how long.

The figures come from the outbox in the application's database
(``AWA["OUTBOX_DATABASE"]``); see ``awa_django.outbox`` and the relay
(``manage.py awa_relay``).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from ..conf import awa_settings
from ..records import OutboxDepth
from ..storage import outbox as store
from ..storage.base import run


def outbox_depth(*, database: str | None = None) -> OutboxDepth | None:
    """The outbox's pending jobs (committed, not relayed yet) and the relay's
    lag (seconds since the oldest of them was written); None when outbox
    mode is off.  ``database``: the outbox's alias (default
    ``AWA["OUTBOX_DATABASE"]``)."""
    alias = database or awa_settings().outbox_database
    if alias is None:
        return None
    return run(store.depth(), alias)


aoutbox_depth = sync_to_async(outbox_depth)


def outbox_status() -> dict[str, Any] | None:
    """:func:`outbox_depth` as the JSON-ready dict ``awa_storage status``
    reports under ``"outbox"`` (None when outbox mode is off)."""
    depth = outbox_depth()
    if depth is None:
        return None
    return {
        "database": awa_settings().outbox_database,
        "pending": depth.pending,
        "lag_seconds": round(depth.lag_seconds, 3),
        "oldest": depth.oldest.isoformat() if depth.oldest else None,
    }
