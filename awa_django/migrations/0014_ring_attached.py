"""A prune asks whether its ring's root children are all attached from pg_inherits.

``awa.prune_ring_unchecked`` (``maintenance.sql``) looked for a root child a
prune or a dead leader left detached through ``awa.ring_detached``, which
matches every relation of the schema against a name pattern: about 1 ms a
prune, planned again after each prune's truncations, with ``PRUNE_DETACH``
off as well.  ``awa.ring_attached`` counts the settled children of the
root in ``pg_inherits`` against the ring's slot count instead, and only a
shortfall goes on to ``awa.ring_reattach``.  The file runs again;
unapplying leaves the new bodies, which an older release's leader calls as
it did.
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0013_prune_stored_children")]

    operations = [
        RunAwaSQL("maintenance.sql", reverse=RunAwaSQL.noop),
    ]
