"""Schema version 10 and the outbox: a queue in a database of its own.

On the queue's database (``AWA["DATABASE"]``) the relay's fence,
``awa.outbox_fence``, and its functions (``0011_outbox_fence.sql``), which
the previous release never uses; and ``awa.enqueue_job_with_id``,
``awa.enqueue_unique_with_id`` and ``awa.enqueue_dependent_with_id``, the
bodies of the three enqueue functions taking the job's id (``enqueue.sql``
and ``dependencies.sql`` run again; the released functions call them).
On the application's database, when ``AWA["OUTBOX_DATABASE"]`` names it,
the outbox itself (schema ``awa_outbox``, ``outbox.sql``).  Each runs only
on its alias, so ``migrate`` installs both when run for each database.
Unapplying drops the fence and the outbox and steps ``schema_version`` back
to 9.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL, RunOutboxSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0010_job_arguments_permission")]

    operations = [
        RunAwaSQL("0011_outbox_fence.sql", reverse="0011_outbox_fence_down.sql"),
        # The enqueue functions' bodies moved to twins that take the job's id
        # (the relay's): body changes and additions, in the concerns' own
        # files (unapplying keeps them).
        RunAwaSQL("enqueue.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("dependencies.sql", reverse=RunAwaSQL.noop),
        RunOutboxSQL("outbox.sql", reverse="outbox_uninstall.sql"),
    ]
