"""Schema version 6: edit and retry (``awa.edit_and_retry``).

A new function that the previous release's code never calls, in a file of
its own; unapplying drops it (``0006_edit_and_retry_down.sql``) and steps
``schema_version`` back to 5.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0005_atomic_closures")]

    operations = [
        RunAwaSQL("0006_edit_and_retry.sql", reverse="0006_edit_and_retry_down.sql"),
    ]
