"""Schema version 9: the hot paths plan their statements once per session.

The claim plans its batch row and its returned rows once (``claim.sql``),
and the two helpers every single-job enqueue calls, ``awa.enqueue_shards``
and ``awa.queue_ring_cursor``, become PL/pgSQL, whose plans last the
session, where a SQL function that is not inlined is planned on each call
(``enqueue.sql``, ``rings.sql``).  Arguments, results and meaning stay, so
this migration runs the three files again.  Unapplying leaves the new
bodies, which answer exactly as the old ones did.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0008_maintenance_lease")]

    operations = [
        RunAwaSQL("rings.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("enqueue.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("claim.sql", reverse=RunAwaSQL.noop),
    ]
