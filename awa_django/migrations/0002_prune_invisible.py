"""Prune retires a slot before emptying it; the hot path reads live slots only.

Runs the changed files of ``awa_django/sql/schema`` again (each is
idempotent): ``maintenance.sql`` adds ``awa.ring_retirements`` and the
two-step prune, ``claim.sql`` and ``leases.sql`` replace function bodies
(arguments, results and meaning unchanged), and ``roles.sql`` restricts the
new maintenance table.  Unapplying keeps the new bodies, which work
against either schema: nothing to undo but an empty table, which
``0001_initial``'s reverse drops with the schema.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0001_initial")]

    operations = [
        RunAwaSQL("maintenance.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("claim.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("leases.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("roles.sql", reverse=RunAwaSQL.noop),
    ]
