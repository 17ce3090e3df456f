"""Management commands under odd arguments: a ``CommandError`` naming the problem
(or a normal answer), never a traceback.

Every argument slot of ``awa_job``, ``awa_dlq``, ``awa_queue``, ``awa_batch``
and ``awa_cron`` gets NUL, lone surrogates, huge text and odd numbers
(:mod:`.odd_values`), then Hypothesis' arbitrary text.  The commands run
through ``call_command`` against the real test database; a refused call
must leave the job it names as it was.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given, settings
from testapp.jobs import plain

from awa_django import ops

from .odd_values import ODD_VALUES, odd

pytestmark = pytest.mark.django_db

V = "{V}"
TEMPLATES = [
    ["awa_job", "show", V],
    ["awa_job", "retry", V, "--yes"],
    ["awa_job", "cancel", V, "--yes"],
    ["awa_dlq", "list", "--limit", V],
    ["awa_dlq", "list", "--queue", V],
    ["awa_dlq", "list", "--kind", V],
    ["awa_dlq", "retry", V, "--yes"],
    ["awa_dlq", "purge", V, "--yes"],
    ["awa_dlq", "retry", "--all", "--kind", V, "--yes"],
    ["awa_dlq", "purge", "--all", "--queue", V, "--yes"],
    ["awa_dlq", "purge", "--all", "--moved-before", V, "--yes"],
    ["awa_dlq", "retry", "--all", "--to-priority", V, "--yes"],
    ["awa_dlq", "retry", "--all", "--to-queue", V, "--yes"],
    ["awa_queue", "stats", V],
    ["awa_queue", "pause", V],
    ["awa_queue", "resume", V],
    ["awa_queue", "drain", V, "--yes"],
    ["awa_queue", "drain", "default", "--reason", V, "--yes"],
    ["awa_queue", "shards", V, "2"],
    ["awa_queue", "shards", "default", V],
    ["awa_batch", "list", "--limit", V],
    ["awa_batch", "cancel", V],
    ["awa_batch", "set_priority", "--queue", V, "--priority", "1", "--yes"],
    ["awa_batch", "set_priority", "--queue", "default", "--priority", V, "--yes"],
    ["awa_batch", "set_priority", "--queue", "default", "--kind", V, "--priority", "1", "--yes"],
    ["awa_batch", "set_priority", "--queue", "default", "--tag", V, "--priority", "1", "--yes"],
    ["awa_cron", "pause", V],
    ["awa_cron", "resume", V],
    ["awa_cron", "run", V],
]


def run(template: list[str], value: str) -> None:
    """Run the command; only a normal return or a CommandError may come out."""
    argv = [value if part == V else part for part in template]
    try:
        call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as exc:
        assert str(exc).strip(), argv
    except SystemExit as exc:  # pragma: no cover - what a traceback-free argparse exit looks like
        pytest.fail(f"{argv!r} exited ({exc.code}) instead of raising CommandError")


def command_id(template: list[str]) -> str:
    return " ".join(template).replace(V, "V")


def _as_id(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


#: Job ids some odd values also read as (``int(" 7 ")``, ``int("١٢")``): the
#: job the test watches must not have one of them, or a command that takes
#: the value as its id would rightly act on it.
NAMED_BY_ODD_VALUES = {n for n in map(_as_id, ODD_VALUES) if n is not None}


@pytest.mark.parametrize("template", TEMPLATES, ids=command_id)
def test_odd_values_in_every_argument_are_command_errors(template, queue):
    job = plain.using(queue=queue).enqueue(1)
    while job.id in NAMED_BY_ODD_VALUES:  # ids come from a sequence other tests advance
        job = plain.using(queue=queue).enqueue(1)
    for value in ODD_VALUES:
        run(template, value)
    assert ops.get_job(job.id).state == "available"  # no odd value reached it


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=odd)
def test_arbitrary_text_in_every_argument_is_answered_or_a_command_error(value):
    for template in TEMPLATES:
        run(template, value)
