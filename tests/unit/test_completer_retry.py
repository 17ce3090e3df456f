"""Which flush errors the completer sends again as they are (see completer.retryable)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from awa_django.runtime.completion.flush_retry import (
    refused_for_good,
    retryable,
    transient,
    unreachable,
)


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
def test_anything_else_is_not_retried_as_it_is(exc):
    assert not retryable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.QueryCanceled(),  # statement_timeout
        errors.LockNotAvailable(),  # lock_timeout
        errors.DiskFull(),
        errors.OutOfMemory(),
    ],
)
def test_a_timeout_or_a_shortage_is_transient_not_a_refusal(exc):
    """Retried a few times with backoff, then split; never failed for good."""
    assert transient(exc) and not refused_for_good(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.UntranslatableCharacter(),
        errors.InvalidTextRepresentation(),
        errors.NotNullViolation(),
        errors.ProgramLimitExceeded(),
        psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
    ],
)
def test_a_refused_value_is_refused_for_good(exc):
    """The attempt ends failed (or DLQ): the same values fail every time."""
    assert refused_for_good(exc) and not transient(exc)


@pytest.mark.parametrize(
    "exc", [errors.UndefinedFunction(), errors.InsufficientPrivilege(), errors.InternalError_()]
)
def test_any_other_error_is_neither(exc):
    """Its fallback retries the attempt while attempts remain."""
    assert not refused_for_good(exc) and not transient(exc) and not retryable(exc)


def test_no_connection_to_be_had_is_waited_for():
    assert unreachable(PoolTimeout("couldn't get a connection"))
    assert unreachable(errors.CannotConnectNow())
    assert not unreachable(psycopg.OperationalError("server closed the connection"))
