"""One routing for stripes and partitions: the documented mapping, pinned.

The figures were taken from the code before stripes and partitions shared
:mod:`awa_django.domain.routing`; a key must keep going where it went, in
every process and release (per-key order depends on it).
"""

from __future__ import annotations

import pytest

from awa_django import InvalidJob, PartitionedQueue
from awa_django.domain import routing, stripes
from awa_django.domain.partitioned import logical_name, registry, split_queue_option

# key -> its BLAKE2b-64 hash (big-endian), and that hash mod 4 and mod 8.
HASHES = [
    ("customer-42", 3738263782846221354, 2, 2),
    (b"\x00\xff", 12738201167342902500, 0, 4),
    (7, 16667848380713045890, 2, 2),
    ("", 16476032584258269876, 0, 4),
    ("é", 14635220546840893743, 3, 7),
]


@pytest.fixture
def payments():
    queue = PartitionedQueue("rt-payments", partitions=4)
    yield queue
    registry.pop("rt-payments", None)


@pytest.mark.parametrize(("key", "hashed", "mod4", "mod8"), HASHES)
def test_key_hash_is_blake2b_64(key, hashed, mod4, mod8):
    assert routing.key_hash(key) == hashed
    assert routing.by_key("q", routing.PARTITION, key, 4) == f"q:{mod4}"
    assert routing.by_key("q", routing.STRIPE, key, 8) == f"q#{mod8}"


def test_key_hash_refuses_other_keys():
    for bad in (True, 1.5, None):
        with pytest.raises(InvalidJob, match="routing key must be str, bytes or int"):
            routing.key_hash(bad)


def test_partitions_route_as_documented(payments):
    keys = ["customer-42", b"\x00\xff", 7, "a", "b", "c"]
    assert [payments.route_by_key(k) for k in keys] == [
        "rt-payments:2",
        "rt-payments:0",
        "rt-payments:2",
        "rt-payments:3",
        "rt-payments:1",
        "rt-payments:3",
    ]
    assert payments.physical_queues == tuple(f"rt-payments:{i}" for i in range(4))
    names = ["rt-payments:3", "rt-payments:4", "rt-payments", "rt-payments:", "rt-payments:x"]
    assert [logical_name(n) for n in names] == ["rt-payments", None, None, None, None]


def test_queue_option_splits_at_the_last_colon(payments):
    values = ["rt-payments:2", "rt-payments:2:8", "email:5", "email", "a:b:"]
    assert [split_queue_option(v) for v in values] == [
        ("rt-payments:2", ""),
        ("rt-payments:2", "8"),
        ("email", "5"),
        ("email", ""),
        ("a:b", ""),
    ]


def test_stripes_route_as_documented():
    keys = ["customer-42", "x00ff", "a", "b", "c"]
    assert [stripes.route("email", k, 8) for k in keys] == [
        "email#2",
        "email#4",
        "email#7",
        "email#5",
        "email#3",
    ]
    assert stripes.route_batch(["email", "email", "q"], ["a", "b", "c"], 4) == [
        "email#3",
        "email#1",
        "q#3",
    ]
    assert stripes.physical_queues("email", 3) == ("email", "email#0", "email#1", "email#2")
    assert stripes.physical_queues("email", 1) == ("email",)
    names = ["email#3", "email", "payments:2#1", "e#", "e#x"]
    assert [(stripes.logical_queue(n), stripes.stripe_index(n)) for n in names] == [
        ("email", 3),
        ("email", None),
        ("payments:2", 1),
        ("e", None),
        ("e", None),
    ]
