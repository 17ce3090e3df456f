"""The outbox relay: committed outbox entries become jobs, each exactly once.

A batch is three steps on two databases:

1. in a transaction on the outbox's database, read up to ``batch`` entries
   not relayed yet (this transaction's lock on the outbox slots is what keeps
   the slot emptying of step "maintain" away from entries in flight);
2. in one transaction on the queue's database, insert the entries' keys into
   the fence (``awa.outbox_fence``) and write a job for each key that insert
   was the first to write, with the id the producer reserved;
3. record the entries as relayed in the outbox, and commit there.

A relay killed after 2 and before 3 leaves the entries unrecorded; the next
batch reads them again, and the fence turns them away: no job is written
twice, none is lost.  Order: entries are relayed by their outbox sequence
number (see ``sql/schema/outbox.sql``).

Between batches the relay maintains the outbox's ring: it makes the next
slot current once the current one is :attr:`Relay.rotate_after` seconds old
and holds rows, and empties every other slot whose entries are all relayed
(first the fence partition of that slot in the queue database, then the
slot itself, under a lock no producer or relay holds).

It runs on Django's connections for the two aliases, so the same code serves
``manage.py awa_relay``, the test kit's ``drain()`` and ``ops``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError, InterfaceError, connections, transaction

from ..conf import awa_settings
from ..observability.hooks import observers
from ..storage import outbox as store
from ..storage.base import run

log = logging.getLogger("awa_django.relay")

#: Entries per batch: one COPY into the queue, one fence statement.
BATCH = 1000
#: Seconds a slot stays current (if it holds rows) before the ring turns.
ROTATE_AFTER = 1.0


@dataclass
class RelayStats:
    """What one relay has done since it started."""

    relayed: int = 0
    #: Entries read again after a relay died before recording them, which
    #: the fence turned away.
    fenced: int = 0
    batches: int = 0
    rotations: int = 0
    emptied: int = 0


class Relay:
    """Moves committed outbox entries to the queue database."""

    def __init__(
        self,
        *,
        outbox_database: str | None = None,
        queue_database: str | None = None,
        batch: int = BATCH,
        rotate_after: float = ROTATE_AFTER,
    ) -> None:
        settings = awa_settings()
        outbox_alias = outbox_database or settings.outbox_database
        if outbox_alias is None:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                "the relay needs AWA['OUTBOX_DATABASE'] (the application's database)"
            )
        self.outbox = outbox_alias
        self.queue = queue_database or settings.database
        self.batch = batch
        self.rotate_after = rotate_after
        self.stats = RelayStats()
        # Where the last read ended: its last entry and its snapshot (see
        # relay_pending); None: the next read starts from the beginning.
        self._resume: tuple[int, str] | None = None

    def relay_batch(self, after: tuple[int, str] | None = None) -> store.Batch:
        """Relay one batch (``after``: the previous batch's ``resume``, to read
        on from there); returns what it read."""
        with transaction.atomic(using=self.outbox):
            batch = run(store.pending(self.batch, after), self.outbox)
            entries = batch.entries
            if not entries:
                return batch
            written = run(store.relay_batch(entries), self.queue)
            run(store.mark_relayed(entries), self.outbox)
        self.stats.batches += 1
        self.stats.relayed += len(written)
        self.stats.fenced += len(entries) - len(written)
        return batch

    def relay_pending(self) -> int:
        """Relay batches until none is pending; the number of entries read.

        Each read goes on from where the previous one ended (this pass's or
        an earlier one's), so neither a backlog nor the relayed part of the
        current slot is read again at every batch; a read that finds nothing
        there reads once from the start (a gap in the numbers, from
        rolled-back transactions, that the bounded read stopped at), and so
        does the first pass after :meth:`maintain` or an error.
        """
        total, after = 0, self._resume
        while True:
            batch = self.relay_batch(after)
            read = len(batch.entries)
            total += read
            if batch.resume is not None:
                self._resume = batch.resume
            if read == self.batch:
                after = self._resume
            elif read == 0 and after is not None:
                after = None
            else:
                return total

    def maintain(self) -> None:
        """Turn the ring when its current slot is old enough, and empty the
        slots behind it whose entries are all relayed; with observers (a
        worker's metrics), report the outbox's depth and lag."""
        self._resume = None  # the next pass reads once from the start
        if observers.active:
            depth = run(store.depth(), self.outbox)
            observers.outbox_sampled(depth.pending, depth.lag_seconds)
        ring = run(store.ring(), self.outbox)
        for slot in ring.occupied:
            if slot != ring.slot and self._empty(slot):
                self.stats.emptied += 1
        if ring.slot in ring.occupied and ring.age_seconds >= self.rotate_after:
            if run(store.rotate(ring.slot), self.outbox):
                self.stats.rotations += 1

    def _empty(self, slot: int) -> bool:
        with transaction.atomic(using=self.outbox):
            if run(store.empty_slot(slot, truncate=False), self.outbox) != 0:
                return False  # locked by someone, or entries still to relay
            # The slot's lock is held until this block commits: no relay has
            # entries of it in flight, none can read them meanwhile.
            run(store.truncate_fence(slot), self.queue)
            run(store.empty_slot(slot, truncate=True), self.outbox)
        return True

    def _reconnect(self) -> None:
        self._resume = None
        for alias in (self.outbox, self.queue):
            with contextlib.suppress(DatabaseError, InterfaceError):
                connections[alias].close()

    def run(
        self,
        stop: threading.Event,
        *,
        poll: float = 1.0,
        wake: threading.Event | None = None,
    ) -> None:
        """Relay until ``stop`` is set (:func:`relay_all` empties the outbox
        once).  ``wake``: set by a LISTEN on the outbox channel; without it
        the relay polls every ``poll`` seconds."""
        last_maintained = 0.0
        failures = 0
        while not stop.is_set():
            try:
                self.relay_pending()
                now = time.monotonic()
                if now - last_maintained >= min(self.rotate_after, poll):
                    self.maintain()
                    last_maintained = now
                failures = 0
            except (DatabaseError, InterfaceError) as exc:
                # A database restarting, a connection cut: nothing half-done
                # survives (each step is a transaction, the fence covers the
                # gap between the two), so start over on new connections.
                failures += 1
                log.warning("relay: %s; retrying on new connections", exc)
                self._reconnect()
                stop.wait(min(0.1 * 2**failures, 5.0))
                continue
            if wake is None:
                stop.wait(poll)
            else:
                wake.wait(poll)
                wake.clear()


def listen(alias: str, wake: threading.Event, stop: threading.Event) -> None:
    """LISTEN on the outbox's channel (on a session of its own to ``alias``)
    and set ``wake`` at each notification, until ``stop``; reconnects after
    a lost connection (the relay polls meanwhile)."""
    import psycopg

    from ..storage.connection import conninfo

    while not stop.is_set():
        try:
            with psycopg.connect(conninfo(alias), autocommit=True) as conn:
                conn.execute("LISTEN awa_outbox")
                while not stop.is_set():
                    for _ in conn.notifies(timeout=0.5):
                        wake.set()
        except psycopg.Error as exc:
            log.warning("outbox LISTEN on %s lost (%s); polling until it is back", alias, exc)
            stop.wait(1.0)


def relay_all(*, outbox_database: str | None = None, queue_database: str | None = None) -> int:
    """Relay every committed entry now, in the calling thread (the test kit's
    ``drain()`` and ``manage.py awa_relay --once``); the number relayed.
    Nothing to do (0) when outbox mode is off."""
    if (outbox_database or awa_settings().outbox_database) is None:
        return 0
    relay = Relay(outbox_database=outbox_database, queue_database=queue_database)
    relay.relay_pending()
    relay.maintain()
    return relay.stats.relayed
