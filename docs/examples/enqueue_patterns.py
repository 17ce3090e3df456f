"""Transactional enqueue patterns (the how-to; run by the test suite)."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import User
from django.db import connection, transaction

import awa_django
from awa_django import EnqueuedJob, job


@job(queue="email")
def notify_deactivated(user_id: int) -> None:
    User.objects.get(pk=user_id).email_user("Account closed", "Your account was closed.")


# [late]
def deactivate(user_ids: list[int]) -> list[int]:
    with transaction.atomic():
        # The slow part first: no lane is held while it runs ...
        User.objects.filter(pk__in=user_ids).update(is_active=False)
        # ... then every job in one COPY, as the last statement before commit.
        return awa_django.enqueue_many(notify_deactivated.prepare(pk) for pk in user_ids)


# [/late]


# [options]
def remind_later(user_id: int) -> EnqueuedJob:
    return notify_deactivated.using(
        priority=1,  # 1 (most urgent) .. 4; default 2
        run_in=dt.timedelta(hours=1),  # or run_at=<aware datetime>
        ordering_key=f"user:{user_id}",  # same key, same lane: FIFO kept when sharded
        tags=["reminder"],
        metadata={"source": "support"},
    ).enqueue(user_id)


# [/options]


# [shards]
def set_enqueue_shards(queue: str, shards: int) -> None:
    """Split ``queue`` into ``shards`` lanes per priority (1 to 64)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa.queue_meta (queue, enqueue_shards) VALUES (%s, %s) "
            "ON CONFLICT (queue) DO UPDATE "
            "SET enqueue_shards = EXCLUDED.enqueue_shards, updated_at = now()",
            [queue, shards],
        )


# [/shards]
