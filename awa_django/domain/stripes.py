"""Queue stripes: each logical queue stored as ``QUEUE_STRIPE_COUNT`` physical queues.

A queue's lanes serialise its producers and its claim heads are shared by
every claimer.  With ``AWA["QUEUE_STRIPE_COUNT"] = N`` (N > 1) the whole
fleet stores each logical queue ``q`` as the physical queues ``q#0`` ..
``q#N-1``, each with its own lanes, enqueue heads and claim heads, so N
times as many producers and claimers can work on it side by side.  Unlike a
:class:`~awa_django.PartitionedQueue` the stripes are invisible: jobs are
enqueued to ``q``, workers run ``q``, reads report ``q``; only the storage
sees ``q#2``.

Producers pick the stripe (:func:`route`, :func:`route_batch`): a job with
an ``ordering_key`` always goes to the stripe its key hashes to (BLAKE2b,
the same in every process), so jobs of one key keep their order; the
others go round-robin, one stripe per enqueue call (an ``enqueue_many``
batch takes one stripe, so concurrent batches hold different lanes).
There is no order between stripes: a job enqueued later on one stripe may
run before an earlier one on another, as with enqueue shards.

The logical name ``q`` itself stays a stripe of its own (:func:`physical_queues`
lists it first): jobs written by paths that do not route -- periodic
fires, batch-operation moves, ``dlq_retry(queue=...)``, SQL producers --
land there, and workers claim it with the others.

Workers claim every stripe of a queue in one statement
(``awa.claim_ready``), starting each claim one stripe further on
(:class:`Rotation`), so claimers spread over the stripes and none is
starved.  Reads filter by :func:`physical_queues` and report
:func:`logical_queue` (the name up to ``#``; ``#`` is not allowed in a
queue name, so the suffix is unambiguous).  Pause, resume and drain apply
to every stripe.

With N = 1 (the default) a queue is stored under its own name and nothing
here changes a thing.  Lowering N leaves jobs on the stripes dropped:
workers look for such stripes when they start and keep claiming them until
they are empty, but ``ops`` filters by queue cover the configured stripes
only.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from ..conf import awa_settings
from . import routing

#: Separates a logical queue name from its stripe number (``email#3``).
SEPARATOR = routing.STRIPE
#: The most stripes ``QUEUE_STRIPE_COUNT`` allows.
MAX_STRIPES = 64

# Round-robin over stripes for jobs without an ordering key, from a random
# start so that processes do not move in step.  next() on itertools.count is
# atomic under the GIL, so threads of one process share it safely.
_turns = itertools.count(random.randrange(MAX_STRIPES))  # noqa: S311 (spread, not secret)


def stripe_count() -> int:
    """``AWA["QUEUE_STRIPE_COUNT"]``: 1 means unstriped."""
    return awa_settings().queue_stripe_count


def stripe_name(queue: str, index: int) -> str:
    """The physical queue of stripe ``index`` of ``queue``."""
    return routing.member(queue, SEPARATOR, index)


def physical_queues(queue: str, count: int | None = None) -> tuple[str, ...]:
    """Where the jobs of logical ``queue`` are stored: ``(queue,)`` when
    unstriped, else ``queue`` itself (jobs of paths that do not route) and
    its ``count`` stripes (default ``QUEUE_STRIPE_COUNT``)."""
    n = stripe_count() if count is None else count
    if n <= 1:
        return (queue,)
    return (queue, *routing.members(queue, SEPARATOR, n))


def physical_names(queues: Iterable[str], count: int | None = None) -> list[str]:
    """:func:`physical_queues` of each of ``queues``, in order."""
    n = stripe_count() if count is None else count
    return [name for queue in queues for name in physical_queues(queue, n)]


def logical_queue(name: str) -> str:
    """The logical queue a physical queue belongs to (its name up to ``#``)."""
    return routing.split(name, SEPARATOR)[0]


def stripe_index(name: str) -> int | None:
    """The stripe number of a physical queue, or None for a logical name."""
    index = routing.split(name, SEPARATOR)[1]
    return int(index) if index.isdigit() else None


def route(queue: str, ordering_key: str | None, count: int | None = None) -> str:
    """The physical queue a new job of ``queue`` is written to: the stripe
    of its ordering key, or the next stripe round-robin."""
    n = stripe_count() if count is None else count
    if n <= 1:
        return queue
    if ordering_key is not None:
        return routing.by_key(queue, SEPARATOR, ordering_key, n)
    return stripe_name(queue, next(_turns) % n)


def route_batch(
    queues: Sequence[str], ordering_keys: Sequence[str | None], count: int | None = None
) -> list[str]:
    """:func:`route` for a batch: jobs with a key go to their key's stripe,
    the others of one queue all to one stripe (round-robin per batch), so a
    batch holds as few lanes as it can while it is open."""
    n = stripe_count() if count is None else count
    if n <= 1:
        return list(queues)
    shared: dict[str, str] = {}
    routed = []
    for queue, key in zip(queues, ordering_keys, strict=True):
        if key is not None:
            routed.append(routing.by_key(queue, SEPARATOR, key, n))
            continue
        stripe = shared.get(queue)
        if stripe is None:
            stripe = shared[queue] = stripe_name(queue, next(_turns) % n)
        routed.append(stripe)
    return routed


def fold(counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """``physical queue -> state -> n`` summed into ``logical queue -> state -> n``."""
    folded: dict[str, dict[str, int]] = defaultdict(dict)
    for name, states in counts.items():
        into = folded[logical_queue(name)]
        for state, n in states.items():
            into[state] = into.get(state, 0) + n
    return dict(folded)


class Rotation:
    """The physical queues one claimer visits, in the order of its next claim.

    Each claim starts one stripe further on, from a random first stripe, so
    claim loops of a queue (in one process or many) start on different
    stripes and take different lanes, and each stripe is first in turn:
    none waits behind a busy one for long.
    """

    def __init__(self, queues: Sequence[str]) -> None:
        self._queues = tuple(queues)
        # Any start will do: it only spreads claimers, it guards nothing.
        self._start = random.randrange(len(self._queues)) if self._queues else 0  # noqa: S311

    @property
    def queues(self) -> tuple[str, ...]:
        return self._queues

    def add(self, queues: Iterable[str]) -> None:
        """Visit these physical queues too (stripes left over from a larger count)."""
        self._queues += tuple(q for q in queues if q not in self._queues)

    def next(self) -> tuple[str, ...]:
        """The queues of the next claim, starting one further on than the last one."""
        n = len(self._queues)
        if n <= 1:
            return self._queues
        start, self._start = self._start % n, self._start + 1
        return self._queues[start:] + self._queues[:start]
