"""Typed errors raised by awa_django's public API."""

from __future__ import annotations


class AwaError(Exception):
    """Base class of every awa_django error."""


class InvalidJob(AwaError, ValueError):  # noqa: N818 - public name, part of the API contract
    """A job definition or enqueue request is invalid; nothing was written."""


class UniqueConflict(AwaError):  # noqa: N818 - public name, part of the API contract
    """A unique job with the same key already exists in a guarded state."""

    def __init__(self, message: str, existing_id: int | None = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class JobNotFound(AwaError, LookupError):  # noqa: N818 - public name, part of the API contract
    """No job with that id (or the attempt it names is no longer current)."""


class CallbackNotFound(AwaError, LookupError):  # noqa: N818 - public name, part of the API contract
    """No live callback with that id."""


class QueueFull(AwaError):  # noqa: N818 - public name, part of the API contract
    """A queue still held more available jobs than the producer allowed when
    its wait ran out; nothing of the batch was written.

    ``queue`` is the first queue found over its limit, ``depth`` its count of
    available jobs at the last check, ``max_depth`` the limit, ``waited`` the
    seconds spent waiting and ``paused`` whether the queue was paused (a
    paused queue does not drain, so waiting on it only ends with a resume).
    """

    def __init__(
        self, queue: str, depth: int, max_depth: int, *, waited: float = 0.0, paused: bool = False
    ) -> None:
        state = " (the queue is paused)" if paused else ""
        super().__init__(
            f"queue {queue!r} holds {depth} available jobs, more than the limit of "
            f"{max_depth}{state}; gave up after {waited:.3g}s"
        )
        self.queue = queue
        self.depth = depth
        self.max_depth = max_depth
        self.waited = waited
        self.paused = paused


class EncryptionError(AwaError):
    """A job's payload cannot be sealed or opened: no ``AWA["ENCRYPTION_KEYS"]``,
    the ``crypto`` extra is missing, a sealed value was altered, or an
    operation needs plain arguments of an encrypted job (unique by
    arguments, argument search).  When raised by an enqueue, nothing was
    written."""


class EncryptionKeyMissing(EncryptionError, LookupError):  # noqa: N818 - public name
    """A sealed value names a key that ``AWA["ENCRYPTION_KEYS"]`` of this
    process does not hold (``key_id``: the id stored with the value; the
    key itself is never stored)."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"this job's payload is sealed with key id {key_id}, which AWA['ENCRYPTION_KEYS'] "
            "of this process does not hold (see `manage.py awa_keys status`)"
        )
        self.key_id = key_id
