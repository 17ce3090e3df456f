"""NOTIFY channel names (mirror of the SQL function ``awa.queue_channel``)."""

from __future__ import annotations

import hashlib

_PREFIX = "awa:"
_MAX_QUEUE_BYTES = 59  # channel names are identifiers: 63 bytes at most


def queue_channel(queue: str) -> str:
    """The channel producers notify when ``queue`` gets ready work."""
    if len(queue.encode()) <= _MAX_QUEUE_BYTES:
        return _PREFIX + queue
    return _PREFIX + hashlib.md5(queue.encode(), usedforsecurity=False).hexdigest()
