"""Schema version 11: a prune no hot statement waits on, for AWA["PRUNE_DETACH"].

A prune's ACCESS EXCLUSIVE lock on the root child of the slot it empties
keeps every claim, lease heartbeat and lease close waiting until its commit:
their plans, made once per session over the whole parent, name every child.
With ``AWA["PRUNE_DETACH"]`` the leader detaches that child concurrently
first, and the prune attaches it again in the transaction that empties it
(``awa.prune_detach_target`` and ``awa.ring_reattach``, ``maintenance.sql``;
``roles.sql`` keeps both for maintainers).  The two files run again;
unapplying leaves the new bodies, with which an older release's leader
prunes as it did (it never detaches).
"""

from django.db import migrations

from awa_django.storage.substrate import RunAwaSQL


class Migration(migrations.Migration):
    dependencies = [("awa_django", "0011_outbox")]

    operations = [
        RunAwaSQL("maintenance.sql", reverse=RunAwaSQL.noop),
        RunAwaSQL("roles.sql", reverse=RunAwaSQL.noop),
    ]
