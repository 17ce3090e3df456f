"""Encryption keys: which ones the stored jobs still need.

``manage.py awa_keys status``, the system check that refuses to drop a key
still in use and the console read this.  It reads the key id stored in
front of each sealed value (:mod:`awa_django.domain.sealing`) and decrypts
nothing, so it runs in a process without the keys too.
"""

from __future__ import annotations

from ..conf import awa_settings
from ..domain import sealing
from ..domain.records import KeyUsage
from ..storage import keys as key_store
from ..storage.base import run

#: Where sealed values are counted, in the order reports show them.
PLACES = ("ready", "deferred", "waiting", "dlq", "history")


def key_status(*, database: str | None = None) -> list[KeyUsage]:
    """Every configured key (the sealing one first), then every key id the
    stored jobs need that is not configured."""
    counts: dict[str, dict[str, int]] = {}
    for place, key_id, jobs in run(key_store.sealed_key_counts(), database):
        counts.setdefault(key_id, {})[place] = jobs
    configured = [sealing.key_id(key) for key in awa_settings().encryption_keys or ()]
    usages = [
        KeyUsage(key_id, True, n == 0, _ordered(counts.pop(key_id, {})))
        for n, key_id in enumerate(dict.fromkeys(configured))
    ]
    usages += [KeyUsage(key_id, False, False, _ordered(jobs)) for key_id, jobs in counts.items()]
    return usages


def _ordered(jobs: dict[str, int]) -> dict[str, int]:
    return {place: jobs.get(place, 0) for place in PLACES}
