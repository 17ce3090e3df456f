"""Enqueue shards, the third way to spread a queue, route in SQL: pinned here.

``awa.shard_for`` picks a lane shard inside one physical queue (see
:mod:`awa_django.domain.routing`): ``hashtext`` of the ordering key modulo
the shard count, or the job id when there is no key; 0 for one shard.
"""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def shard_for(shards: int | None, key: str | None, salt: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT awa.shard_for(%s, %s, %s)", [shards, key, salt])
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("shards", "key", "salt", "shard"),
    [
        (4, "customer-42", 0, 0),
        (4, "a", 0, 1),
        (4, "b", 99, 0),
        (4, "c", 0, 2),
        (8, "c", 0, 2),
        (4, None, 13, 1),
        (4, None, -13, 1),
        (1, "a", 5, 0),
        (None, "a", 5, 0),
    ],
)
def test_shard_for_is_the_documented_mapping(shards, key, salt, shard):
    assert shard_for(shards, key, salt) == shard
