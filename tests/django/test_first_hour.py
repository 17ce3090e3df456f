"""First-hour polish: typo suggestions, hints that name the docs, queue-name
notices, command output and help."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from awa_django.checks import check_settings
from awa_django.conf import parse_settings
from tests.conftest import manage

DOCS_PAGE = "docs/reference/settings"


def problems(raw):
    return [str(problem) for problem in parse_settings(raw)[1]]


def test_a_misspelt_queue_option_suggests_the_nearest_one():
    assert problems({"QUEUES": {"email": {"max_wokers": 3}}}) == [
        "AWA[QUEUES]['email']['max_wokers']: unknown queue option; did you mean 'max_workers'?"
    ]


@pytest.mark.parametrize(
    ("key", "nearest"),
    [("HEARTBEAT_INTERVALS", "HEARTBEAT_INTERVAL"), ("queues", "QUEUES"), ("DATBASE", "DATABASE")],
)
def test_a_misspelt_setting_suggests_the_nearest_one(key, nearest):
    assert problems({key: 1}) == [f"AWA[{key}]: unknown setting; did you mean {nearest!r}?"]


def test_an_unknown_key_with_no_near_match_lists_the_valid_ones():
    (found,) = problems({"QUEUES": {"email": {"colour": "red"}}})
    assert "did you mean" not in found
    expected = (
        "valid queue options: claim_batch_size, claimers, deadline, descriptor, encrypt, "
        "long_running, max_workers"
    )
    assert expected in found
    (found,) = problems({"ZZZ": 1})
    assert "valid settings: ADMIN_READ_ONLY" in found and "QUEUES" in found


def test_check_hints_name_the_settings_reference():
    with override_settings(AWA={"QUEUES": {"email": {"max_wokers": 3}}}):
        (error,) = check_settings()
    assert error.id == "awa_django.E001"
    assert "did you mean 'max_workers'?" in error.msg
    assert DOCS_PAGE in error.hint
    with override_settings(AWA={"QUEUES": {"email": {"weight": 2}}}):
        (warning,) = check_settings()
    assert warning.id == "awa_django.W004" and DOCS_PAGE in warning.hint


@pytest.mark.django_db(transaction=True)
def test_an_undeclared_queue_runs_with_the_default_policy_and_says_so(queue, reset_awa):
    result = manage("awa_worker", "--queue", queue, "--burst", "--no-maintenance")
    assert result.returncode == 0, result.stderr
    assert (
        f"queue {queue!r} is not in AWA['QUEUES']; running it with the default queue options"
        in result.stderr
    )
    declared = manage("awa_worker", "--queue", "reports", "--burst", "--no-maintenance")
    assert declared.returncode == 0, declared.stderr
    assert "not in AWA['QUEUES']" not in declared.stderr


def test_strict_queues_refuses_an_undeclared_queue_and_suggests_a_declared_one():
    with pytest.raises(CommandError, match=r"--queue emial: not in AWA\['QUEUES'\] \(did you "):
        call_command("awa_worker", "--queue", "emial", "--strict-queues", "--burst")
    with pytest.raises(CommandError, match="did you mean 'email'"):
        call_command("awa_worker", "--queue", "email", "--queue", "emial:3", "--strict-queues")


@pytest.mark.django_db
def test_awa_storage_status_ends_with_a_newline():
    table = io.StringIO()
    call_command("awa_storage", "status", stdout=table)
    assert table.getvalue().endswith("MiB\n"), table.getvalue()[-200:]
    document = io.StringIO()
    call_command("awa_storage", "status", "--json", stdout=document)
    assert document.getvalue().endswith("}\n")
    assert set(json.loads(document.getvalue())) >= {"rings", "leader", "dead_tuples"}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("awa_worker", ["--strict-queues", "e.g. --queue email:20", "--shutdown-timeout"]),
        ("awa_maintenance", ["--database ALIAS", "awa_worker --no-maintenance"]),
        ("awa_storage", ["status", "Example: manage.py awa_storage status --json"]),
        ("awa_bench", ["--skip", "e.g. --skip latency", "--handler"]),
    ],
)
def test_help_explains_the_flags_with_examples(command, expected):
    result = manage(command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for fragment in expected:
        assert fragment in text, (fragment, text)


def test_make_demo_on_a_fresh_database_prints_no_warning(db):
    """``make demo``'s two commands on an empty database: ``migrate`` does not
    warn about the migrations it is applying (W002), and the demo's worker
    hands the maintenance lead back without a warning line."""
    from tests.django.test_checks import throwaway_database

    with throwaway_database() as url:
        migrated = manage("migrate", "--verbosity", "0", database_url_override=url)
        assert migrated.returncode == 0, migrated.stderr
        assert migrated.stdout + migrated.stderr == "", migrated.stdout + migrated.stderr
        # Nothing left pending that the check would report afterwards.
        plan = manage("check", "--database", "default", database_url_override=url)
        assert plan.returncode == 0 and "awa_django" not in plan.stderr, plan.stderr
        demo = manage("demo", "--emails", "5", "--no-serve", database_url_override=url)
    assert demo.returncode == 0, demo.stderr
    assert "Queue counts" in demo.stdout, demo.stdout
    output = demo.stdout + demo.stderr
    for noise in ("warning", "WARNING", "leader", "Traceback"):
        assert noise not in output, output
