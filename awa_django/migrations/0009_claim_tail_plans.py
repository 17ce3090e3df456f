"""Schema version 9: the claim plans its batch row and its returned rows once.

``awa.claim_queue`` keeps its arguments, result and meaning; only its body
changes (the statements after the lanes are read use a generic plan), so
this migration runs ``claim.sql`` again.  Unapplying leaves the new body,
which answers exactly as the old one did.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0008_maintenance_lease")]

    operations = [RunAwaSQL("claim.sql", reverse=RunAwaSQL.noop)]
