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
