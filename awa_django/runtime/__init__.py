"""The worker runtime (asyncio dispatcher, executor, completer, maintenance).

Arrives with the runtime issue; it never imports the ORM and reaches the
database only through ``awa_django.storage``.
"""
