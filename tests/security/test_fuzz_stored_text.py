"""Fuzzed text from handlers and callback senders: always storable.

Hypothesis draws text over every code point, NUL and lone surrogates
included, for what the worker stores on a handler's behalf -- an exception
message, a ``Cancel`` reason, a progress message and checkpoint -- and for
the error of a callback ``fail``.  Each closure is written by the real
statement on a really claimed attempt and must be applied, reading back as
:func:`awa_django.domain.pgtext.clean_text` says; ``ops.fail_external`` answers
``CallbackNotFound`` (or ``InvalidJob`` for an empty error), never a
database error.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awa_django import CallbackNotFound, InvalidJob, ops
from awa_django.domain import closures
from awa_django.domain.pgtext import clean_text, clean_value
from awa_django.domain.records import ClaimedJob
from awa_django.runtime.attempts.executor import context_for
from awa_django.storage import run
from awa_django.storage.attempts import claim, close_attempts
from tests.factories import JobFactory
from tests.storage.test_fuzz_enqueue import FUZZ, any_text

pytestmark = pytest.mark.django_db

#: Text that surely holds a NUL or a lone surrogate.
poisoned = st.tuples(any_text, st.sampled_from(["\x00", "\ud800", "\udfff"]), any_text).map("".join)
text = st.one_of(any_text, poisoned)


def claimed(queue: str) -> ClaimedJob:
    JobFactory(queue=queue)
    (job,) = run(claim(queue, 1, uuid.uuid4(), 300.0, 0.0))
    return job


def written(closure) -> bool:
    return (closure.job_id, closure.run_lease) in run(close_attempts([closure]))


@FUZZ
@given(message=text)
def test_any_exception_message_is_stored(queue, message):
    job = claimed(queue)
    try:
        raise ValueError(message)
    except ValueError as exc:
        closure = closures.raised(job, exc, dlq=False)
    assert written(closure)
    [entry] = ops.get_job(job.job_id).errors
    assert entry["message"] == clean_text(message)
    assert clean_text(message) in entry["traceback"]


@FUZZ
@given(reason=text)
def test_any_cancel_reason_is_stored(queue, reason):
    job = claimed(queue)
    assert written(closures.cancelled(job, reason))
    assert ops.get_job(job.job_id).errors[-1]["message"] == clean_text(reason)


@FUZZ
@given(message=text, checkpoint=st.dictionaries(text, st.one_of(text, st.integers()), max_size=3))
def test_any_progress_is_stored(queue, message, checkpoint):
    job = claimed(queue)
    ctx = context_for(job)
    ctx.set_progress(10, message, **{f"k{i}": v for i, v in enumerate(checkpoint.values())})
    ctx.set_progress(20, checkpoint=checkpoint)
    closure = closures.retry_or_fail(job, closures.error_entry(job, None, "x"), 3600, dlq=False)
    closure.progress = ctx.progress_snapshot()[1]
    assert written(closure)
    stored = ops.get_job(job.job_id).progress
    assert stored == ctx.progress and stored["message"] == clean_text(message)
    assert stored["checkpoint"]["checkpoint"] == clean_value(checkpoint)


@FUZZ
@given(error=text)
def test_fail_external_answers_not_found_whatever_the_error_text(error):
    with pytest.raises(InvalidJob if not error else CallbackNotFound):
        ops.fail_external(uuid.uuid4(), error)
