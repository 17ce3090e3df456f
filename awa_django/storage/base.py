"""One definition per storage operation, two runners to execute it.

A storage operation (claim, close, enqueue, rotate, prune, a read, ...) is a
generator function decorated with :func:`operation`.  It yields the
statements it needs -- :class:`Execute` for a named statement from ``sql/``
with its parameters, :class:`Copy` for a ``COPY ... FROM STDIN`` -- receives
each statement's rows back, and returns the decoded result.  It never
touches a connection itself, so the same definition runs:

* on Django's connection for a database alias through :class:`SyncRunner`
  (the statements join the caller's ``transaction.atomic()`` block: ops,
  admin, the Tasks backend, the test kit, management commands), or on a
  plain sync psycopg connection (tests that need a second session);
* on a psycopg ``AsyncConnection`` (or a connection pool) through
  :class:`AsyncRunner` (the worker runtime and the maintenance leader).

This is psycopg's own split (one ``_cursor_base`` under a sync and an async
cursor), with the protocol reduced to "statement in, rows out".  Operations
that write through several statements are declared with
``@atomic_operation``: the runner wraps them in a transaction (a
savepoint when the caller already has one), so a failure leaves nothing
half-written and the caller's transaction usable.

Parameters that are long integer lists travel as array literals
(:func:`int_array`): adapting 512 Python ints one by one costs more than
the statement that uses them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeAlias, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..sql import query

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
P = ParamSpec("P")

Row: TypeAlias = tuple[Any, ...]
Params: TypeAlias = Sequence[Any] | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Execute:
    """Run one statement; the operation receives its rows (``[]`` when it returns none)."""

    sql: str
    params: Params = ()

    @classmethod
    def named(cls, area: str, name: str, params: Params = ()) -> Execute:
        """The statement ``name`` of ``sql/queries/<area>.sql``."""
        return cls(query(area, name), params)


@dataclass(frozen=True, slots=True)
class Copy:
    """``COPY ... FROM STDIN`` with ``data`` already in COPY text format."""

    sql: str
    data: str


Step: TypeAlias = Execute | Copy
Steps: TypeAlias = Generator[Step, list[Row], T]


class Operation(Generic[T_co]):
    """A storage operation ready to run: its steps and whether they form one transaction."""

    __slots__ = ("atomic", "name", "steps")

    def __init__(self, steps: Steps[T_co], *, atomic: bool, name: str) -> None:
        self.steps = steps
        self.atomic = atomic
        self.name = name

    def __repr__(self) -> str:
        return f"<Operation {self.name}{' (atomic)' if self.atomic else ''}>"

    def take_steps(self) -> Steps[T_co]:
        """The steps, once: an operation is a single run (build a new one to repeat it)."""
        if inspect.getgeneratorstate(self.steps) != inspect.GEN_CREATED:
            raise RuntimeError(f"{self!r} has already run; call the operation again")
        return self.steps


def operation(func: Callable[P, Steps[T]]) -> Callable[P, Operation[T]]:
    """Declare a storage operation: ``func`` yields statements, returns the result."""
    return _declare(func, atomic=False)


def atomic_operation(func: Callable[P, Steps[T]]) -> Callable[P, Operation[T]]:
    """Declare a storage operation whose statements form one transaction."""
    return _declare(func, atomic=True)


def _declare(func: Callable[P, Steps[T]], *, atomic: bool) -> Callable[P, Operation[T]]:
    @functools.wraps(func)
    def build(*args: P.args, **kwargs: P.kwargs) -> Operation[T]:
        return Operation(func(*args, **kwargs), atomic=atomic, name=func.__name__)

    return build


def single(rows: list[Row]) -> Any:
    """The one value of a one-row, one-column result."""
    return rows[0][0]


def int_array(values: Sequence[int]) -> str:
    """An integer array literal (the SQL casts it)."""
    return "{" + ",".join(map(str, values)) + "}"


def nullable_int_array(values: Sequence[int | None]) -> str:
    """:func:`int_array` where an element may be NULL."""
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


# --- sync ----------------------------------------------------------------------


def _drive(op: Operation[T], execute: Callable[[Step], list[Row]]) -> T:
    steps = op.take_steps()
    try:
        step = next(steps)
        while True:
            step = steps.send(execute(step))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class SyncRunner:
    """Runs operations on Django's connection for ``target`` (an alias, default
    ``AWA["DATABASE"]``) or on a sync psycopg connection."""

    __slots__ = ("_target",)

    def __init__(self, target: str | psycopg.Connection[Any] | None = None) -> None:
        self._target = target

    @contextlib.contextmanager
    def _session(self, atomic: bool) -> Iterator[Any]:
        if isinstance(self._target, psycopg.Connection):
            conn = self._target
            with conn.transaction() if atomic else contextlib.nullcontext(), conn.cursor() as cur:
                yield cur
            return
        from django.db import transaction

        from .connection import alias_for, django_connection

        alias = alias_for(self._target)
        connection = django_connection(alias)
        with (
            transaction.atomic(using=alias) if atomic else contextlib.nullcontext(),
            connection.cursor() as cursor,
        ):
            yield cursor

    def __call__(self, op: Operation[T]) -> T:
        with self._session(op.atomic) as cursor:

            def execute(step: Step) -> list[Row]:
                if isinstance(step, Copy):
                    raw = getattr(cursor, "cursor", cursor)  # Django's wrapper holds psycopg's
                    with raw.copy(step.sql) as copy:
                        copy.write(step.data)
                    return []
                cursor.execute(step.sql, step.params)
                return cursor.fetchall() if cursor.description is not None else []

            return _drive(op, execute)


def run(op: Operation[T], database: str | None = None) -> T:
    """Run ``op`` on Django's connection for ``database`` (in the caller's transaction)."""
    return SyncRunner(database)(op)


# --- async ---------------------------------------------------------------------


class AsyncRunner:
    """Runs operations on a psycopg ``AsyncConnection`` or a connection from a pool."""

    __slots__ = ("_target",)

    def __init__(self, target: psycopg.AsyncConnection[Any] | AsyncConnectionPool[Any]) -> None:
        self._target = target

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if isinstance(self._target, AsyncConnectionPool):
            async with self._target.connection() as conn:
                yield conn
        else:
            yield self._target

    async def __call__(self, op: Operation[T]) -> T:
        async with self._connection() as conn:
            if op.atomic:
                async with conn.transaction():
                    return await self._drive(conn, op)
            return await self._drive(conn, op)

    @staticmethod
    async def _drive(conn: psycopg.AsyncConnection[Any], op: Operation[T]) -> T:
        steps = op.take_steps()
        rows: list[Row] | None = None
        try:
            step = next(steps)
            while True:
                async with conn.cursor() as cursor:
                    if isinstance(step, Copy):
                        async with cursor.copy(step.sql) as copy:
                            await copy.write(step.data)
                        rows = []
                    else:
                        await cursor.execute(step.sql, step.params)
                        rows = await cursor.fetchall() if cursor.description is not None else []
                step = steps.send(rows)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
