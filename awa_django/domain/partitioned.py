"""``PartitionedQueue``: one hot logical queue spread over several physical queues.

A queue's lanes serialise producers (FIFO per lane) and its claimers share
one set of claim heads.  When one queue carries more than one claim loop
can take, split it: ``PartitionedQueue("payments", partitions=4)`` names the
physical queues ``payments:0`` .. ``payments:3``, each an ordinary queue with
its own lanes, claim heads and workers.  Producers pick a partition --
``route_by_key`` keeps every job of one key (a customer, an account) on one
partition, so per-key FIFO holds; ``route_by_index`` spreads round-robin or
by any scheme of the caller's.

The key hash is BLAKE2b of the key's bytes, not Python's ``hash()`` (which is
salted per process): every process, on every host and Python version, sends
a key to the same partition.  Changing ``partitions`` re-routes keys, so
drain the old layout first when per-key order matters.

Declaring one registers it: ``awa_worker --queue payments`` then runs all
four physical queues (and ``payments`` itself, so a job enqueued to it
without routing still runs), and ``AWA["QUEUES"]["payments"]`` options apply to
each of them (a physical queue declared on its own, ``"payments:2"``, keeps
its own options).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ..exceptions import InvalidJob
from . import routing
from .payload import check_queue

#: Most partitions one logical queue may have.
MAX_PARTITIONS = 1024

#: Partitioned queues declared in this process, by logical name.
registry: dict[str, PartitionedQueue] = {}


@dataclass(frozen=True)
class PartitionedQueue:
    """A logical queue ``name`` over ``partitions`` physical queues ``name:i``."""

    name: str
    partitions: int

    def __post_init__(self) -> None:
        if not isinstance(self.partitions, int) or isinstance(self.partitions, bool):
            raise InvalidJob(f"partitions must be an integer, got {self.partitions!r}")
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise InvalidJob(f"partitions must be 1 to {MAX_PARTITIONS}, got {self.partitions}")
        check_queue(self.name)
        check_queue(routing.member(self.name, routing.PARTITION, self.partitions - 1))
        known = registry.get(self.name)
        if known is not None and known.partitions != self.partitions:
            raise InvalidJob(
                f"queue {self.name!r} is already partitioned {known.partitions} ways; "
                f"declare it once (got partitions={self.partitions})"
            )
        registry[self.name] = self

    @property
    def physical_queues(self) -> tuple[str, ...]:
        """``name:0`` .. ``name:{partitions - 1}``."""
        return routing.members(self.name, routing.PARTITION, self.partitions)

    def route_by_index(self, index: int) -> str:
        """The physical queue of partition ``index`` (0-based)."""
        if not isinstance(index, int) or isinstance(index, bool):
            raise InvalidJob(f"partition index must be an integer, got {index!r}")
        if not 0 <= index < self.partitions:
            raise InvalidJob(f"partition index must be 0 to {self.partitions - 1}, got {index}")
        return routing.member(self.name, routing.PARTITION, index)

    def route_by_key(self, key: str | bytes | int) -> str:
        """The physical queue for ``key``: the same for the same key in every process."""
        return routing.by_key(self.name, routing.PARTITION, key, self.partitions)


def split_queue_option(value: str, known: Collection[str] = ()) -> tuple[str, str]:
    """``(name, max_workers text)`` of ``--queue NAME[:MAX_WORKERS]``.

    A name may itself contain ``:``: the whole value is the name when it is a
    queue of ``known`` (the declared queues) or a partition of a declared
    partitioned queue (``payments:2``); otherwise whatever follows the last
    ``:`` is MAX_WORKERS (``payments:2:8``, ``email:5``).
    """
    if value in known or logical_name(value) is not None:
        return value, ""
    return routing.split(value, routing.PARTITION)


def expand(name: str) -> tuple[str, ...]:
    """The queues a worker runs for ``name``: itself, and its partitions when it
    is partitioned (the logical queue too, so a job enqueued to it without
    routing is not stranded)."""
    partitioned = registry.get(name)
    return (name, *partitioned.physical_queues) if partitioned is not None else (name,)


def logical_name(queue: str) -> str | None:
    """The partitioned queue ``queue`` belongs to, if any."""
    name, index = routing.split(queue, routing.PARTITION)
    known = registry.get(name) if index else None
    if known is not None and index.isdigit() and int(index) < known.partitions:
        return name
    return None
