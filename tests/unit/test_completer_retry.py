"""Which flush errors the completer sends again as they are (see completer.retryable)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from awa_django.runtime.completer import retryable


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        PoolTimeout("couldn't get a connection after 30.00 sec"),
        errors.AdminShutdown(),
        errors.CrashShutdown(),
        errors.CannotConnectNow(),
        errors.ConnectionFailure(),
        errors.DeadlockDetected(),
        errors.SerializationFailure(),
    ],
)
def test_a_lost_connection_or_a_lost_conflict_is_retried(exc):
    assert retryable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.QueryCanceled(),  # statement_timeout
        errors.DiskFull(),
        errors.LockNotAvailable(),  # lock_timeout
        errors.OutOfMemory(),
        errors.UntranslatableCharacter(),
        errors.InvalidTextRepresentation(),
        errors.DataError(),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        ValueError("anything else"),
    ],
)
def test_anything_else_is_not_retried(exc):
    assert not retryable(exc)
