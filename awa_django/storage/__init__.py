"""The storage engine: the only package that executes SQL.

Modules are split by area (``enqueue``, ``jobs`` for reads, ``substrate`` for
install/inspection).  Functions that run inside a producer's transaction take
Django's connection for the configured alias, so they join the caller's
``transaction.atomic()``; the worker runtime will call the same statements on
its own psycopg connections.
"""
