"""Schema version 4: the search by arguments (``awa.job_page_matching``).

The new function is an addition no 0.1.0 process calls, and ``awa.job_page``
keeps its arguments, result and meaning (its body now calls the new
function), so both live in ``console.sql``, which this migration runs again
(every substrate file is idempotent).  Unapplying leaves them: 0.1.0 code
never calls the new function and the old one answers as before.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0003_dlq_retry_ready")]

    operations = [RunAwaSQL("console.sql", reverse=RunAwaSQL.noop)]
