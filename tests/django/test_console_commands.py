"""Operator commands: ``awa_queue``, ``awa_runtimes``, ``awa_descriptors``, and
what every ``awa_*`` command shares (management/output.py): ``--json``
documents, tables with and without rich, the target database and the
``Proceed? [y/N]`` question of mutating commands, exit codes 0/1/2."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import pty
import select
import subprocess
import sys
import time
import uuid

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings
from testapp import jobs

from awa_django import ops
from awa_django.cron import CronSchedule, PeriodicJob, schedules
from awa_django.domain.descriptors import Declared, Descriptor
from awa_django.management import output
from awa_django.runtime.leadership.leader import session_name
from awa_django.storage import attempts
from awa_django.storage import descriptors as descriptor_store
from awa_django.storage import runtimes as runtime_store
from awa_django.storage.base import run
from awa_django.storage.connection import conninfo
from awa_django.storage.maintenance import LEADER_LOCK_KEY
from tests.conftest import ROOT, database_url, manage, run_burst
from tests.periodic.conftest import sync

pytestmark = pytest.mark.django_db(transaction=True)

SOON = dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def command(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def failing(name: str, *args: str) -> tuple[int, str, str]:
    """Run a command that must fail; its exit status, message and stdout."""
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(name, *args, stdout=out)
    return caught.value.returncode, str(caught.value), out.getvalue()


class TerminalInput(io.StringIO):
    """stdin as a terminal that answers ``text``."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def answer(monkeypatch):
    """``answer("n")``: stdin becomes a terminal whose user types that line
    (``answer(None)``: one that is at end of input)."""

    def use(text: str | None) -> None:
        monkeypatch.setattr(sys, "stdin", TerminalInput("" if text is None else f"{text}\n"))

    return use


def queue_stats(queue: str) -> dict:
    [info] = json.loads(command("awa_queue", "stats", queue, "--json"))
    return info


def fill(queue: str) -> dict[str, int]:
    """One running, one available and one scheduled job of ``queue`` (by state)."""
    runtime = uuid.uuid4()
    run(runtime_store.register(runtime, "test-host", os.getpid(), [queue]))
    running = jobs.plain.using(queue=queue).enqueue(1)
    [claimed] = run(attempts.claim(queue, 1, runtime, 300.0, 0.0))
    assert claimed.job_id == running.id
    available = jobs.plain.using(queue=queue).enqueue(2)
    scheduled = jobs.plain.using(queue=queue, run_at=dt.datetime.now(dt.UTC) + SOON).enqueue(3)
    return {"running": running.id, "available": available.id, "scheduled": scheduled.id}


def states(ids: dict[str, int]) -> dict[str, str]:
    return {name: ops.get_job(job_id).state for name, job_id in ids.items()}


# --- awa_queue ------------------------------------------------------------------------


def test_queue_stats_lists_counts_per_state_as_json_and_as_a_table(queue):
    fill(queue)
    listed = json.loads(command("awa_queue", "stats", "--json"))
    assert isinstance(listed, list)
    [info] = [q for q in listed if q["name"] == queue]
    assert info["counts"]["running"] == info["counts"]["available"] == 1
    assert info["counts"]["scheduled"] == 1
    assert info["counts"]["completed"] == 0
    assert (info["paused"], info["paused_at"], info["configured"]) == (False, None, False)
    assert "default" in {q["name"] for q in listed}  # declared in the settings, even empty
    assert queue_stats(queue) == info

    table = command("awa_queue", "stats", queue)
    assert "queues" in table and queue in table and "active" in table
    assert "waiting" in table and "scheduled" in table


def test_pause_is_visible_in_stats_and_resume_undoes_it(queue):
    jobs.plain.using(queue=queue).enqueue(1)
    paused = command("awa_queue", "pause", queue, "--yes")
    assert f"queue {queue} paused" in paused
    info = queue_stats(queue)
    assert info["paused"] is True
    assert dt.datetime.fromisoformat(info["paused_at"]).tzinfo is not None
    assert "paused" in command("awa_queue", "stats", queue)
    assert "already paused: nothing to pause" in command("awa_queue", "pause", queue, "-y")

    assert f"queue {queue} resumed" in command("awa_queue", "resume", queue, "--yes")
    assert queue_stats(queue)["paused"] is False
    assert "not paused: nothing to resume" in command("awa_queue", "resume", queue, "--yes")


def test_drain_cancels_available_and_scheduled_jobs_but_not_running_ones(queue):
    ids = fill(queue)
    drained = command("awa_queue", "drain", queue, "--yes", "--reason", "bad deploy")
    assert "cancels 1 available, 1 scheduled, 0 waiting, 0 retryable job(s)" in drained
    assert f"queue {queue} drained: 2 job(s) cancelled" in drained
    assert states(ids) == {"running": "running", "available": "cancelled", "scheduled": "cancelled"}
    assert ops.get_job(ids["available"]).errors[-1]["message"] == "bad deploy"
    counts = queue_stats(queue)["counts"]
    assert (counts["running"], counts["available"], counts["cancelled"]) == (1, 0, 2)
    assert "0 job(s) cancelled" in command("awa_queue", "drain", queue, "--yes")


def test_unknown_queues_exit_1_and_invalid_names_exit_2(queue):
    for args in (("stats",), ("pause", "--yes"), ("resume", "--yes"), ("drain", "--yes")):
        code, message, _ = failing("awa_queue", args[0], queue, *args[1:])
        assert code == 1, args
        assert f"no queue named {queue!r}" in message
    assert not any(q.name == queue for q in ops.list_queues())  # nothing was created
    for action in ("stats", "pause", "drain"):
        code, message, _ = failing("awa_queue", action, "not a queue!")
        assert code == 2 and "invalid queue name" in message


def test_a_configured_queue_without_jobs_can_be_paused():
    assert "queue email paused" in command("awa_queue", "pause", "email", "--yes")
    assert queue_stats("email")["paused"] and queue_stats("email")["configured"]
    command("awa_queue", "resume", "email", "--yes")


# --- confirmation ---------------------------------------------------------------------


def test_a_change_names_the_database_and_asks_on_a_terminal(queue, answer):
    jobs.plain.using(queue=queue).enqueue(1)
    answer("n")
    code, message, printed = failing("awa_queue", "pause", queue)
    assert (code, message) == (1, "declined; nothing changed")
    settings = connection.settings_dict
    target = printed.splitlines()[0]
    assert target.startswith("database: default (") and settings["NAME"] in target
    assert target.endswith(f":{connection.connection.info.port}/{settings['NAME']})")
    if settings.get("PASSWORD"):
        assert settings["PASSWORD"] not in printed
    assert "Proceed? [y/N]" in printed
    assert queue_stats(queue)["paused"] is False

    answer("y")
    assert f"queue {queue} paused" in command("awa_queue", "pause", queue)
    assert queue_stats(queue)["paused"] is True


def test_without_a_terminal_or_with_yes_nothing_is_asked(queue, answer):
    jobs.plain.using(queue=queue).enqueue(1)
    printed = command("awa_queue", "pause", queue)  # pytest's stdin is no terminal
    assert "Proceed?" not in printed and printed.startswith("database: default (")
    answer("n")  # a terminal, but --yes
    printed = command("awa_queue", "resume", queue, "--yes")
    assert "Proceed?" not in printed and f"queue {queue} resumed" in printed


def test_declining_a_drain_cancels_nothing(queue, answer):
    ids = fill(queue)
    answer("no")
    code, _, printed = failing("awa_queue", "drain", queue)
    assert code == 1 and "cancels 1 available, 1 scheduled" in printed
    assert states(ids) == {"running": "running", "available": "available", "scheduled": "scheduled"}
    answer("")  # just Enter: the default is no
    assert failing("awa_queue", "drain", queue)[0] == 1
    answer(None)  # end of input declines too
    assert failing("awa_queue", "drain", queue)[0] == 1
    assert ops.get_job(ids["available"]).state == "available"


def test_awa_job_retry_and_cancel_ask_first(queue, answer):
    ref = jobs.plain.using(queue=queue).enqueue(1)
    answer("n")
    code, _, printed = failing("awa_job", "cancel", str(ref.id))
    assert code == 1 and f"cancel job {ref.id} (testapp.plain on queue {queue}" in printed
    assert ops.get_job(ref.id).state == "available"
    answer("y")
    assert "cancel done; it is now cancelled" in command("awa_job", "cancel", str(ref.id))
    answer("n")
    assert failing("awa_job", "retry", str(ref.id))[0] == 1
    assert ops.get_job(ref.id).state == "cancelled"
    assert "retry done" in command("awa_job", "retry", str(ref.id), "--yes")
    # An unknown id is refused before anything is asked.
    code, message, printed = failing("awa_job", "cancel", str(10**15))
    assert (code, message) == (1, f"no job with id {10**15}") and "Proceed?" not in printed


def test_awa_dlq_retry_and_purge_ask_first(queue, answer):
    refs = [jobs.fails_until_released.using(queue=queue).enqueue() for _ in range(3)]
    with override_settings(AWA={"QUEUE_DLQ": {queue: True}}):
        run_burst(queue)
    ids = [r.id for r in refs]
    assert {ops.get_job(i).state for i in ids} == {"dlq"}

    answer("n")
    code, _, printed = failing("awa_dlq", "retry", str(ids[0]))
    assert code == 1 and f"retry dead-lettered job {ids[0]}" in printed
    answer("n")
    assert failing("awa_dlq", "purge", str(ids[0]))[0] == 1
    answer("n")
    code, _, printed = failing("awa_dlq", "purge", "--all", "--queue", queue)
    assert code == 1 and "purge 3 dead-lettered job(s)" in printed
    assert len(ops.dlq_list(queue=queue)) == 3

    answer("y")
    assert f"job {ids[0]}: retry done" in command("awa_dlq", "retry", str(ids[0]))
    assert "purge: 2 job(s)" in command("awa_dlq", "purge", "--all", "--queue", queue, "-y")
    assert ops.dlq_list(queue=queue) == []
    assert failing("awa_dlq", "purge", str(ids[1]), "--yes")[0] == 1  # no longer in the DLQ
    code, message, _ = failing("awa_dlq", "retry")
    assert code == 2 and "one job id, or --all" in message
    code, _, _ = failing("awa_dlq", "purge", str(ids[1]), "--queue", queue)
    assert code == 2


@pytest.fixture
def schedule(queue):
    entry = PeriodicJob(f"{queue}-tick", jobs.record, CronSchedule("0 0 1 1 *"), queue=queue)
    schedules.add(entry)
    sync()
    yield entry
    schedules.remove(entry.name)


def test_awa_cron_pause_resume_and_run_ask_first(schedule, queue, answer):
    name = schedule.name
    answer("n")
    code, _, printed = failing("awa_cron", "pause", name)
    assert code == 1 and f"pause schedule {name} (now active)" in printed
    assert ops.get_periodic(name).paused is False
    answer("n")
    assert failing("awa_cron", "run", name)[0] == 1
    assert ops.list_jobs(queue=queue) == []
    answer("y")
    assert f"schedule {name} paused" in command("awa_cron", "pause", name)
    answer("n")
    assert failing("awa_cron", "resume", name)[0] == 1
    assert ops.get_periodic(name).paused is True
    assert f"schedule {name} resumed" in command("awa_cron", "resume", name, "--yes")
    assert "enqueued job" in command("awa_cron", "run", name, "--yes")
    assert len(ops.list_jobs(queue=queue)) == 1
    code, message, printed = failing("awa_cron", "pause", "nope", "--yes")
    assert code == 1 and "no periodic schedule named 'nope'" in message
    assert failing("awa_cron", "pause", "", "--yes")[0] == 2


# --- awa_runtimes and awa_descriptors ----------------------------------------------------


@pytest.fixture
def runtimes(queue):
    """A live leader, a live worker and a dead worker of ``queue``, with descriptors.

    The leader and the worker publish different labels for ``queue`` (drift);
    only the dead worker publishes ``old.kind`` (stale).
    """
    leader, worker, dead = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for runtime, role in ((leader, "maintenance"), (worker, "worker"), (dead, "worker")):
        run(runtime_store.register(runtime, f"host-{role}", os.getpid(), [queue], role))
    kinds = {"testapp.plain": (Descriptor(description="Adds two numbers", tags=["math"]), queue)}
    run(descriptor_store.sync(leader, Declared({queue: Descriptor(display_name="Mail")}, kinds)))
    run(descriptor_store.sync(worker, Declared({queue: Descriptor(display_name="Post")}, kinds)))
    run(
        descriptor_store.sync(dead, Declared({}, {"old.kind": (Descriptor(owner="team-x"), queue)}))
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.runtime_instances SET heartbeat_at = now() - interval '1 day' "
            "WHERE id = %s",
            [dead],
        )
    with psycopg.connect(
        conninfo(), autocommit=True, application_name=session_name(leader)
    ) as session:
        assert session.execute("SELECT pg_try_advisory_lock(%s)", [LEADER_LOCK_KEY]).fetchone()[0]
        yield {"leader": leader, "worker": worker, "dead": dead}


def test_awa_runtimes_marks_the_leader_and_the_dead(runtimes, queue):
    listed = json.loads(command("awa_runtimes", "--json"))
    by_id = {entry["id"]: entry for entry in listed}
    assert set(by_id) == {str(r) for r in runtimes.values()}
    leader = by_id[str(runtimes["leader"])]
    assert (leader["is_leader"], leader["alive"], leader["role"]) == (True, True, "maintenance")
    assert leader["queues"] == [queue] and leader["pid"] == os.getpid()
    assert dt.datetime.fromisoformat(leader["started_at"]).tzinfo is not None
    dead = by_id[str(runtimes["dead"])]
    assert (dead["alive"], dead["is_leader"]) == (False, False)
    assert by_id[str(runtimes["worker"])]["alive"] is True

    table = command("awa_runtimes")
    assert "runtimes" in table and "alive, leader" in table and "dead" in table
    assert str(runtimes["dead"]) in table and "host-maintenance" in table


def test_awa_runtimes_with_none_registered():
    assert "no runtimes registered" in command("awa_runtimes")
    assert json.loads(command("awa_runtimes", "--json")) == []


def test_awa_descriptors_shows_both_catalogs_with_stale_and_drift(runtimes, queue):
    both = json.loads(command("awa_descriptors", "--json"))
    assert set(both) == {"queues", "job_kinds"}
    [label] = both["queues"]
    assert label["name"] == queue and label["drift"] is True and label["stale"] is False
    assert len(label["live_hashes"]) == 2
    assert dt.datetime.fromisoformat(label["last_seen_at"]).tzinfo is not None
    kinds = {entry["name"]: entry for entry in both["job_kinds"]}
    assert kinds["testapp.plain"]["queue"] == queue
    assert kinds["testapp.plain"]["tags"] == ["math"]
    assert (kinds["testapp.plain"]["stale"], kinds["testapp.plain"]["drift"]) == (False, False)
    assert kinds["old.kind"]["stale"] is True

    assert set(json.loads(command("awa_descriptors", "--kind", "queue", "--json"))) == {"queues"}
    only_jobs = json.loads(command("awa_descriptors", "--kind", "job", "--json"))
    assert set(only_jobs) == {"job_kinds"} and only_jobs["job_kinds"] == both["job_kinds"]

    table = command("awa_descriptors")
    assert "queue descriptors" in table and "job-kind descriptors" in table
    assert "drift (" in table and "stale" in table and "Adds two numbers" in table
    assert "job-kind" not in command("awa_descriptors", "--kind", "queue")


def test_awa_descriptors_with_empty_catalogs():
    table = command("awa_descriptors")
    assert "no queue descriptors" in table and "no job-kind descriptors" in table
    assert json.loads(command("awa_descriptors", "--json")) == {"queues": [], "job_kinds": []}


# --- shared output --------------------------------------------------------------------------


def test_without_rich_tables_are_aligned_plain_text(queue, monkeypatch):
    jobs.plain.using(queue=queue).enqueue(1)
    monkeypatch.setattr(output, "RICH", False)
    lines = command("awa_queue", "stats", queue).splitlines()
    assert lines[0] == "queues"
    header, rule, row = lines[1:4]
    assert header.split()[:5] == ["queue", "state", "waiting", "scheduled", "available"]
    assert set(rule.replace(" ", "")) == {"-"} and len(rule) == len(header.rstrip())
    assert row.split()[:5] == [queue, "active", "0", "0", "1"]
    # Counts are right-aligned under their header.
    assert row.index(" 1 ") + 2 == header.index("available") + len("available")
    assert "│" not in "\n".join(lines) and "┃" not in "\n".join(lines)
    assert json.loads(command("awa_queue", "stats", queue, "--json"))[0]["name"] == queue
    shown = command("awa_job", "show", str(ops.list_jobs(queue=queue)[0].id))
    assert "kind" in shown and "testapp.plain" in shown


def test_every_listing_prints_one_json_document_with_iso_datetimes(queue):
    ref = jobs.plain.using(queue=queue).enqueue(1)
    job = json.loads(command("awa_job", "show", str(ref.id), "--json"))
    created = dt.datetime.fromisoformat(job["created_at"])
    assert "T" in job["created_at"] and created.tzinfo is not None
    assert json.loads(command("awa_dlq", "list", "--json")) == []
    assert "no dead-lettered jobs" in command("awa_dlq", "list")
    assert json.loads(command("awa_cron", "list", "--json")) == []
    assert isinstance(json.loads(command("awa_storage", "status", "--json")), dict)


def test_json_default_covers_what_the_api_returns():
    moment = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    key = uuid.UUID(int=7)
    text = output.to_json({"at": moment, "id": key, "set": {2, 1}, "d": dt.timedelta(seconds=3)})
    assert json.loads(text) == {
        "at": "2030-01-02T03:04:05+00:00",
        "id": "00000000-0000-0000-0000-000000000007",
        "set": [1, 2],
        "d": 3.0,
    }


# --- exit codes of real processes ------------------------------------------------------------


def test_exit_codes_of_manage_py(queue):
    jobs.plain.using(queue=queue).enqueue(1)
    ok = manage("awa_queue", "stats", queue, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)[0]["name"] == queue  # stdout is the JSON document alone
    paused = manage("awa_queue", "pause", queue)  # stdin is no terminal: nothing asked
    assert paused.returncode == 0 and f"queue {queue} paused" in paused.stdout
    cases = {
        ("awa_queue", "stats", "q-does-not-exist"): (1, "no queue named"),
        ("awa_job", "cancel", str(10**15)): (1, "no job with id"),
        ("awa_cron", "run", "nope"): (1, "no periodic schedule"),
        ("awa_queue", "pause", "not a queue!"): (2, "invalid queue name"),
        ("awa_queue", "frobnicate"): (2, "invalid choice"),
        ("awa_job", "show", "forty-two"): (2, "invalid int value"),
        ("awa_runtimes", "--database", "nope"): (2, "no database alias 'nope'"),
        ("awa_descriptors", "--kind", "table"): (2, "invalid choice"),
        ("awa_dlq", "retry"): (2, "one job id, or --all"),
        ("awa_dlq", "purge", "--all", "--moved-before", "yesterday", "--yes"): (
            2,
            "not an ISO 8601 timestamp",
        ),
    }
    for args, (code, fragment) in cases.items():
        result = manage(*args)
        assert result.returncode == code, (args, result.stdout, result.stderr)
        assert fragment in result.stderr, (args, result.stderr)


def run_in_terminal(*args: str, answer: str, timeout: float = 120) -> tuple[int, str]:
    """``manage.py ARGS`` with a pseudo-terminal for stdin and stdout; types
    ``answer`` once ``Proceed? [y/N]`` shows.  Returns the exit status and output."""
    primary, secondary = pty.openpty()
    env = dict(os.environ, DATABASE_URL=database_url())
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "testproject" / "manage.py"), *args],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
        close_fds=True,
    )
    os.close(secondary)
    seen = b""
    answered = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(primary, 4096)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            if not answered and b"Proceed? [y/N]" in seen:
                os.write(primary, answer.encode() + b"\n")
                answered = True
            if proc.poll() is not None and not ready:
                break
        proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    assert answered, seen.decode(errors="replace")
    return proc.returncode, seen.decode(errors="replace")


def test_a_terminal_is_asked_and_no_exits_1_without_a_change(queue):
    ids = fill(queue)
    code, printed = run_in_terminal("awa_queue", "drain", queue, answer="n")
    assert code == 1, printed
    assert "database: default (" in printed and "declined; nothing changed" in printed
    assert states(ids) == {"running": "running", "available": "available", "scheduled": "scheduled"}
    code, printed = run_in_terminal("awa_queue", "drain", queue, answer="y")
    assert code == 0, printed
    assert f"queue {queue} drained: 2 job(s) cancelled" in printed
    assert states(ids) == {"running": "running", "available": "cancelled", "scheduled": "cancelled"}
