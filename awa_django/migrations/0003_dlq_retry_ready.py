"""Substrate 3: the states the spec names.

A handler blocked in a sequential wait shows ``waiting_external`` (and
``running`` again after the resume), and a DLQ retry due now is placed in its
lane at once (``available``) instead of waiting for the leader's promotion.

Runs changed files of ``awa_django/sql/schema`` again (each is idempotent):
``leases.sql`` adds the wait's mark (a nullable ``awa.leases.waiting_for``,
``awa.mark_callback_wait``, ``awa.lease_state``) and raises
``schema_version`` to 3; ``console.sql`` shows lease states through
``awa.lease_state`` (views and functions keep their columns and arguments);
``dlq.sql`` adds ``awa.dlq_retry_at`` and gives ``awa.dlq_retry`` a new body
(same arguments and result: the ids moved, due now).  Workers of 0.1.0 keep
working: they never mark a wait (their waits show ``running``, as before).
Unapplying keeps the new bodies, which work against either schema; the
column goes with the schema when ``0001_initial`` is unapplied.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0002_audit_log")]

    operations = [
        RunAwaSQL("leases.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("console.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("dlq.sql", reverse=RunAwaSQL.noop),
    ]
