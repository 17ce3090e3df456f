"""Argument checks shared by every subject of the operator API.

The operator API is reached from code, commands, the console and HTTP
callbacks, so every value is checked before it reaches a statement: an id
PostgreSQL cannot hold, a filter with a NUL byte or a state that does not
exist raises ``InvalidJob`` naming it, instead of a driver error from deep
inside the storage.
"""

from __future__ import annotations

from ..domain.records import JOB_STATES
from ..exceptions import InvalidJob

#: Ids are PostgreSQL ``bigint`` values: anything outside cannot name a job.
MAX_ID = 2**63 - 1


def check_id(job_id: object, what: str = "job id") -> int:
    """``job_id`` when it is an int PostgreSQL's bigint can hold; else ``InvalidJob``."""
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise InvalidJob(f"{what} must be an integer, got {job_id!r}")
    if not -MAX_ID - 1 <= job_id <= MAX_ID:
        raise InvalidJob(f"{what} must fit a 64-bit integer, got {job_id}")
    return job_id


#: Longest text a filter (kind, tag) or a drain reason can hold.
MAX_FILTER_LENGTH = 1024


def check_text(value: str | None, what: str) -> None:
    """Text PostgreSQL can take (a filter, a reason): a str without NUL, valid UTF-8."""
    if value is None:
        return
    if not isinstance(value, str) or len(value) > MAX_FILTER_LENGTH or "\x00" in value:
        raise InvalidJob(
            f"{what} must be text of at most {MAX_FILTER_LENGTH} characters "
            f"without NUL, got {value!r:.100}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(f"{what} holds a lone surrogate: {value!r:.100}") from None


def check_state(state: str | None) -> None:
    """Refuse (``InvalidJob``) a state that is not one of ``JOB_STATES``; None passes."""
    if state is not None and state not in JOB_STATES:
        raise InvalidJob(f"unknown state {state!r}; states: {', '.join(JOB_STATES)}")


def check_limit(limit: object) -> int:
    """``limit`` when it is a positive bigint; else ``InvalidJob``."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_ID:
        raise InvalidJob(f"limit must be a positive integer (64-bit), got {limit!r:.40}")
    return limit
