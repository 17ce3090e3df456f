"""Argument checks shared by every subject of the operator API.

The operator API is reached from code, commands, the console and HTTP
callbacks, so every value is checked before it reaches a statement: an id
PostgreSQL cannot hold, a filter with a NUL byte or a state that does not
exist raises ``InvalidJob`` naming it, instead of a driver error from deep
inside the storage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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


#: What ``args_contains`` takes: a JSON object (matched against kwargs), a
#: JSON array (matched against args), or the JSON text of either.
ArgsFilter = dict[str, Any] | list[Any] | str


@dataclass(frozen=True)
class ArgumentMatch:
    """An ``args_contains`` filter split onto the two argument columns, each
    the JSON text PostgreSQL compares with ``@>`` (None: no filter on it)."""

    args: str | None = None
    kwargs: str | None = None


def check_args_contains(value: ArgsFilter | None) -> ArgumentMatch:
    """``value`` as the argument filter of a job search; ``InvalidJob`` naming
    what is wrong with it (nothing is queried).

    A JSON object matches the jobs whose kwargs contain every key it names
    with a value containing the given one (``{"customer_id": 42}``); a JSON
    array matches the jobs whose positional args contain every element it
    lists, in any position (``[42]``).  Containment is PostgreSQL's jsonb
    ``@>``: nested objects and arrays match by containment too.  A str is
    read as JSON text (the console passes what the operator typed).  A
    scalar, an empty object or array (which would match every job), text
    that is not JSON and a filter longer than ``MAX_FILTER_LENGTH``
    characters of JSON are refused.
    """
    if value is None:
        return ArgumentMatch()
    if isinstance(value, str):
        _check_length(value)
        check_text(value, "args filter")
        try:
            value = json.loads(value, parse_constant=_no_constant)
        except ValueError as exc:
            raise InvalidJob(f"args filter is not valid JSON: {exc}") from None
    if not isinstance(value, dict | list):
        raise InvalidJob(
            "args filter must be a JSON object (matches kwargs) or a JSON array "
            f"(matches args), got {type(value).__name__} {value!r:.100}"
        )
    if not value:
        raise InvalidJob("args filter is empty: name at least one key or element to match")
    _check_strings(value)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"args filter is not JSON: {exc}") from None
    _check_length(text)
    check_text(text, "args filter (as JSON)")
    return ArgumentMatch(kwargs=text) if isinstance(value, dict) else ArgumentMatch(args=text)


def _check_length(text: str) -> None:
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidJob(
            f"args filter is too long: {len(text)} characters of JSON, at most {MAX_FILTER_LENGTH}"
        )


def _no_constant(name: str) -> Any:
    """Refuse NaN and Infinity, which Python's JSON reads and PostgreSQL's refuses."""
    raise ValueError(f"{name} is not a JSON value")


def _check_strings(value: Any) -> None:
    """Refuse a NUL character in any key or string: jsonb cannot store it."""
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidJob("args filter holds a NUL character, which no stored argument can")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)
