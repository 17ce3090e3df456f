"""Schema version 8: the maintenance lease (``awa.maintenance_lease``).

Leadership for workers whose database goes through a transaction-mode
pooler and that have no direct connection for the election's session lock.
A new table and new functions that the previous release's code never uses,
in a file of their own; unapplying drops them
(``0008_maintenance_lease_down.sql``) and steps ``schema_version`` back to 7.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0007_job_window_by_id")]

    operations = [
        RunAwaSQL("0008_maintenance_lease.sql", reverse="0008_maintenance_lease_down.sql"),
    ]
