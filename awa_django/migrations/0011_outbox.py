"""Schema version 10 and the outbox: a queue in a database of its own.

On the queue's database (``AWA["DATABASE"]``) the relay's fence,
``awa.outbox_fence`` (``0011_outbox_fence.sql``), a new table and function
the previous release never uses.  On the application's database, when
``AWA["OUTBOX_DATABASE"]`` names it, the outbox itself (schema
``awa_outbox``, ``outbox.sql``).  Each runs only on its alias, so
``migrate`` installs both when run for each database.  Unapplying drops
them and steps ``schema_version`` back to 9.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL, RunOutboxSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0010_job_arguments_permission")]

    operations = [
        RunAwaSQL("0011_outbox_fence.sql", reverse="0011_outbox_fence_down.sql"),
        RunOutboxSQL("outbox.sql", reverse="outbox_uninstall.sql"),
    ]
