"""The worker runtime: asyncio services, grouped by what they do to a job.

Every service reaches the database only through ``awa_django.storage``
operations, run by an ``AsyncRunner`` (the relay: a ``SyncRunner``); the
runtime never imports the ORM.
The sub-packages, top to bottom (an import-linter contract in
``pyproject.toml`` keeps each one importing only those below it):

``process/``
    One worker process wired together (``worker``), its LISTEN connection
    (``notifier``) and the supervisor of ``--processes N``.  Start here to
    see what runs and in which order.
``leadership/`` and ``health/``
    The elected maintenance leader with its periodic tasks and the
    promoter; and the health listener, its probes and the supervisor's
    fleet view.  Independent of each other.
``relay``
    Outbox mode's relay: committed outbox entries of the application's
    database become jobs of the queue's, each exactly once.  The one
    synchronous service: it runs on Django's connections for the two
    aliases (``manage.py awa_relay``, the test kit's ``drain()``, and the
    maintenance leader, in threads of its own), so it shares transactions
    with the callers that need it to.
``attempts/``
    One claimed batch from claim to closure: dispatcher, pacing, permits,
    live overrides, executor, handler threads, eager mode, closing and the
    handler's own transaction (``atomic``).
``completion/``
    Writing outcomes (completer, flush retry) and keeping running attempts
    alive (heartbeat, leases, progress), seeing them only through
    ``inflight``.

At the root, below all of them, :mod:`.config` (every service's frozen
config, parsed once from settings) and :mod:`.service` (the one shape of a
periodic service: a frozen config, ``start()`` / ``stop()`` and a
``run_once()`` that the loop and the tests both call).
"""
