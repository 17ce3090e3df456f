"""Fixtures of the observability tests: an OpenTelemetry observer on SDK providers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from awa_django.observability.hooks import observers
from awa_django.observability.otel import OtelObserver
from tests.observability.otel_support import Telemetry, build


@pytest.fixture
def telemetry_factory() -> Iterator[Any]:
    """``telemetry_factory(trace_capture=..., spans=...)`` registers a fresh
    observer in place of the one the app installed."""
    registered = list(observers)
    installed = observers.of_type(OtelObserver)
    if installed is not None:
        observers.remove(installed)
    made: list[Telemetry] = []

    def make(**options: Any) -> Telemetry:
        telemetry = build(**options)
        observers.add(telemetry.observer)
        made.append(telemetry)
        return telemetry

    yield make
    for observer in list(observers):
        observers.remove(observer)
    for observer in registered:
        observers.add(observer)
    for telemetry in made:
        telemetry.tracer_provider.shutdown()


@pytest.fixture
def telemetry(telemetry_factory) -> Telemetry:
    return telemetry_factory()
