"""The substrate migration: idempotent, reversible, safe to run concurrently."""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.db import connection

import awa_django.migrations
from awa_django.sql import queries, schema_file, schema_files
from awa_django.storage import run
from awa_django.storage.substrate import SCHEMA_VERSION, RunAwaSQL, installed_version
from tests.conftest import ROOT, database_url

from ..storage.test_enqueue import noop

CATALOG_FINGERPRINT = """
SELECT 'rel ' || c.relname || ' ' || c.relkind::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'awa'
UNION ALL
SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'awa' AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'fn ' || p.proname || ' ' || md5(pg_get_functiondef(p.oid)) FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'awa'
UNION ALL
SELECT 'view ' || viewname || ' ' || md5(definition) FROM pg_views WHERE schemaname = 'awa'
ORDER BY 1
"""


def fingerprint() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(CATALOG_FINGERPRINT)
        return [row[0] for row in cursor.fetchall()]


def schema_exists() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'awa'")
        return cursor.fetchone()[0] == 1


def test_substrate_has_the_rings_and_views(db):
    relations = {line.split()[1] for line in fingerprint() if line.startswith("rel ")}
    for table in (
        "ready_entries",
        "ready_segments",
        "ready_tombstones",
        "done_entries",
        "receipt_completion_batches",
    ):
        assert {f"{table}_{slot}" for slot in range(16)} <= relations
    for table in ("lease_claim_batches", "lease_claim_closures", "lease_claim_closure_batches"):
        assert {f"{table}_{slot}" for slot in range(8)} <= relations
    assert {f"leases_{slot}" for slot in range(8)} <= relations
    assert {
        "attempt_state",
        "deferred_jobs",
        "dlq_entries",
        "queue_enqueue_heads",
        "queue_claim_heads",
        "queue_meta",
        "queue_ring_rotations",
        "claim_ring_rotations",
        "lease_ring_rotations",
        "jobs",
        "terminal_jobs",
    } <= relations
    assert run(installed_version()) == SCHEMA_VERSION
    with connection.cursor() as cursor:
        cursor.execute("SELECT ring, slot_count FROM awa.ring_config ORDER BY ring")
        assert cursor.fetchall() == [("claim", 8), ("lease", 8), ("queue", 16)]


def test_running_the_substrate_again_changes_nothing(db, queue):
    ref = noop.using(queue=queue).enqueue("survives")
    before = fingerprint()
    with connection.cursor() as cursor:
        for operation in _migration_operations():
            if isinstance(operation, RunAwaSQL):
                cursor.execute(schema_file(operation.forward))
    assert fingerprint() == before
    from awa_django import ops

    assert ops.get_job(ref.id).args == ["survives"]


@pytest.mark.django_db(transaction=True)
def test_migrate_twice_is_a_noop_and_zero_removes_everything(reset_awa):
    call_command("migrate", "awa_django", verbosity=0)  # already applied: no-op
    assert schema_exists()
    before = fingerprint()
    try:
        call_command("migrate", "awa_django", "zero", verbosity=0)
        assert not schema_exists()
        assert run(installed_version()) is None
    finally:
        call_command("migrate", "awa_django", verbosity=0)
    assert fingerprint() == before


@pytest.mark.django_db(transaction=True)
def test_two_processes_migrating_at_once_both_succeed(reset_awa):
    call_command("migrate", "awa_django", "zero", verbosity=0)
    try:
        env = {"DATABASE_URL": database_url(), "PATH": "/usr/bin:/bin"}
        command = [sys.executable, str(ROOT / "testproject" / "manage.py"), "migrate", "awa_django"]
        procs = [
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=120)[0].decode() for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], outputs
        assert run(installed_version()) == SCHEMA_VERSION
    finally:
        call_command("migrate", "awa_django", verbosity=0)


def _migration_operations_by_module():
    for module_info in pkgutil.iter_modules(awa_django.migrations.__path__):
        module = importlib.import_module(f"awa_django.migrations.{module_info.name}")
        for operation in module.Migration.operations:
            yield module_info.name, operation


def _migration_operations():
    for _, operation in _migration_operations_by_module():
        yield operation


def test_every_schema_file_belongs_to_exactly_one_migration():
    """Each file belongs to one migration; a later migration may also run a
    file of 0001_initial again (CONTRIBUTING, "Change the storage schema",
    rule 4), never undoing it."""
    referenced: list[str] = []
    rerun: list[str] = []
    for module, operation in _migration_operations_by_module():
        if isinstance(operation, RunAwaSQL):
            if module != "0001_initial" and operation.forward in referenced:
                assert operation.reverse == RunAwaSQL.noop, operation.forward
                rerun.append(operation.forward)
                continue
            referenced.append(operation.forward)
            if operation.reverse:
                referenced.append(operation.reverse)
    assert sorted(referenced) == schema_files()
    assert len(referenced) == len(set(referenced))
    assert set(rerun) <= set(referenced) - {"uninstall.sql"}


def test_named_queries_parse():
    for area in ("enqueue", "jobs", "maintenance", "runtime", "substrate"):
        assert queries(area), area


def test_no_missing_django_migrations(db):
    call_command("makemigrations", "awa_django", "--check", "--dry-run", verbosity=0)


def test_production_schema_has_no_function_that_discards_jobs(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regprocedure('awa.reset_data()') IS NULL")
        assert cursor.fetchone()[0]


def _server_has_lz4() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SAVEPOINT lz4_probe")
        try:
            cursor.execute("SET LOCAL default_toast_compression = lz4")
        except Exception:
            cursor.execute("ROLLBACK TO SAVEPOINT lz4_probe")
            return False
        cursor.execute("RELEASE SAVEPOINT lz4_probe")
        return True


def test_hot_arrays_and_payloads_use_lz4_where_the_server_has_it(db):
    # Every partition of each ring table, existing and created later, and
    # the parent itself (new partitions inherit from it).
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT DISTINCT a.attcompression
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'awa'
                WHERE (c.relname ~ '^lease_claim_batches(_[0-9]+)?$' AND a.attname = 'job_ids')
                   OR (c.relname ~ '^receipt_completion_batches(_[0-9]+)?$'
                       AND a.attname = 'lane_seqs')
                   OR (c.relname ~ '^ready_entries(_[0-9]+)?$' AND a.attname = 'args')"""
        )
        methods = {row[0] for row in cursor.fetchall()}
    assert methods == ({"l"} if _server_has_lz4() else {""})


_CALL = re.compile(r"\bawa\.([a-z_][a-z0-9_]*)\s*\(")


def _calls(text: str) -> set[str]:
    return set(_CALL.findall(re.sub(r"--[^\n]*", "", text)))


def _installed_functions() -> dict[str, str]:
    """Name -> body of every function in schema awa (no overloads today)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace"
        )
        rows = cursor.fetchall()
    assert len({name for name, _ in rows}) == len(rows), "an overload: extend this guard"
    return dict(rows)


def test_every_function_the_code_calls_exists_under_one_final_name(db):
    functions = _installed_functions()
    assert not [name for name in functions if re.search(r"_v\d+$", name)]
    called = set().union(*(_calls("\n".join(queries(area).values())) for area in _query_areas()))
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relnamespace = 'awa'::regnamespace")
        relations = {row[0] for row in cursor.fetchall()}  # INSERT INTO awa.t (...)
    assert called - set(functions) - relations == set()


#: Functions the previous release's processes call and this release's code
#: no longer does: kept for one release (CONTRIBUTING, "Change the storage
#: schema", rule 4), dropped by the next.  Name -> what replaced it.
KEPT_FOR_THE_PREVIOUS_RELEASE = {"job_page": "job_page_matching"}


def test_the_substrate_holds_no_function_nothing_calls(db):
    # Reachable: what a named query, a trigger or a substrate file's own
    # statements call, and whatever those call in turn, and the functions
    # kept for the previous release's processes.
    functions = _installed_functions()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT t.tgfoid::regproc::text FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE c.relnamespace = 'awa'::regnamespace AND NOT t.tgisinternal"
        )
        triggers = {row[0].removeprefix("awa.") for row in cursor.fetchall()}
    files = "\n".join(
        re.sub(r"\$\$.*?\$\$", "", schema_file(operation.forward), flags=re.S)
        for operation in _migration_operations()
        if isinstance(operation, RunAwaSQL)
    )
    queried = set().union(*(_calls("\n".join(queries(area).values())) for area in _query_areas()))
    kept = list(KEPT_FOR_THE_PREVIOUS_RELEASE)
    assert set(kept) <= set(functions)
    assert set(KEPT_FOR_THE_PREVIOUS_RELEASE.values()) <= queried
    reached, todo = set(), [*queried, *triggers, *_calls(files), *kept]
    while todo:
        name = todo.pop()
        if name in reached or name not in functions:
            continue
        reached.add(name)
        todo.extend(_calls(functions[name]))
    assert sorted(set(functions) - reached) == []


def _query_areas() -> list[str]:
    folder = ROOT / "awa_django" / "sql" / "queries"
    return sorted(path.stem for path in folder.glob("*.sql"))


def assert_unapplying_drops_only(queue: str, target: str, version: int, dropped) -> None:
    """Migrate back to ``target``: the substrate is at ``version``, exactly the
    fingerprint lines ``dropped`` selects are gone, a job survives; then
    forward again to where it was."""
    ref = noop.using(queue=queue).enqueue("kept")
    before = fingerprint()
    try:
        call_command("migrate", "awa_django", target, verbosity=0)
        assert run(installed_version()) == version
        assert set(before) - set(fingerprint()) == {line for line in before if dropped(line)}
        from awa_django import ops

        assert ops.get_job(ref.id).args == ["kept"]
    finally:
        call_command("migrate", "awa_django", verbosity=0)
    assert fingerprint() == before
    assert run(installed_version()) == SCHEMA_VERSION


def _fence_objects(line: str) -> bool:
    return "outbox_fence" in line or line.startswith(("fn relay_unique ", "fn relay_dependent "))


def _lease_objects(line: str) -> bool:
    """0008's objects, and those of every later migration (unapplied with it)."""
    return (
        "maintenance_lease" in line
        or "runtime_instances.connection_mode" in line
        or _fence_objects(line)
    )


@pytest.mark.django_db(transaction=True)
def test_unapplying_edit_and_retry_drops_only_its_function(reset_awa, queue):
    # 0008's objects go too: unapplying 0006 unapplies every later migration.
    assert_unapplying_drops_only(
        queue,
        "0005_atomic_closures",
        5,
        lambda line: line.startswith("fn edit_and_retry ") or _lease_objects(line),
    )


@pytest.mark.django_db(transaction=True)
def test_unapplying_the_maintenance_lease_drops_only_its_objects(reset_awa, queue):
    assert any(line.startswith("rel maintenance_lease ") for line in fingerprint())
    assert_unapplying_drops_only(queue, "0007_job_window_by_id", 7, _lease_objects)


@pytest.mark.django_db(transaction=True)
def test_unapplying_the_outbox_fence_drops_only_its_objects(reset_awa, queue):
    assert any(line.startswith("rel outbox_fence ") for line in fingerprint())
    assert_unapplying_drops_only(queue, "0010_job_arguments_permission", 9, _fence_objects)
