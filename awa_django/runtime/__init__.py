"""The worker runtime: asyncio services wired together by :mod:`.worker`.

Every service (dispatcher, completer, heartbeat, progress flush, notifier,
promoter, the leader and each maintenance task) reaches the database only
through ``awa_django.storage`` operations run by an ``AsyncRunner``; the
runtime never imports the ORM.  Periodic services share one shape
(:mod:`.service`): a frozen config, ``start()`` / ``stop()`` and a
``run_once()`` that the loop and the tests both call.
"""
