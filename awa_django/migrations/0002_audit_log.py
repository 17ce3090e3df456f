"""The operator audit log: ``awa.audit_log`` (substrate 2).

A new table that the previous release's code never touches; unapplying
drops it (``0002_audit_log_down.sql``).
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0001_initial")]

    operations = [
        RunAwaSQL("0002_audit_log.sql", reverse="0002_audit_log_down.sql"),
    ]
