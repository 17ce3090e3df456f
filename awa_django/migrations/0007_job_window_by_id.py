"""Schema version 7: the console's id windows read each ready row once.

``awa.job_window`` keeps its arguments, result and meaning; only its body
changes (the ready rows are found by id, then checked against their lane's
claim cursor), so this migration runs ``console.sql`` again.  Unapplying
leaves the new body, which answers exactly as the old one did.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0006_edit_and_retry")]

    operations = [RunAwaSQL("console.sql", reverse=RunAwaSQL.noop)]
