"""``manage.py awa_job show|retry|cancel``."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from testapp import jobs

from awa_django import ops

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("awa_job", *args, stdout=out)
    return out.getvalue()


def test_show_cancel_and_retry_one_job(queue):
    ref = jobs.plain.using(queue=queue).enqueue(1, b=2)
    shown = json.loads(run("show", str(ref.id), "--json"))
    assert (shown["id"], shown["state"], shown["args"]) == (ref.id, "available", [1])
    assert "available" in run("show", str(ref.id))

    assert "cancel done; it is now cancelled" in run("cancel", str(ref.id))
    assert "is cancelled: nothing to cancel" in run("cancel", str(ref.id))
    assert ops.get_job(ref.id).errors[-1]["type"] == "awa_django.cancelled"
    assert "retry done" in run("retry", str(ref.id))
    assert ops.get_job(ref.id).state in ("retryable", "available")


def test_unknown_ids_are_command_errors():
    for action in ("show", "retry", "cancel"):
        with pytest.raises(CommandError, match="no job with id"):
            run(action, str(10**15))
