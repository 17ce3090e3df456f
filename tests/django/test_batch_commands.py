"""``manage.py awa_batch list|preview|submit|cancel``."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from awa_django import ops
from awa_django.management import output
from tests.conftest import manage
from tests.factories import JobFactory


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("awa_batch", *args, stdout=out)
    return out.getvalue()


def failing(*args: str) -> tuple[int, str]:
    with pytest.raises(CommandError) as caught:
        call_command("awa_batch", *args, stdout=io.StringIO())
    return caught.value.returncode, str(caught.value)


@pytest.fixture(autouse=True)
def plain_tables(monkeypatch):
    monkeypatch.setattr(output, "RICH", False)


@pytest.mark.django_db
def test_preview_submit_list_and_cancel(queue):
    for n in range(4):
        JobFactory.create(queue=queue, kind="app.a" if n else "app.b")
    args = ("set_priority", "--queue", queue, "--priority", "1")
    assert command("preview", *args) == (
        f"set priority 1 of the available and scheduled jobs of queue {queue!r}: "
        "4 job(s) would change now\n"
    )
    found = json.loads(
        command("preview", *args, "--kind", "app.a", "--state", "available", "--json")
    )
    assert found == {
        "op_kind": "set_priority",
        "filter": {"queue": queue, "kind": "app.a", "state": ["available"]},
        "spec": {"priority": 1},
        "count": 3,
    }
    assert ops.list_batch_operations() == []
    assert command("list") == "no batch operations\n"

    said = command("submit", *args, "--tag", "vip")
    assert "database: default (" in said
    (op,) = ops.list_batch_operations()
    assert f"batch operation {op.id} submitted: 0 job(s)" in said
    assert op.filter == {"queue": queue, "tag": "vip", "state": ["available", "scheduled"]}

    table = command("list")
    assert "tagged 'vip'" in table and "pending" in table and "0/0 (100%)" in table
    shown = json.loads(command("list", str(op.id), "--json"))
    assert (shown["id"], shown["state"], shown["spec"]) == (op.id, "pending", {"priority": 1})
    assert len(json.loads(command("list", "--json"))) == 1

    assert f"batch operation {op.id} cancelled after 0 of 0 job(s)" in command("cancel", str(op.id))
    assert f"batch operation {op.id} is already cancelled: nothing to cancel" in command(
        "cancel", str(op.id), "--yes"
    )


@pytest.mark.django_db
def test_move_queue_needs_its_target(queue):
    JobFactory.create(queue=queue)
    said = command("submit", "move_queue", "--queue", queue, "--to-queue", f"{queue}-b")
    assert f"to queue '{queue}-b'" in said and "1 job(s)" in said
    (op,) = ops.list_batch_operations()
    assert (op.op_kind, op.spec) == ("move_queue", {"queue": f"{queue}-b"})


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (("list", "999999"), 1, "no batch operation with id 999999"),
        (("cancel", "999999"), 1, "no batch operation with id 999999"),
        (("preview", "set_priority", "--queue", "q"), 2, "set_priority needs --priority"),
        (("submit", "move_queue", "--queue", "q"), 2, "move_queue needs --to-queue"),
        (
            ("preview", "set_priority", "--queue", "q", "--priority", "1", "--to-queue", "r"),
            2,
            "--to-queue goes with move_queue",
        ),
        (("preview", "set_priority", "--queue", "no way", "--priority", "1"), 2, "invalid queue"),
        (("submit", "set_priority", "--queue", "q", "--priority", "9"), 2, "invalid priority 9"),
        (("submit", "move_queue", "--queue", "q", "--to-queue", "q"), 2, "other than the filter"),
        (("list", "--limit", "0"), 2, "limit must be a positive integer"),
    ],
)
def test_not_found_is_1_and_bad_input_is_2(args, code, fragment):
    returncode, message = failing(*args)
    assert returncode == code and fragment in message
    assert ops.list_batch_operations() == []


@pytest.mark.django_db(transaction=True)
def test_exit_codes_of_manage_py(reset_awa, queue):
    JobFactory.create(queue=queue)
    ok = manage(
        "awa_batch", "preview", "set_priority", "--queue", queue, "--priority", "3", "--json"
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["count"] == 1
    submitted = manage("awa_batch", "submit", "set_priority", "--queue", queue, "--priority", "3")
    assert submitted.returncode == 0 and "submitted: 1 job(s)" in submitted.stdout
    cases = {
        ("awa_batch", "cancel", "424242"): (1, "no batch operation"),
        ("awa_batch", "frobnicate"): (2, "invalid choice"),
        ("awa_batch", "preview", "delete", "--queue", queue): (2, "invalid choice"),
        ("awa_batch", "preview", "set_priority", "--priority", "1"): (2, "--queue"),
        ("awa_batch", "submit", "set_priority", "--queue", queue, "--state", "running"): (
            2,
            "invalid choice",
        ),
        ("awa_batch", "cancel", "seven"): (2, "invalid int value"),
    }
    for args, (code, fragment) in cases.items():
        result = manage(*args)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert fragment in result.stderr, (args, result.stderr)
    assert len(ops.list_batch_operations()) == 1
