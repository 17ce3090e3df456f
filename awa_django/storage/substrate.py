"""Installing and inspecting the queue-storage substrate.

:class:`RunAwaSQL` is the migration operation: it runs one ``.sql`` file from
``awa_django/sql/schema`` as a single statement batch (no sqlparse
splitting, which would mangle ``$$`` function bodies) inside the migration's
transaction.  The files guard themselves with ``pg_advisory_xact_lock`` and
are idempotent, so concurrent ``migrate`` runs serialise and the later one
changes nothing.  The operation only touches the alias named by
``AWA["DATABASE"]``; other databases are skipped.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import migrations
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import ProjectState

from ..conf import awa_settings
from ..sql import schema_file
from .base import Execute, Steps, operation, single

# The substrate version this code needs (``awa.substrate_info``): 1 is the
# 0.1.0 substrate installed by migration 0001_initial, 2 adds the audit log
# (0002_audit_log), 3 marks sequential waits and places DLQ retries ready at
# once (0003_dlq_retry_ready), 4 adds the search by arguments (0004_args_search),
# 5 the atomic handlers' close, awa.complete_receipt (0005_atomic_closures),
# 6 the edit and retry of a job (0006_edit_and_retry), ..., 10 the outbox relay's
# fence (0011_outbox_fence), 11 the prune that can detach before it truncates
# (0012_prune_detached).
SCHEMA_VERSION = 11


class RunAwaSQL(migrations.RunSQL):
    """Run ``sql/schema/<forward>`` (and ``<reverse>`` when unapplying).

    ``reverse=RunAwaSQL.noop`` marks a file whose objects another operation's
    reverse removes (``uninstall.sql`` drops the whole schema).
    """

    def __init__(self, forward: str, reverse: str | None = None) -> None:
        self.forward = forward
        self.reverse = reverse
        super().__init__(sql=forward, reverse_sql=reverse, elidable=False)

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"forward": self.forward}
        if self.reverse is not None:
            kwargs["reverse"] = self.reverse
        return (self.__class__.__qualname__, [], kwargs)

    def describe(self) -> str:
        return f"Run awa substrate SQL {self.forward}"

    def _applies(self, connection: BaseDatabaseWrapper) -> bool:
        if connection.alias != awa_settings().database:
            return False
        if connection.vendor != "postgresql":
            raise ImproperlyConfigured(
                f"awa_django needs PostgreSQL; database {connection.alias!r} is {connection.vendor}"
            )
        return True

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if self._applies(schema_editor.connection):
            schema_editor.execute(schema_file(self.forward), params=None)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if self.reverse is None:
            raise NotImplementedError(f"{self.forward} cannot be reversed")
        if self.reverse == self.noop:
            return
        if self._applies(schema_editor.connection):
            schema_editor.execute(schema_file(self.reverse), params=None)


class RunOutboxSQL(RunAwaSQL):
    """Run an outbox file (``outbox.sql``) on the alias ``AWA["OUTBOX_DATABASE"]``
    names, the application's database in outbox mode; other aliases, and
    every alias when outbox mode is off, are skipped."""

    def describe(self) -> str:
        return f"Run awa outbox SQL {self.forward}"

    def _applies(self, connection: BaseDatabaseWrapper) -> bool:
        return connection.alias == awa_settings().outbox_database


@operation
def installed_version() -> Steps[int | None]:
    """Installed substrate version, or None when the awa schema is absent."""
    if not single((yield Execute.named("substrate", "substrate_installed"))):
        return None
    return int(single((yield Execute.named("substrate", "schema_version"))))


@operation
def ping() -> Steps[None]:
    """One round trip (``SELECT 1``): the database answers on this connection."""
    yield Execute.named("substrate", "ping")
