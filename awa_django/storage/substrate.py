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

from django.core.exceptions import ImproperlyConfigured
from django.db import migrations

from ..conf import awa_settings
from ..sql import query, schema_file
from .connection import django_connection

# The substrate version this code needs (the last vNNN file).
SCHEMA_VERSION = 3


class RunAwaSQL(migrations.RunSQL):
    """Run ``sql/schema/<forward>`` (and ``<reverse>`` when unapplying)."""

    def __init__(self, forward: str, reverse: str | None = None) -> None:
        self.forward = forward
        self.reverse = reverse
        super().__init__(sql=forward, reverse_sql=reverse if reverse else None, elidable=False)

    def deconstruct(self):
        kwargs = {"forward": self.forward}
        if self.reverse:
            kwargs["reverse"] = self.reverse
        return (self.__class__.__qualname__, [], kwargs)

    def describe(self) -> str:
        return f"Run awa substrate SQL {self.forward}"

    def _applies(self, connection) -> bool:
        if connection.alias != awa_settings().database:
            return False
        if connection.vendor != "postgresql":
            raise ImproperlyConfigured(
                f"awa_django needs PostgreSQL; database {connection.alias!r} is {connection.vendor}"
            )
        return True

    def database_forwards(self, app_label, schema_editor, from_state, to_state) -> None:
        if self._applies(schema_editor.connection):
            schema_editor.execute(schema_file(self.forward), params=None)

    def database_backwards(self, app_label, schema_editor, from_state, to_state) -> None:
        if self.reverse is None:
            raise NotImplementedError(f"{self.forward} cannot be reversed")
        if self._applies(schema_editor.connection):
            schema_editor.execute(schema_file(self.reverse), params=None)


def installed_version(database: str | None = None) -> int | None:
    """Installed substrate version, or None when the awa schema is absent."""
    with django_connection(database).cursor() as cursor:
        cursor.execute(query("substrate", "substrate_installed"))
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(query("substrate", "schema_version"))
        return cursor.fetchone()[0]


def reset_data(database: str | None = None) -> None:
    """Discard every job and restore empty rings (tests and demos only)."""
    with django_connection(database).cursor() as cursor:
        cursor.execute(query("substrate", "reset_data"))
