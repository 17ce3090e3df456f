"""Encrypted jobs through a real worker: the secret reaches the handler and
nowhere else.

Each test enqueues a job whose arguments carry a fresh secret, runs an
in-process worker on it, and then looks for the secret in every text,
json, jsonb, bytea and text[] column of every table of the ``awa`` schema
(the ring partitions are read through their parents), in the log records
of the run, in the signals sent and in the spans recorded.  The handler
writes what it received to ``testapp_execution`` (outside the schema), which
is how the tests know it arrived intact.
"""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from cryptography.fernet import Fernet
from django.db import connection
from django.dispatch import Signal
from django.test import override_settings
from testapp import jobs
from testapp.models import Execution

from awa_django import EncryptionError, EncryptionKeyMissing, InvalidJob, Unique, job, ops, signals
from awa_django.domain import sealing
from awa_django.observability.hooks import observers
from awa_django.observability.signals import SignalObserver
from awa_django.storage import run
from awa_django.storage.jobs import get_job as stored_job
from tests.conftest import WorkerProcess, run_burst
from tests.observability import conftest as observability

pytestmark = pytest.mark.django_db(transaction=True)

#: The observability tests' fixture: spans recorded in memory.
telemetry_factory = observability.telemetry_factory

KEY = "wsa5bqsJs-GDRR4DqFtDl66sRgE-SBgTTqEcyGXuY0w="  # the test project's
NEW_KEY = "FpTl0kcX7Rc7KHTmAYLxxg-cFM9cCEIvqV0I1gPy8iY="


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def secret() -> str:
    return f"alice+{uuid.uuid4().hex}@example.org"


def with_keys(*keys: str, **awa):
    """The test project's AWA with ``ENCRYPTION_KEYS`` replaced (none: unset)."""
    from django.conf import settings

    changed = {**settings.AWA, **awa}
    changed.pop("ENCRYPTION_KEYS", None)
    if keys:
        changed["ENCRYPTION_KEYS"] = list(keys)
    return override_settings(AWA=changed)


def where_found(secret: str) -> list[str]:
    """Every ``table.column`` of schema awa with a value containing ``secret``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, NULL)"
            "  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind IN ('r', 'p')"
            "   AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped"
            "   AND format_type(a.atttypid, NULL) IN"
            "       ('text', 'json', 'jsonb', 'bytea', 'text[]', 'character varying')"
        )
        columns = cursor.fetchall()
        assert len(columns) > 50  # the whole schema, not a corner of it
        found = []
        for table, column, kind in columns:
            value = f"convert_from({column}, 'SQL_ASCII')" if kind == "bytea" else f"{column}::text"
            cursor.execute(
                f"SELECT count(*) FROM awa.{table} WHERE strpos({value}, %s) > 0",
                [secret],
            )
            if cursor.fetchone()[0]:
                found.append(f"{table}.{column}")
    return found


def _signals() -> dict[str, Signal]:
    return {name: value for name, value in vars(signals).items() if isinstance(value, Signal)}


class Seen:
    """Log records, signals and spans of a run, as text to search."""

    def __init__(self, caplog, telemetry) -> None:
        self.caplog = caplog
        self.telemetry = telemetry
        self.signals: list[str] = []

    def receive(self, sender, signal=None, **kwargs) -> None:
        self.signals.append(repr(kwargs))

    def text(self) -> str:
        records = [
            f"{r.getMessage()} {getattr(r, 'awa', '')} {r.exc_text or ''}"
            for r in self.caplog.records
        ]
        spans = [
            f"{s.name} {dict(s.attributes or {})} {s.status.description} "
            f"{[(e.name, dict(e.attributes or {})) for e in s.events]}"
            for s in self.telemetry.spans()
        ]
        return "\n".join([*records, *self.signals, *spans])


@pytest.fixture
def seen(caplog, telemetry_factory):
    caplog.set_level(logging.DEBUG)
    watcher = Seen(caplog, telemetry_factory())
    for name, signal in _signals().items():
        signal.connect(watcher.receive, weak=False, dispatch_uid=f"sealed-{name}")
    yield watcher
    for name, signal in _signals().items():
        signal.disconnect(dispatch_uid=f"sealed-{name}")


def test_the_secret_reaches_the_handler_and_nothing_else(queue, secret, seen):
    done = jobs.sealed.using(queue=queue).enqueue(secret)
    failed = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret, fail=True)
    run_burst(queue)
    delivery = observers.of_type(SignalObserver)
    assert delivery is not None and delivery.delivery.flush(10)
    assert seen.signals  # the receivers did hear the run

    # The handler had it, intact, both times.
    assert list(Execution.objects.filter(job_id=done.id).values_list("label", flat=True)) == [
        secret
    ]
    assert Execution.objects.filter(job_id=failed.id, label=secret).count() == 1
    # Nothing of it is stored, logged, signalled or traced.
    assert where_found(secret) == []
    assert secret not in seen.text()
    assert "could not deliver" not in seen.text()
    assert "TerminalError: <message sealed>" in "\n".join(seen.signals)  # job_failed's error
    # What is stored opens to what the handler returned, reported and raised.
    done_info, failed_info = ops.get_job(done.id), ops.get_job(failed.id)
    assert (done_info.state, failed_info.state) == ("completed", "failed")
    assert sealing.is_sealed(done_info.args) and sealing.is_sealed(done_info.return_value)
    opened = sealing.open_info(done_info)
    assert (opened.args, opened.kwargs, opened.return_value) == ([secret], {}, {"echo": secret})
    opened = sealing.open_info(failed_info)
    assert opened.kwargs == {"fail": True}
    assert opened.progress == {"message": secret, "checkpoint": {"seen": secret}}
    [entry] = opened.errors
    assert entry["type"] == "awa_django.outcomes.TerminalError"
    assert entry["message"] == f"could not deliver to {secret}"
    assert secret in entry["traceback"]
    # The error's type stays readable for triage; its message does not.
    assert failed_info.errors[0]["type"] == "awa_django.outcomes.TerminalError"
    assert sealing.is_sealed(failed_info.errors[0]["message"])


def test_an_async_handler_and_a_queue_that_encrypts(queue, secret):
    sealed_async = jobs.sealed_async.using(queue=queue).enqueue(secret)
    with with_keys(KEY, QUEUES={queue: {"encrypt": True}}):
        by_queue = jobs.plain.using(queue=queue).enqueue(20, b=22)
        by_call = jobs.plain.using(queue=queue, encrypt=True).enqueue(1, b=1)
        run_burst(queue)
    stored = [ops.get_job(ref.id) for ref in (sealed_async, by_queue, by_call)]
    assert all(sealing.is_sealed(info.kwargs) for info in stored)
    assert [sealing.open_info(info).return_value for info in stored] == [secret, 42, 2]
    assert where_found(secret) == []


def test_a_worker_without_the_key_fails_the_attempt_with_a_typed_error(queue, secret):
    ref = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret)
    with with_keys():
        run_burst(queue)
    info = ops.get_job(ref.id)
    assert info.state == "failed"
    assert not Execution.objects.filter(job_id=ref.id).exists()  # never ran
    [entry] = info.errors
    assert entry["type"] == "awa_django.exceptions.EncryptionKeyMissing"
    assert sealing.key_id(KEY.encode()) in entry["message"]  # readable: no payload in it
    assert where_found(secret) == []


def test_a_worker_with_other_keys_only_fails_it_too(queue, secret):
    ref = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret)
    with with_keys(NEW_KEY):
        run_burst(queue)
    info = ops.get_job(ref.id)
    assert info.state == "failed" and not Execution.objects.filter(job_id=ref.id).exists()
    assert info.errors[0]["type"] == "awa_django.exceptions.EncryptionKeyMissing"


def test_rotation_keeps_old_jobs_running_and_seals_new_ones_with_the_new_key(queue, secret):
    old_id, new_id = sealing.key_id(KEY.encode()), sealing.key_id(NEW_KEY.encode())
    old = jobs.sealed.using(queue=queue).enqueue(secret)
    with with_keys(NEW_KEY, KEY):
        new = jobs.sealed.using(queue=queue).enqueue(secret + "-2")
        status = {u.key_id: u for u in ops.key_status()}
        assert status[new_id].primary and status[old_id].configured
        assert (status[old_id].jobs["ready"], status[new_id].jobs["ready"]) == (1, 1)
        run_burst(queue)
        status = {u.key_id: u for u in ops.key_status()}
    assert [ops.get_job(r.id).state for r in (old, new)] == ["completed", "completed"]
    assert sorted(Execution.objects.values_list("label", flat=True)) == [secret, secret + "-2"]
    # Both return values were sealed by the worker with the new key; the old
    # job's arguments still need the old one until the ring slot is pruned.
    assert status[new_id].jobs["history"] == 2
    assert (status[old_id].jobs["history"], status[old_id].jobs["ready"]) == (0, 1)
    assert not any(usage.missing for usage in status.values())
    with with_keys(NEW_KEY):
        missing = [u for u in ops.key_status() if u.missing]
    assert [u.key_id for u in missing] == [old_id]


def test_refusals_are_typed_and_write_nothing(queue, secret):
    with pytest.raises(EncryptionError, match="unique by its arguments"):
        jobs.sealed.using(queue=queue, unique=Unique()).enqueue(secret)
    with with_keys(), pytest.raises(EncryptionError, match="ENCRYPTION_KEYS"):
        jobs.sealed.using(queue=queue).enqueue(secret)
    with with_keys(KEY, MAX_PAYLOAD_BYTES=200), pytest.raises(InvalidJob, match="as stored"):
        jobs.sealed.using(queue=queue).enqueue("x" * 60)
    assert ops.queue_counts(queue).get("available", 0) == 0
    assert where_found(secret) == []
    # Unique without the arguments is fine: the key holds no payload.
    ref = jobs.sealed.using(queue=queue, unique=Unique(by_args=False)).enqueue(secret)
    assert ops.get_job(ref.id).state == "available"


def test_an_encrypted_job_cannot_be_edited(queue, secret):
    ref = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret, fail=True)
    run_burst(queue)
    with pytest.raises(EncryptionError, match="cannot be edited"):
        ops.edit_and_retry(ref.id, args=["bob@example.org"])
    assert ops.get_job(ref.id).state == "failed"


def test_an_altered_value_does_not_open(secret):
    ring = sealing.Keyring([KEY.encode()])
    value = ring.seal(secret)
    assert ring.open(value) == secret
    tampered = value[:-8] + ("A" if value[-8] != "A" else "B") + value[-7:]
    with pytest.raises(EncryptionError, match="altered"):
        ring.open(tampered)
    with pytest.raises(EncryptionKeyMissing) as missing:
        sealing.Keyring([Fernet.generate_key()]).open(value)
    assert missing.value.key_id == sealing.key_id(KEY.encode())


def test_a_stored_sealed_value_carries_its_key_id_not_its_key(queue, secret):
    ref = jobs.sealed.using(queue=queue).enqueue(secret)
    info = run(stored_job(ref.id))
    assert info.args.startswith(sealing.PREFIX + sealing.key_id(KEY.encode()) + ":")
    assert KEY not in info.args and KEY not in where_found(KEY)


@job(kind="tests.encryption.declared", encrypt=True)
def declared(value: str) -> str:
    return value


def test_the_declaration_records_the_choice():
    assert declared.encrypt and not jobs.plain.encrypt


def _checks(databases=None) -> list:
    from django.core import checks

    found = checks.run_checks(databases=databases, include_deployment_checks=bool(databases))
    return [m for m in found if m.id.startswith("awa_django.E00")]


def _check_ids(databases=None) -> list[str]:
    return [m.id for m in _checks(databases)]


def test_checks_refuse_encryption_without_a_key_and_a_key_dropped_too_soon(queue, secret):
    assert "awa_django.E006" not in _check_ids()
    with with_keys():
        assert "awa_django.E006" in _check_ids()  # testapp.sealed asks for it
    jobs.sealed.using(queue=queue).enqueue(secret)
    assert "awa_django.E007" not in _check_ids(["default"])
    with with_keys(NEW_KEY):  # the key of the stored job dropped
        [error] = [m for m in _checks(["default"]) if m.id == "awa_django.E007"]
        assert sealing.key_id(KEY.encode()) in error.msg and "1 ready" in error.msg
        assert "awa_django.E007" not in _check_ids()  # only with --deploy --database
    with with_keys(NEW_KEY, KEY):  # rotated: both held
        assert "awa_django.E007" not in _check_ids(["default"])


def test_awa_keys_status_reports_without_decrypting(queue, secret):
    import json
    from io import StringIO

    from django.core.management import call_command

    jobs.sealed.using(queue=queue).enqueue(secret)
    out = StringIO()
    with with_keys(NEW_KEY):
        call_command("awa_keys", "status", "--json", stdout=out)
    report = {row["key_id"]: row for row in json.loads(out.getvalue())}
    old = report[sealing.key_id(KEY.encode())]
    assert (old["configured"], old["missing"], old["jobs"]["ready"]) == (False, True, 1)
    assert report[sealing.key_id(NEW_KEY.encode())]["primary"]
    out = StringIO()
    call_command("awa_keys", "status", stdout=out)
    assert "seals new jobs" in out.getvalue() and secret not in out.getvalue()


def test_the_how_to_example(secret):
    from django.core import mail

    from docs.examples import encryption as example
    from tests.django.test_docs_examples import LOCMEM

    token = uuid.uuid4().hex
    ref = example.send_password_reset.enqueue(secret, token)
    with override_settings(**LOCMEM):  # the in-memory mail backend, as Django spells it
        run_burst("default")
    [sent] = mail.outbox
    assert sent.to == [secret] and token in sent.body
    shown = example.show_reset_job(ref.id, "support@example.org")
    assert sealing.is_sealed(shown["stored"])
    assert shown["opened"] == [secret, token] and shown["result"] == f"sent to {secret}"
    assert where_found(secret) == [] and where_found(token) == []
    [read] = [e for e in ops.audit_log(limit=10) if e.action == "view_job_arguments"]
    assert (read.actor, read.job_ids, read.outcome) == ("support@example.org", [ref.id], "ok")


def test_reseal_moves_held_jobs_to_the_new_key_and_leaves_the_rest(queue, secret):
    from io import StringIO

    from django.core.management import call_command

    old_id, new_id = sealing.key_id(KEY.encode()), sealing.key_id(NEW_KEY.encode())
    dead = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret, fail=True)
    run_burst(queue)
    assert ops.move_failed_to_dlq(dead.id)
    later = jobs.sealed.using(queue=queue, run_in=3600).enqueue(secret)  # deferred
    plain = jobs.plain.using(queue=queue, run_in=3600).enqueue(1)
    with with_keys(NEW_KEY, KEY):
        before = {u.key_id: u.jobs for u in ops.key_status()}
        assert (before[old_id]["dlq"], before[old_id]["deferred"]) == (1, 1)
        out = StringIO()
        call_command("awa_keys", "reseal", "--yes", stdout=out)
        assert "resealed 1 deferred and 1 dead-lettered jobs" in out.getvalue()
        after = {u.key_id: u.jobs for u in ops.key_status()}
        assert (after[old_id]["dlq"], after[old_id]["deferred"]) == (0, 0)
        assert (after[new_id]["dlq"], after[new_id]["deferred"]) == (1, 1)
        # Still whole: every value opens, with the new key alone.
        with with_keys(NEW_KEY):
            opened = sealing.open_info(ops.get_job(dead.id))
            assert opened.args == [secret] and secret in opened.errors[0]["message"]
            assert opened.progress["checkpoint"]["seen"] == secret
            assert sealing.open_info(ops.get_job(later.id)).args == [secret]
        assert ops.get_job(plain.id).args == [1]  # not encrypted: untouched
        assert ops.reseal_held() == {"deferred": 0, "dlq": 0, "skipped": 0}  # nothing left
    [entry] = [e for e in ops.audit_log(limit=10) if e.action == "reseal_held"]
    assert entry.count == 2 and entry.detail["resealed"] == {"deferred": 1, "dlq": 1}
    assert where_found(secret) == []


def test_awa_worker_processes_with_and_without_the_key(queue, secret):
    """Real ``awa_worker --burst`` processes: one holding only another key
    fails the attempt and never calls the handler; one holding the key (and
    the new one first) runs the job from the dead-letter queue."""
    ref = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret)
    env = {"AWA_SETTINGS_JSON": json.dumps({"QUEUE_DLQ": {queue: True}})}
    lacking = WorkerProcess(
        "--queue", queue, "--burst", env={**env, "AWA_ENCRYPTION_KEYS": NEW_KEY}
    )
    assert lacking.wait(timeout=120) == 0, lacking.output()
    info = ops.get_job(ref.id)
    assert info.state == "dlq" and not Execution.objects.filter(job_id=ref.id).exists()
    assert info.errors[0]["type"] == "awa_django.exceptions.EncryptionKeyMissing"
    assert secret not in lacking.output()
    ops.dlq_retry(ref.id)
    holding = WorkerProcess(
        "--queue", queue, "--burst", env={**env, "AWA_ENCRYPTION_KEYS": f"{NEW_KEY},{KEY}"}
    )
    assert holding.wait(timeout=120) == 0, holding.output()
    assert ops.get_job(ref.id).state == "completed"
    assert list(Execution.objects.filter(job_id=ref.id).values_list("label", flat=True)) == [secret]
    assert secret not in holding.output() and where_found(secret) == []


def test_the_test_kit_matches_encrypted_jobs_by_their_arguments(queue, secret):
    from awa_django.testing import assert_enqueued, refute_enqueued

    jobs.sealed.using(queue=queue).enqueue(secret, fail=True)
    [info] = assert_enqueued(jobs.sealed, args=[secret], kwargs={"fail": True}, queue=queue)
    assert info.args == [secret]
    refute_enqueued(jobs.sealed, args=["someone else"], queue=queue)


def test_awa_job_show_prints_it_sealed_unless_asked_to_decrypt(queue, secret):
    from io import StringIO

    from django.core.management import call_command

    ref = jobs.sealed.using(queue=queue, max_attempts=1).enqueue(secret, fail=True)
    run_burst(queue)
    out = StringIO()
    call_command("awa_job", "show", str(ref.id), stdout=out)
    assert secret not in out.getvalue() and "<encrypted with key " in out.getvalue()
    assert [e for e in ops.audit_log(limit=10) if e.action == "view_job_arguments"] == []
    out = StringIO()
    call_command("awa_job", "show", str(ref.id), "--decrypt", stdout=out)
    assert f"could not deliver to {secret}" in out.getvalue()
    [read] = [e for e in ops.audit_log(limit=10) if e.action == "view_job_arguments"]
    assert read.job_ids == [ref.id] and "@" in read.actor


def test_a_partitioned_queue_that_encrypts_seals_each_partition(queue, secret):
    from awa_django import PartitionedQueue

    pii = PartitionedQueue(queue, 4)
    with with_keys(KEY, QUEUES={queue: {"encrypt": True}}):
        refs = [jobs.plain.using(queue=pii.route_by_index(n)).enqueue(n, b=1) for n in range(4)]
        assert all(sealing.is_sealed(ops.get_job(r.id).kwargs) for r in refs)
        with pytest.raises(EncryptionError, match="cannot match"):
            ops.browse_jobs(queue=pii.route_by_index(1), args_contains=[1])


def test_a_key_is_the_same_key_however_it_is_written():
    assert sealing.key_bytes(f"  {KEY}\n") == KEY.encode()
    assert sealing.key_id(f" {KEY} ".encode()) == sealing.key_id(KEY.encode())
    with pytest.raises(ValueError, match="Fernet key"):
        sealing.key_bytes(KEY[:-4])


def test_a_decrypted_read_needs_an_actor(queue, secret):
    ref = jobs.sealed.using(queue=queue).enqueue(secret)
    with pytest.raises(InvalidJob, match="actor"):
        ops.decrypt_job(ref.id, actor=None)
    assert [e for e in ops.audit_log(limit=10) if e.action == "view_job_arguments"] == []


def test_reseal_leaves_a_job_it_cannot_open_and_reports_it(queue, secret):
    foreign = Fernet.generate_key().decode()
    with with_keys(foreign):
        lost = jobs.sealed.using(queue=queue, run_in=3600).enqueue(secret)
    kept = jobs.sealed.using(queue=queue, run_in=3600).enqueue(secret)
    with with_keys(NEW_KEY, KEY):
        done = ops.reseal_held(actor="ops@example.org")
    assert done == {"deferred": 1, "dlq": 0, "skipped": 1}
    assert sealing.sealed_key_id(ops.get_job(kept.id).kwargs) == sealing.key_id(NEW_KEY.encode())
    assert sealing.sealed_key_id(ops.get_job(lost.id).kwargs) == sealing.key_id(foreign.encode())
    [entry] = [e for e in ops.audit_log(limit=10) if e.action == "reseal_held"]
    assert entry.detail["skipped"] == [lost.id]


def test_empty_arguments_are_sealed_once_and_open_to_fresh_values():
    ring = sealing.Keyring([KEY.encode()])
    assert ring.seal_json("{}") == ring.seal_json("{}") != ring.seal_json("[]")
    opened = ring.open_json(json.loads(ring.seal_json("{}")))
    opened["changed"] = True
    assert ring.open_json(json.loads(ring.seal_json("{}"))) == {}
    # Another process's seal of the same empty value opens the ordinary way.
    other = sealing.Keyring([KEY.encode()])
    assert other.open_json(json.loads(ring.seal_json("[]"))) == []
    assert ring.seal_json('{"a":1}') != ring.seal_json('{"a":1}')  # anything else: a fresh seal
