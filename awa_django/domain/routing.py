"""Routing: the physical queue a job of a spread-out logical queue goes to.

Three ways spread a hot queue, and two of them name physical queues:

* stripes (:mod:`awa_django.domain.stripes`, ``AWA["QUEUE_STRIPE_COUNT"]``): queue
  ``q`` stored as ``q#0`` .. ``q#N-1``, invisible to users;
* partitions (:class:`awa_django.PartitionedQueue`): queue ``q`` declared as
  ``q:0`` .. ``q:N-1``, ordinary queues the producer picks from.

Both route the same way: member ``i`` of ``queue`` is ``queue`` + separator
+ ``i`` (:func:`member`), and a key goes to member ``key_hash(key) % N``
(:func:`by_key`), where :func:`key_hash` is the first 8 bytes of BLAKE2b of
the key's bytes read big-endian -- not Python's ``hash()``, which is salted
per process -- so every process, host and Python version sends a key to the
same member.  Reading a name back splits it at the last separator
(:func:`split`); ``#`` is not allowed in a queue name, so a striped name has
one, while a partitioned name may hold other ``:`` before its index.

The third way, enqueue shards (``ops.set_enqueue_shards``), splits one
physical queue's lanes rather than naming queues: the shard is picked in
SQL, where the lane is reserved (``awa.shard_for``: ``hashtext`` of the
ordering key, or the job id, modulo the shard count), so no Python computes
it.

This module is pure: no settings, no state (the round-robin over stripes
lives with them), no ORM, no SQL.
"""

from __future__ import annotations

import hashlib

from ..exceptions import InvalidJob

#: Separates a logical queue from its stripe number (``email#3``).
STRIPE = "#"
#: Separates a partitioned queue from its partition number (``payments:3``).
PARTITION = ":"


def key_hash(key: str | bytes | int) -> int:
    """A 64-bit hash of a routing key that every process computes alike
    (BLAKE2b of its bytes; ``str`` and ``int`` keys as their UTF-8 text)."""
    if isinstance(key, bool) or not isinstance(key, str | bytes | int):
        raise InvalidJob(f"routing key must be str, bytes or int, got {key!r}")
    raw = key if isinstance(key, bytes) else str(key).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


def member(queue: str, separator: str, index: int) -> str:
    """The physical queue of member ``index`` of ``queue``."""
    return f"{queue}{separator}{index}"


def members(queue: str, separator: str, count: int) -> tuple[str, ...]:
    """Members ``0`` .. ``count - 1`` of ``queue``."""
    return tuple(member(queue, separator, i) for i in range(count))


def by_key(queue: str, separator: str, key: str | bytes | int, count: int) -> str:
    """The member of ``queue`` (of ``count``) that ``key`` goes to."""
    return member(queue, separator, key_hash(key) % count)


def split(name: str, separator: str) -> tuple[str, str]:
    """``(logical queue, index text)`` of a physical name, cut at the last
    ``separator``; ``(name, "")`` for a name without one."""
    logical, sep, index = name.rpartition(separator)
    return (logical, index) if sep else (name, "")
