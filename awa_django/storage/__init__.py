"""The storage engine: the only package that executes SQL.

Modules are split by area: ``enqueue`` (producers), ``attempts`` (claim,
close, progress, promotion: the worker hot path), ``maintenance`` (leader,
rings, rescue, cleanup), ``runtimes`` (liveness rows), ``jobs`` (reads),
``status`` (operator read-outs) and ``substrate`` (install/inspection).
Every operation is defined once and runs through either runner of
:mod:`.base`: :func:`run` / :class:`SyncRunner` on Django's connection
(joining the caller's ``transaction.atomic()``) or :class:`AsyncRunner` on
the worker's psycopg connections.
"""

from __future__ import annotations

from .base import AsyncRunner, Operation, SyncRunner, run

__all__ = ["AsyncRunner", "Operation", "SyncRunner", "run"]
