"""A prune truncates only the children of its slot that have storage.

``awa.prune_ring_unchecked`` (``maintenance.sql``) used to truncate every
child of the slot it empties.  A TRUNCATE of an empty table costs what any
other does -- new files for the table, its TOAST table and each index, an
fsync of each rebuilt btree on PostgreSQL before 17, and invalidations that
every session replays -- and most queue slots never hold a tombstone, a
failure or an explicit closure.  Under the prune's lock it now leaves alone
the children without a page.  The file runs again; unapplying leaves the new
body, which an older release's leader calls as it did.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0012_prune_detached")]

    operations = [
        RunAwaSQL("maintenance.sql", reverse=RunAwaSQL.noop),
    ]
