"""Encryption keys: which ones the stored jobs still need, and resealing
the held jobs with the current one.

:func:`key_status` (``manage.py awa_keys status`` and the deploy check that
refuses to drop a key still in use) reads the key id stored in front of
each sealed value (:mod:`awa_django.domain.sealing`) and decrypts nothing,
so it runs in a process without the keys too.  :func:`reseal_held`
(``awa_keys reseal``) needs them: it opens and seals again.
"""

from __future__ import annotations

import logging

from django.db import transaction

from ..conf import awa_settings
from ..domain import sealing
from ..domain.records import KeyUsage
from ..exceptions import EncryptionError
from ..storage import keys as key_store
from ..storage.base import run
from .audit import audited
from .connection import database_alias

log = logging.getLogger("awa_django.ops")

#: Where sealed values are counted, in the order reports show them.
PLACES = ("ready", "running", "deferred", "waiting", "dlq", "history")


def key_status(*, database: str | None = None) -> list[KeyUsage]:
    """Every configured key (the sealing one first), then every key id the
    stored jobs need that is not configured, each with the jobs per place
    (``PLACES``) holding a value it sealed."""
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


def reseal_held(
    *, actor: str | None = None, batch: int = 500, database: str | None = None
) -> dict[str, int]:
    """Reseal the deferred and dead-lettered jobs with the first key of
    ``ENCRYPTION_KEYS``: every sealed value of theirs that another key
    sealed is opened and sealed again, so those keys stop being needed by
    them.  Returns the jobs rewritten per table, and under ``skipped`` how
    many were left as they are because a value of theirs does not open here
    (its key is missing from this process, or it was altered; their ids go
    to the audit entry and a warning).

    These are the tables whose rows change in place; the rings and the
    history turn over as retention passes.  A row that changes meanwhile (a
    deferred job promoted, a dead letter retried) is left to that change.
    Each batch of ``batch`` rows is its own transaction, so a long run
    holds no row long.
    """
    ring = sealing.keyring()
    done = dict.fromkeys(key_store.HELD, 0)
    skipped: list[int] = []
    with audited(
        actor,
        "reseal_held",
        "deferred and dead-lettered jobs",
        batched=True,
        database=database,
    ) as action:
        for place in key_store.HELD:
            after = 0
            while True:
                page = run(key_store.sealed_page(place, after, batch), database)
                if not page:
                    break
                after = page[-1].job_id
                with transaction.atomic(using=database_alias(database)):
                    for row in page:
                        try:
                            new = _resealed(ring, row)
                        except (EncryptionError, ValueError):
                            skipped.append(row.job_id)  # a key missing here, or altered
                            continue
                        if new != row and run(key_store.reseal(place, row, new), database):
                            done[place] += 1
        action.done(sum(done.values()))
        action.detail["resealed"] = done
        if skipped:
            action.detail["skipped"] = skipped[:MAX_SKIPPED_LISTED]
    if skipped:
        log.warning(
            "reseal: %s held jobs left as they are: a value of theirs does not open here "
            "(a key missing from ENCRYPTION_KEYS, or altered): %s",
            len(skipped),
            skipped[:MAX_SKIPPED_LISTED],
        )
    return {**done, "skipped": len(skipped)}


#: Ids of jobs reseal could not open, kept in its audit entry and log line.
MAX_SKIPPED_LISTED = 100


def _resealed(ring: sealing.Keyring, row: key_store.SealedRow) -> key_store.SealedRow:
    return key_store.SealedRow(
        row.job_id,
        ring.reseal_json(row.args) or row.args,
        ring.reseal_json(row.kwargs) or row.kwargs,
        ring.reseal_json(row.errors),
        ring.reseal_json(row.progress),
    )
