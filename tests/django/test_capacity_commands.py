"""Capacity from the command line: ``awa_queue overrides|shards`` and the capacity
section of ``awa_storage status``."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from testapp import jobs

from awa_django import ops

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def known(queue) -> str:
    """A queue the database knows of (it has a job)."""
    jobs.plain.using(queue=queue).enqueue(1)
    return queue


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def failing(name: str, *args: str) -> tuple[int, str]:
    with pytest.raises(CommandError) as caught:
        call_command(name, *args, stdout=io.StringIO())
    return caught.value.returncode, str(caught.value)


class TerminalInput(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_overrides_set_show_and_clear(known):
    printed = command(
        "awa_queue", "overrides", "set", known, "max_workers=5", "rate_limit=[50,50]", "--yes"
    )
    assert f"override on queue {known}: max_workers=5, rate_limit=[50.0, 50]" in printed
    assert f"queue {known} overrides: max_workers=5, rate_limit=[50.0, 50]" in printed
    shown = json.loads(command("awa_queue", "overrides", "show", known, "--json"))
    assert shown == {known: {"max_workers": 5, "rate_limit": [50.0, 50]}}
    table = command("awa_queue", "overrides", "show")
    assert known in table and "max_workers" in table and "[50.0, 50]" in table
    printed = command("awa_queue", "overrides", "set", known, "poll_interval=0.5", "-y")
    assert "max_workers=5, poll_interval=0.5, rate_limit=[50.0, 50]" in printed

    assert f"queue {known}: cleared rate_limit" in command(
        "awa_queue", "overrides", "clear", known, "rate_limit", "--yes"
    )
    assert f"queue {known}: cleared max_workers, poll_interval" in command(
        "awa_queue", "overrides", "clear", known, "--yes"
    )
    assert "no such override to clear" in command("awa_queue", "overrides", "clear", known)
    assert f"queue {known}: no overrides" in command("awa_queue", "overrides", "show", known)
    assert json.loads(command("awa_queue", "overrides", "show", "--json")) == {}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["set", "{q}", "max_wrokers=5"], 2, "did you mean 'max_workers'?"),
        (["set", "{q}", "weight=2"], 2, "'weight': unknown queue option"),
        (["set", "{q}", "max_workers=0"], 2, "'max_workers': must be >= 1"),
        (["set", "{q}", "rate_limit=abc"], 2, "the value is not JSON"),
        (["set", "{q}", "max_workers"], 2, "expected KEY=VALUE"),
        (["set", "q-nobody-knows", "max_workers=1"], 1, "no queue named"),
        (["set", "not a queue!", "max_workers=1"], 2, "invalid queue name"),
        (["clear", "{q}", "claimers"], 2, "not an overridable queue option: 'claimers'"),
    ],
)
def test_bad_overrides_exit_with_a_message_and_change_nothing(known, args, code, message):
    args = [arg.replace("{q}", known) for arg in args]
    found = failing("awa_queue", "overrides", *args, "--yes")
    assert found[0] == code and message in found[1], found
    assert ops.queue_overrides() == {}


def test_overrides_set_asks_on_a_terminal(known, monkeypatch):
    monkeypatch.setattr(sys, "stdin", TerminalInput("n\n"))
    assert failing("awa_queue", "overrides", "set", known, "max_workers=3") == (
        1,
        "declined; nothing changed",
    )
    assert ops.queue_overrides() == {}
    monkeypatch.setattr(sys, "stdin", TerminalInput("y\n"))
    command("awa_queue", "overrides", "set", known, "max_workers=3")
    assert ops.queue_overrides(known) == {known: {"max_workers": 3}}


def test_shards_sets_the_enqueue_shards_of_a_queue(known):
    assert f"queue {known}: 4 enqueue shard(s) (was 1)" in command(
        "awa_queue", "shards", known, "4", "--yes"
    )
    assert "already has 4 enqueue shard(s)" in command("awa_queue", "shards", known, "4", "-y")
    [info] = json.loads(command("awa_queue", "stats", known, "--json"))
    assert info["enqueue_shards"] == 4
    assert failing("awa_queue", "shards", known, "65", "--yes")[0] == 2
    assert failing("awa_queue", "shards", "q-nobody-knows", "2", "--yes")[0] == 1


def status() -> tuple[dict, str]:
    return json.loads(command("awa_storage", "status", "--json"))["capacity"], command(
        "awa_storage", "status"
    )


def test_storage_status_shows_each_queues_capacity(queue):
    other = f"{queue}-b"
    settings = {
        "GLOBAL_MAX_WORKERS": 12,
        "QUEUES": {
            queue: {"min_workers": 2, "weight": 3, "max_workers": 20, "claimers": 2},
            other: {"min_workers": 2, "weight": 1},
        },
    }
    with override_settings(AWA=settings):
        ops.set_queue_override(queue, max_workers=6, claim_batch_size=8)
        capacity, table = status()
    assert (capacity["mode"], capacity["global_max_workers"], capacity["overflow"]) == (
        "weighted",
        12,
        8,
    )
    rows = {row["queue"]: row for row in capacity["queues"]}
    assert rows[queue] | {"rate_limit": None} == {
        "queue": queue,
        "configured": True,
        "reserved": 2,
        "max_workers": 6,
        "weight": 3,
        # The override caps it at 6: the rest of the overflow goes to the other queue.
        "saturated": 6,
        "claimers": 2,
        "claim_batch_size": 8,
        "rate_limit": None,
        "poll_interval": 0.2,
        "deadline": 300.0,
        "overrides": {"claim_batch_size": 8, "max_workers": 6},
        "invalid_overrides": {},
    }
    assert (rows[other]["reserved"], rows[other]["saturated"]) == (2, 6)
    assert "Queue capacity: weighted, GLOBAL_MAX_WORKERS 12" in table
    assert "claim_batch_size=8 max_workers=6" in table

    capacity, table = status()  # the test project's settings: hard-reserved
    assert capacity["mode"] == "reserved" and capacity["overflow"] is None
    rows = {row["queue"]: row for row in capacity["queues"]}
    assert rows["email"]["reserved"] == rows["email"]["max_workers"] == 20
    assert rows["email"]["rate_limit"] == [50.0, 50] and rows["email"]["saturated"] is None
    assert rows[queue]["configured"] is False and rows[queue]["max_workers"] == 6
    assert "Queue capacity: hard-reserved" in table and "50/s burst 50" in table
