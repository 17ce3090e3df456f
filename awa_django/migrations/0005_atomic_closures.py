"""Substrate 5: ``awa.complete_receipt``, the close of an atomic handler.

Atomic closes of items of one claim batch no longer queue on the batch's
row lock (see ``sql/schema/close.sql``).  The function is an addition the
0.1.0 workers never call, so it lives in ``close.sql``, which this
migration runs again (every schema file is idempotent); ``close.sql``
raises ``schema_version`` to 5.  Unapplying leaves the function: the
0.1.0 code ignores it, and ``uninstall.sql`` drops the whole schema.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0004_args_search")]

    operations = [RunAwaSQL("close.sql", reverse=RunAwaSQL.noop)]
