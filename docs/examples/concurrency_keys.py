"""The concurrency-keys how-to's example (run by tests/beyond/test_docs_concurrency.py)."""

from __future__ import annotations

# [declare]
from awa_django import job


@job(
    queue="sync",
    concurrency_key=lambda account_id, **_: f"account-{account_id}",
    concurrency_limit=2,
)
def sync_account(account_id: int, full: bool = False) -> None:
    """Push one account's changes to the partner's API."""


# [/declare]


def enqueue_some():
    # [enqueue]
    sync_account.enqueue(42)  # at most 2 attempts for account 42 run at once
    sync_account.enqueue(42, full=True)  # the same key: shares those 2 slots
    # One call under another key and limit:
    sync_account.using(concurrency_key="partner-maintenance", concurrency_limit=1).enqueue(7)
    # [/enqueue]
