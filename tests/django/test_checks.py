"""Configuration parsing and the system checks."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import override_settings

from awa_django import conf
from awa_django.checks import check_settings
from awa_django.conf import (
    NOT_IMPLEMENTED,
    NOT_IMPLEMENTED_QUEUE_OPTIONS,
    AwaSettings,
    QueueConfig,
    RateLimit,
    awa_settings,
    parse_settings,
    unimplemented_settings,
)
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


def test_the_session_database_must_be_a_direct_postgresql_alias():
    with (
        override_settings(AWA={"SESSION_DATABASE": "missing"}),
        pytest.raises(SystemCheckError) as exc,
    ):
        call_command("check")
    assert "AWA[SESSION_DATABASE]: alias 'missing' is not in settings.DATABASES" in str(exc.value)
    default = settings.DATABASES["default"]
    saved = default.get("DISABLE_SERVER_SIDE_CURSORS", False)
    default["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        with override_settings(AWA={"SESSION_DATABASE": "default"}):
            with pytest.raises(SystemCheckError) as exc:
                call_command("check")
    finally:
        default["DISABLE_SERVER_SIDE_CURSORS"] = saved
    assert "LISTEN and the election need a direct connection" in str(exc.value)


def test_the_worker_runs_the_awa_settings_checks_itself():
    """awa_worker skips the project's system checks (they would sit before its
    first claim) but not awa_django's own: an error stops it before it
    connects, a warning is printed."""
    with override_settings(AWA={"DATABASE": "missing"}):
        with pytest.raises(CommandError, match=r"awa_django\.E002"):
            call_command("awa_worker", "--burst", stderr=io.StringIO())
    with override_settings(AWA={"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_STALENESS": 25}):
        stderr = io.StringIO()
        with pytest.raises(CommandError, match="awa_no_such_module"):  # after the checks
            call_command("awa_worker", "--burst", "--import", "awa_no_such_module", stderr=stderr)
        assert "awa_django.W003" in stderr.getvalue()


# A valid value other than the default for each key the registry may hold.
NON_DEFAULT: dict[str, Any] = {
    "QUEUE_STRIPE_COUNT": 4,
    "CALLBACK_HMAC_SECRET": "s3cret",
    "CALLBACK_RESCUE_INTERVAL": dt.timedelta(seconds=5),
    "ADMIN_READ_ONLY": True,
    "DESCRIPTOR_RETENTION": 3600,
    "TERMINAL_COUNT_ROLLUP_INTERVAL": 5,
}


def test_the_unimplemented_registry_names_accepted_settings():
    assert NOT_IMPLEMENTED.keys() <= conf._TOP_KEYS.keys()
    assert NOT_IMPLEMENTED_QUEUE_OPTIONS.keys() <= conf._QUEUE_KEYS.keys()


def _warnings(raw: dict[str, Any]) -> list[str]:
    with override_settings(AWA=raw):
        messages = check_settings()
    assert all(m.id == "awa_django.W001" and not m.is_serious() for m in messages), messages
    return [m.msg for m in messages]


@pytest.mark.parametrize("key", sorted(NOT_IMPLEMENTED))
def test_an_unimplemented_setting_warns_naming_the_key(key):
    reason = NOT_IMPLEMENTED[key]
    found = _warnings({key: NON_DEFAULT[key]})
    assert found == [f"AWA[{key}]: is accepted but has no effect yet in this version ({reason})"]


# Every queue option is implemented now; NOT_IMPLEMENTED_QUEUE_OPTIONS stays
# as the place to list one that is accepted before it works (it would need a
# test here like the one above).


def test_unimplemented_settings_at_their_defaults_do_not_warn():
    defaults, queue = AwaSettings(), QueueConfig("email")
    raw: dict[str, Any] = {key: getattr(defaults, key.lower()) for key in NOT_IMPLEMENTED}
    raw["QUEUES"] = {"email": {opt: getattr(queue, opt) for opt in NOT_IMPLEMENTED_QUEUE_OPTIONS}}
    parsed, found = parse_settings(raw)
    assert found == []
    assert unimplemented_settings(parsed) == []
    assert _warnings(raw) == []


def test_manage_py_check_shows_w001_without_failing():
    if not NOT_IMPLEMENTED:
        pytest.skip("every accepted setting is implemented")
    key = sorted(NOT_IMPLEMENTED)[0]
    stderr = io.StringIO()
    # The test project's encrypted jobs need their key (or E006 fails the check).
    awa = {key: NON_DEFAULT[key], "ENCRYPTION_KEYS": settings.AWA["ENCRYPTION_KEYS"]}
    with override_settings(AWA=awa):
        call_command("check", stderr=stderr)
    assert "awa_django.W001" in stderr.getvalue() and key in stderr.getvalue()
    with override_settings(AWA=awa), pytest.raises(SystemCheckError):
        call_command("check", fail_level="WARNING")


def test_weighted_mode_settings_are_implemented_and_do_not_warn():
    raw = {
        "GLOBAL_MAX_WORKERS": 8,
        "QUEUES": {"email": {"min_workers": 2, "weight": 3, "claimers": 2}, "reports": {}},
    }
    parsed, found = parse_settings(raw)
    assert found == [] and parsed.global_max_workers == 8
    assert unimplemented_settings(parsed) == []
    assert _warnings(raw) == []


@pytest.mark.parametrize(
    ("raw", "key", "message"),
    [
        (
            {"GLOBAL_MAX_WORKERS": 4, "QUEUES": {"a": {"min_workers": 3}, "b": {"min_workers": 2}}},
            "AWA[GLOBAL_MAX_WORKERS]",
            "4 is less than the min_workers of QUEUES together (5)",
        ),
        (
            {"GLOBAL_MAX_WORKERS": 40, "QUEUES": {"a": {"min_workers": 6, "max_workers": 5}}},
            "AWA[QUEUES]['a']['min_workers']",
            "6 is more than the queue's max_workers (5)",
        ),
        ({"QUEUES": {"a": {"claimers": 65}}}, "AWA[QUEUES]['a']['claimers']", "must be <= 64"),
    ],
)
def test_impossible_capacities_are_errors_naming_the_key(raw, key, message):
    (found,) = problems(raw)
    assert found.startswith(key) and message in found, found
    with override_settings(AWA=raw), pytest.raises(SystemCheckError, match=r"awa_django\.E001"):
        call_command("check")


def test_weights_without_a_shared_pool_warn():
    with override_settings(AWA={"QUEUES": {"email": {"weight": 2, "min_workers": 1}}}):
        messages = check_settings()
    assert [(m.id, m.msg.split(":")[0]) for m in messages] == [
        ("awa_django.W004", "AWA[QUEUES]['email']['min_workers']"),
        ("awa_django.W004", "AWA[QUEUES]['email']['weight']"),
    ]
    assert "no effect without GLOBAL_MAX_WORKERS" in messages[0].msg


def test_the_test_project_settings_do_not_warn():
    stderr = io.StringIO()
    call_command("check", stderr=stderr)
    assert "awa_django" not in stderr.getvalue()


@contextlib.contextmanager
def throwaway_database() -> Iterator[str]:
    """A new empty database; yields its URL for manage.py subprocesses."""
    name = f"test_awa_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        with psycopg.connect(conninfo(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_an_unmigrated_database_warns_without_blocking_migrate(db):
    with throwaway_database() as url:
        result = manage("check", "--database", "default", database_url_override=url)
        assert result.returncode == 0, result.stderr
        assert "awa_django.W002" in result.stderr and "not installed" in result.stderr
        assert "migrate awa_django --database default" in result.stderr
        # migrate --plan applies nothing, so it still warns; a migrate of
        # another app leaves awa_django pending and warns too.
        for args in (("--plan",), ("auth",)):
            planned = manage("migrate", *args, database_url_override=url)
            assert "awa_django.W002" in planned.stderr, planned.stderr
        strict = ("check", "--database", "default", "--fail-level", "WARNING")
        assert manage(*strict, database_url_override=url).returncode != 0

        migrated = manage("migrate", "--verbosity", "0", database_url_override=url)
        assert migrated.returncode == 0, migrated.stderr
        result = manage(*strict, database_url_override=url)
        assert result.returncode == 0, result.stderr
        assert "awa_django" not in result.stderr


def test_a_substrate_changed_behind_migrations_is_an_error(db):
    check = ("check", "--database", "default")
    with throwaway_database() as url:
        migrated = manage("migrate", "--verbosity", "0", database_url_override=url)
        assert migrated.returncode == 0, migrated.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE awa.substrate_info SET schema_version = schema_version - 1")
            result = manage(*check, database_url_override=url)
            assert result.returncode != 0
            assert "awa_django.E004" in result.stderr and "recorded as applied" in result.stderr
            conn.execute("DROP SCHEMA awa CASCADE")
        result = manage(*check, database_url_override=url)
        assert result.returncode != 0
        assert "awa_django.E003" in result.stderr and "recorded as applied" in result.stderr

        # The recipe of the hint repairs it.
        for args in (("zero", "--fake", "--skip-checks"), ()):
            step = manage(
                "migrate", "awa_django", *args, "--verbosity", "0", database_url_override=url
            )
            assert step.returncode == 0, step.stderr
        result = manage(*check, database_url_override=url)
        assert result.returncode == 0, result.stderr


def test_heartbeat_staleness_under_three_intervals_is_a_warning():
    with override_settings(AWA={"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_STALENESS": 25}):
        messages = check_settings()
    assert [m.id for m in messages] == ["awa_django.W003"]
    assert "3x" in messages[0].msg and not messages[0].is_serious()
    with override_settings(AWA={"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_STALENESS": 30}):
        assert check_settings() == []
