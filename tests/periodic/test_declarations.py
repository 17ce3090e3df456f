"""Declaring schedules: validation at import time, and cron arithmetic across DST.

No database here: what a declaration accepts and which instants a schedule
names are pure functions of the expression, the zone and the handler.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from cronsim import CronSim
from testapp.jobs import plain, record

from awa_django import InvalidJob, Job, job, periodic
from awa_django.cron import CronSchedule, schedules

from .conftest import at


@pytest.fixture
def forget():
    """Names to remove from the registry after the test."""
    names: list[str] = []
    yield names
    for name in names:
        schedules.remove(name)


# --- validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "expression", ["*/0 * * * *", "60 * * * *", "a b c d e", "* * * *", "0 0 * * * *", "0 0 30 2 *"]
)
def test_a_bad_expression_raises_invalid_job_naming_it(expression):
    with pytest.raises(InvalidJob, match="invalid cron expression") as raised:
        periodic(expression)
    assert repr(expression) in str(raised.value)


@pytest.mark.parametrize("zone", ["Europe/Pariss", "Mars/Olympus_Mons", "", "../etc/passwd", "utc"])
def test_an_unknown_timezone_raises_invalid_job_naming_it(zone):
    with pytest.raises(InvalidJob, match="timezone") as raised:
        periodic("0 3 * * *", timezone=zone)
    assert repr(zone) in str(raised.value)


def test_periodic_goes_above_job(forget):
    def handler() -> None: ...

    with pytest.raises(InvalidJob, match="@periodic goes above @job"):
        periodic("0 3 * * *")(handler)


def test_arguments_are_checked_against_the_handler_and_as_json(forget):
    with pytest.raises(InvalidJob, match="arguments do not fit"):
        periodic("0 3 * * *", name="bad-args", args=(1, 2, 3))(plain)
    with pytest.raises(InvalidJob, match="JSON"):
        periodic("0 3 * * *", name="bad-json", args=(object(),))(plain)
    with pytest.raises(InvalidJob, match="args must be a tuple or a list"):
        periodic("0 3 * * *", name="bad-shape", args="abc")(plain)
    assert not {"bad-args", "bad-json", "bad-shape"} & set(schedules.names())


def test_the_decorator_returns_the_job_and_registers_the_schedule(forget):
    forget.append("testapp.plain")
    decorated = periodic("*/5 * * * *", timezone="Europe/Paris", args=(2,), kwargs={"b": 3})(plain)
    assert decorated is plain
    entry = schedules.get("testapp.plain")
    assert entry is not None and entry.job is plain
    row = entry.declaration()
    assert (row.kind, row.cron, row.timezone, row.queue, row.priority) == (
        "testapp.plain",
        "*/5 * * * *",
        "Europe/Paris",
        "default",
        2,
    )
    assert (row.args_json, row.kwargs_json) == ("[2]", '{"b":3}')


def test_stacking_on_a_new_job_and_two_schedules_of_one_job(forget):
    forget.extend(["tests.nightly", "tests.nightly-noon"])

    @periodic("0 12 * * *", name="tests.nightly-noon", queue="reports", priority=1)
    @periodic("0 3 * * *", timezone="Europe/Paris")
    @job(kind="tests.nightly")
    def nightly() -> None: ...

    assert schedules.get("tests.nightly").schedule.expression == "0 3 * * *"
    noon = schedules.get("tests.nightly-noon").declaration()
    assert (noon.queue, noon.priority, noon.kind) == ("reports", 1, "tests.nightly")
    # The same job under one name twice is a mistake, not a replacement.
    with pytest.raises(InvalidJob, match="already declared"):
        periodic("30 3 * * *")(nightly)


def test_a_module_imported_again_replaces_its_declaration(forget):
    forget.append("tests.reloaded")
    periodic("0 3 * * *", name="tests.reloaded")(record)
    # A reload makes a new Job object for the same function.
    again = Job(
        record.func,
        kind=record.kind,
        queue=record.queue,
        priority=record.priority,
        max_attempts=record.max_attempts,
        takes_context=True,
    )
    periodic("0 4 * * *", name="tests.reloaded")(again)
    assert schedules.get("tests.reloaded").schedule.expression == "0 4 * * *"


# --- occurrences and DST --------------------------------------------------------


def test_next_after_is_strictly_after_and_in_utc():
    every_five = CronSchedule("*/5 * * * *")
    assert every_five.next_after(at("2030-01-01T10:02")) == at("2030-01-01T10:05")
    assert every_five.next_after(at("2030-01-01T10:05")) == at("2030-01-01T10:10")
    assert every_five.next_after(at("2030-01-01T10:04:59.999")) == at("2030-01-01T10:05")
    paris = CronSchedule("0 3 * * *", "Europe/Paris")
    assert paris.next_after(at("2030-01-01T00:00")).tzinfo == dt.UTC
    assert paris.next_after(at("2030-01-01T00:00")) == at("2030-01-01T02:00")  # CET = UTC+1
    assert paris.next_after(at("2030-07-01T00:00")) == at("2030-07-01T01:00")  # CEST = UTC+2


def test_a_daily_time_skipped_by_spring_forward_fires_once_after_the_gap():
    # 2025-03-30 in Paris: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    nightly = CronSchedule("30 2 * * *", "Europe/Paris")
    fires = list(nightly.occurrences(at("2025-03-28T12:00"), at("2025-04-01T12:00")))
    assert fires == [
        at("2025-03-29T01:30"),  # 02:30 CET
        at("2025-03-30T01:00"),  # 03:00 CEST, the first minute after the gap
        at("2025-03-31T00:30"),  # 02:30 CEST
        at("2025-04-01T00:30"),
    ]
    assert fires == _cronsim("30 2 * * *", "2025-03-28T12:00", len(fires))


def test_a_daily_time_repeated_by_fall_back_fires_once():
    # 2025-10-26 in Paris: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    nightly = CronSchedule("30 2 * * *", "Europe/Paris")
    fires = list(nightly.occurrences(at("2025-10-25T12:00"), at("2025-10-27T12:00")))
    assert fires == [at("2025-10-26T00:30"), at("2025-10-27T01:30")]
    # From inside the repeated hour (02:15 CET, after the first 02:30) nothing is repeated.
    assert nightly.next_after(at("2025-10-26T01:15")) == at("2025-10-27T01:30")


def test_an_hourly_schedule_across_both_transitions_fires_every_utc_hour():
    hourly = CronSchedule("0 * * * *", "Europe/Paris")
    for start, end in (
        ("2025-03-29T22:30", "2025-03-30T04:30"),
        ("2025-10-25T21:30", "2025-10-26T04:30"),
    ):
        fires = list(hourly.occurrences(at(start), at(end)))
        assert fires == _cronsim("0 * * * *", start, len(fires))
        assert len(set(fires)) == len(fires)
        assert all(b - a == dt.timedelta(hours=1) for a, b in itertools.pairwise(fires))
    autumn = list(hourly.occurrences(at("2025-10-25T21:30"), at("2025-10-26T04:30")))
    assert len(autumn) == 7  # 22:00Z .. 04:00Z: the repeated 02:00 fires twice, an hour apart


def _cronsim(expression: str, start: str, count: int) -> list[dt.datetime]:
    """What cronsim itself says, converted to UTC."""
    from zoneinfo import ZoneInfo

    it = CronSim(expression, at(start).astimezone(ZoneInfo("Europe/Paris")))
    return [next(it).astimezone(dt.UTC) for _ in range(count)]
