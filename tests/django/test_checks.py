"""Configuration parsing and the system checks."""

from __future__ import annotations

import datetime as dt
import uuid

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from awa_django.conf import AwaSettings, QueueConfig, RateLimit, awa_settings, parse_settings
from awa_django.storage.connection import conninfo
from tests.conftest import database_url, manage


def problems(raw):
    return [str(problem) for problem in parse_settings(raw)[1]]


def test_defaults_follow_the_spec():
    parsed, found = parse_settings({})
    assert found == []
    assert parsed == AwaSettings()
    assert parsed.queues["default"] == QueueConfig("default")
    assert (parsed.queue_slot_count, parsed.claim_slot_count, parsed.lease_slot_count) == (16, 8, 8)
    assert parsed.heartbeat_staleness == 90 and parsed.completion_batch_size == 512
    assert parsed.effective_claim_rotate_interval == parsed.queue_rotate_interval
    queue = parsed.queue("undeclared")
    assert (queue.max_workers, queue.deadline, queue.poll_interval, queue.claim_batch_size) == (
        50,
        300,
        0.2,
        512,
    )


def test_values_are_parsed_into_types():
    parsed, found = parse_settings(
        {
            "QUEUES": {"email": {"max_workers": 20, "rate_limit": (50.0, 50), "deadline": 600}},
            "HEARTBEAT_INTERVAL": dt.timedelta(seconds=5),
            "HEARTBEAT_STALENESS": 20,
            "QUEUE_DLQ": {"payments": True},
            "CLAIM_ROTATE_INTERVAL": 2.5,
        }
    )
    assert found == []
    assert parsed.queues["email"].rate_limit == RateLimit(50.0, 50)
    assert parsed.heartbeat_interval == 5.0
    assert parsed.dlq_enabled("payments") and not parsed.dlq_enabled("email")
    assert parsed.effective_claim_rotate_interval == 2.5


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"QUEUE": {}}, "AWA[QUEUE]"),
        ({"HEARTBEAT_INTERVAL": "30s"}, "AWA[HEARTBEAT_INTERVAL]"),
        ({"QUEUE_SLOT_COUNT": 1}, "AWA[QUEUE_SLOT_COUNT]"),
        ({"MAX_PAYLOAD_BYTES": True}, "AWA[MAX_PAYLOAD_BYTES]"),
        ({"QUEUES": {"email": {"max_wrokers": 3}}}, "AWA[QUEUES]['email']['max_wrokers']"),
        ({"QUEUES": {"email": {"max_workers": 0}}}, "AWA[QUEUES]['email']['max_workers']"),
        ({"QUEUES": {"email": {"rate_limit": 5}}}, "AWA[QUEUES]['email']['rate_limit']"),
        ({"QUEUES": {"bad name": {}}}, "AWA[QUEUES]['bad name']"),
        ({"QUEUE_DLQ": {"payments": "yes"}}, "AWA[QUEUE_DLQ]['payments']"),
        ({"DLQ_ENABLED_BY_DEFAULT": 1}, "AWA[DLQ_ENABLED_BY_DEFAULT]"),
        ({"HEARTBEAT_INTERVAL": 30, "HEARTBEAT_STALENESS": 31}, "AWA[HEARTBEAT_STALENESS]"),
    ],
)
def test_bad_settings_are_reported_naming_the_key(raw, key):
    found = problems(raw)
    assert len(found) == 1
    assert found[0].startswith(key), found


def test_manage_py_check_fails_on_bad_settings_and_names_each_key():
    with override_settings(AWA={"QUEUES": {"email": {"max_wrokers": 3}}, "PROMOTE": 1}):
        with pytest.raises(SystemCheckError) as excinfo:
            call_command("check")
        with pytest.raises(Exception, match="max_wrokers"):
            awa_settings()
    message = str(excinfo.value)
    assert "awa_django.E001" in message
    assert "max_wrokers" in message and "PROMOTE" in message


def test_override_settings_is_picked_up():
    assert "tmp-queue" not in awa_settings().queues
    with override_settings(AWA={"QUEUES": {"tmp-queue": {"max_workers": 3}}}):
        assert awa_settings().queues["tmp-queue"].max_workers == 3
    assert "tmp-queue" not in awa_settings().queues


def test_check_requires_a_postgresql_database():
    with override_settings(AWA={"DATABASE": "missing"}), pytest.raises(SystemCheckError) as exc:
        call_command("check")
    assert "awa_django.E002" in str(exc.value)


def test_check_with_database_reports_a_missing_substrate(db):
    name = f"test_awa_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = database_url().replace(f"/{_current_name()}", f"/{name}", 1)
        result = manage("check", "--database", "default", database_url_override=url)
        assert result.returncode != 0
        assert "awa_django.E003" in result.stderr and "not installed" in result.stderr

        migrated = manage("migrate", "--verbosity", "0", database_url_override=url)
        assert migrated.returncode == 0, migrated.stderr
        result = manage("check", "--database", "default", database_url_override=url)
        assert result.returncode == 0, result.stderr
    finally:
        with psycopg.connect(conninfo(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _current_name() -> str:
    from django.db import connection

    return connection.settings_dict["NAME"]
