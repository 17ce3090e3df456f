"""The maintenance lease: the election of processes behind a transaction-mode pooler.

One row decides: a holder renews at the generation it won, a standby takes
the lease only once it expired (a new generation), and the fence
(``holds_lease``) turns false for a holder whose lease expired or was taken.
Expiry is driven by the lease length given, not by waiting: a length of 0
is a lease that has already run out.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from awa_django.conf import awa_settings
from awa_django.runtime.config import MaintenanceConfig
from awa_django.runtime.leadership.leader import LeaderConfig
from awa_django.runtime.leadership.lease import FencedRunner, LeadLostError, LeaseLeader
from awa_django.runtime.leadership.maintenance import Maintenance
from awa_django.storage import AsyncRunner, SyncRunner
from awa_django.storage import maintenance as store
from awa_django.storage.connection import conninfo

pytestmark = pytest.mark.django_db(transaction=True)

LONG = 60.0


async def claim(runtime: uuid.UUID, generation: int | None, length: float) -> int | None:
    """``claim_lease`` from a session of its own (another process's round)."""
    async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
        return await AsyncRunner(conn)(store.claim_lease(runtime, generation, length))


def test_one_holder_renews_and_a_standby_takes_only_an_expired_lease(reset_awa):
    run = SyncRunner()
    a, b = uuid.uuid4(), uuid.uuid4()
    assert run(store.claim_lease(a, None, LONG)) == 1
    assert run(store.claim_lease(b, None, LONG)) is None  # held
    assert run(store.claim_lease(a, 1, LONG)) == 1  # renewed, same term
    assert run(store.holds_lease(a, 1)) and not run(store.holds_lease(b, 1))
    assert run(store.claim_lease(a, 1, 0)) == 1  # renewed for no time: expired at once
    assert not run(store.holds_lease(a, 1))  # the fence is down
    assert run(store.claim_lease(b, None, LONG)) == 2  # taken: a new generation
    assert run(store.claim_lease(a, 1, LONG)) is None  # the old term cannot renew
    run(store.release_lease(a, 1))  # not a's to release: nothing changes
    assert run(store.holds_lease(b, 2))
    run(store.release_lease(b, 2))
    assert not run(store.holds_lease(b, 2))
    assert run(store.claim_lease(a, None, LONG)) == 3  # free at once after a release


def test_a_lease_leader_steps_down_when_its_lease_was_taken(reset_awa):
    changes: list[bool] = []

    async def on_change(leads: bool) -> None:
        changes.append(leads)

    def candidate() -> LeaseLeader:
        config = LeaderConfig(0.2, conninfo=conninfo(), runtime_id=uuid.uuid4(), depose_after=LONG)
        return LeaseLeader(config, on_change)

    async def main() -> None:
        first, second = candidate(), candidate()
        try:
            assert await first.run_once() and first.generation == 1
            assert not await second.run_once()
            # first's lease runs out (as it would while its process is stopped)
            # and second takes it.
            await claim(first.config.runtime_id, 1, 0)
            assert await second.run_once() and second.generation == 2
            assert not await first.run_once()
            assert (first.is_leader, first.generation, first.terms) == (False, None, 1)
            await second.stop()  # releases: first takes over on its next round
            assert await first.run_once() and first.generation == 3
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(main())
    assert changes == [True, True, False, False, True, False]


@pytest.mark.needs_session  # terminates the backend its connection was given
def test_a_leader_that_lost_its_connection_renews_the_same_lease(reset_awa):
    """A lost connection ends the term (the leader cannot tell whether it
    still leads), but the next round renews the lease it still holds: no
    wait for it to expire, no new generation."""

    async def main() -> None:
        config = LeaderConfig(0.2, conninfo=conninfo(), runtime_id=uuid.uuid4(), depose_after=LONG)
        leader = LeaseLeader(config)
        try:
            assert await leader.run_once() and leader.generation == 1
            assert leader._conn is not None
            pid = leader._conn.info.backend_pid
            async with await psycopg.AsyncConnection.connect(conninfo(), autocommit=True) as conn:
                await conn.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert not await leader.run_once()
            assert (leader.is_leader, leader.generation) == (False, None)
            assert await leader.run_once() and leader.generation == 1
            assert leader.terms == 2
        finally:
            await leader.stop()

    asyncio.run(main())


def test_a_deposed_leaders_tasks_are_fenced_off(reset_awa):
    config = MaintenanceConfig(awa_settings(), conninfo(), pooled=True)
    assert config.lease_election

    async def main() -> None:
        maintenance = Maintenance(config)
        assert isinstance(maintenance.leader, LeaseLeader)
        try:
            assert await maintenance.elect()
            assert maintenance.pool is not None
            run = FencedRunner(maintenance.pool, maintenance.leader)
            assert await run(store.holds_lead()) is False  # through the fence (no lock here)
            await claim(config.runtime_id, maintenance.leader.generation, 0)
            await claim(uuid.uuid4(), None, LONG)
            with pytest.raises(LeadLostError):
                await run(store.holds_lead())
            assert not await maintenance.elect()
        finally:
            await maintenance.stop()

    asyncio.run(main())
