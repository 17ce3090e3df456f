"""The connection footprint of a worker process and MAX_CONNECTIONS_PER_PROCESS."""

from __future__ import annotations

import dataclasses

import pytest

from awa_django.conf import awa_settings
from awa_django.domain.connections import (
    MAINTENANCE_POOL,
    OUTBOX_RELAY,
    WORKER_POOL_SERVICES,
    footprint,
)
from awa_django.exceptions import InvalidJob
from awa_django.runtime.config import build_config


def test_without_a_limit_each_permit_may_hold_a_handler_connection():
    found = footprint(claimers=2, permits=30, listens=True, maintenance=True, relays=False)
    assert found.as_dict() == {
        "pool": 2 + WORKER_POOL_SERVICES,
        "handler_threads": 30,
        "listener": 1,
        "election": 1,
        "maintenance_pool": MAINTENANCE_POOL,
        "outbox_relay": 0,
    }
    assert found.total == 6 + 30 + 2 + MAINTENANCE_POOL


def test_in_outbox_mode_the_leader_counts_the_relay_too():
    found = footprint(claimers=2, permits=30, listens=True, maintenance=True, relays=True)
    assert found.outbox_relay == OUTBOX_RELAY
    assert found.leader_only == MAINTENANCE_POOL + OUTBOX_RELAY
    assert found.total == 6 + 30 + 2 + MAINTENANCE_POOL + OUTBOX_RELAY
    # A process that never leads never relays.
    assert footprint(claimers=2, permits=30, listens=True, maintenance=False, relays=True) == (
        footprint(claimers=2, permits=30, listens=True, maintenance=False, relays=False)
    )
    # Under a limit the relay comes off the handlers' share, as the pool does.
    leader = {"claimers": 2, "permits": 30, "listens": True, "maintenance": True, "relays": True}
    capped = footprint(**leader, limit=20)
    assert (capped.handler_threads, capped.total) == (20 - 6 - 2 - 8 - OUTBOX_RELAY, 20)
    with pytest.raises(InvalidJob, match=r"needs 19 connections.*3 outbox relay"):
        footprint(**leader, limit=19)


def test_a_limit_caps_the_handler_connections_and_nothing_else():
    capped = footprint(
        claimers=2, permits=30, listens=True, maintenance=True, relays=False, limit=20
    )
    assert (capped.pool, capped.handler_threads, capped.total) == (6, 20 - 6 - 2 - 8, 20)
    roomy = footprint(
        claimers=2, permits=3, listens=True, maintenance=True, relays=False, limit=100
    )
    assert roomy.handler_threads == 3  # never more than the permits
    polling = footprint(
        claimers=1, permits=10, listens=False, maintenance=False, relays=False, limit=8
    )
    assert (polling.listener, polling.election, polling.handler_threads) == (0, 0, 3)


def test_a_limit_that_leaves_no_handler_connection_is_refused_with_the_breakdown():
    with pytest.raises(InvalidJob, match=r"needs 16 connections besides its handlers") as found:
        footprint(claimers=2, permits=30, listens=True, maintenance=True, relays=False, limit=16)
    assert "raise it to 17" in str(found.value)


def test_the_worker_config_applies_the_setting():
    settings = dataclasses.replace(awa_settings(), max_connections_per_process=12)
    config = build_config(settings, "host=x", queues=["q:40"], maintenance=False)
    assert config.connections.total == 12
    assert config.connections.handler_threads == 12 - 5 - 1
    with pytest.raises(InvalidJob, match="MAX_CONNECTIONS_PER_PROCESS is 12"):
        build_config(settings, "host=x", queues=["q:40"])  # + election and maintenance pool
