"""A job enqueued only once at a time (the unique how-to; run by the test suite)."""

from __future__ import annotations

# [unique]
from awa_django import Unique, UniqueConflict, job


@job(queue="default")
def sync_account(account_id: int) -> None:
    """Fetch the account's data from the CRM."""


def request_sync(account_id: int) -> int | None:
    """Queue a sync of the account unless one is queued or running; returns its job id."""
    try:
        return sync_account.using(unique=Unique()).enqueue(account_id).id
    except UniqueConflict as conflict:
        print("already queued as job", conflict.existing_id)
        return conflict.existing_id


# [/unique]
