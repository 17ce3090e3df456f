"""Which observers a process registers (called once, from the app's ``ready``).

Always: the structured log lines and the Django signals (both cost one
test per job while nobody listens).  OpenTelemetry when ``AWA["TELEMETRY"]``
asks for it: ``"auto"`` looks for the package without importing it, so a
process without the ``otel`` extra never imports OpenTelemetry.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..conf import AwaSettings, awa_settings
from .hooks import Observer, observers
from .logs import LogObserver
from .signals import SignalObserver

log = logging.getLogger("awa_django.observability")


def otel_available() -> bool:
    """Whether opentelemetry-api is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def otel_wanted(settings: AwaSettings) -> bool:
    if settings.telemetry is False:
        return False
    return settings.telemetry is True or otel_available()


def install(
    settings: AwaSettings | None = None, *, definition: Callable[[str], Any] | None = None
) -> list[Observer]:
    """Register the default observers (idempotent); returns those registered.

    ``definition``: a kind's job definition, the sender of its signals (the
    app passes the job registry's lookup).
    """
    if settings is None:
        try:
            settings = awa_settings()
        except ImproperlyConfigured:
            settings = AwaSettings()  # the system checks report the problem
    if observers.of_type(LogObserver) is None:
        observers.add(LogObserver())
    if observers.of_type(SignalObserver) is None:
        observers.add(SignalObserver() if definition is None else SignalObserver(definition))
    if otel_wanted(settings):
        try:
            from .otel import OtelObserver
        except ImportError as exc:
            log.warning("AWA['TELEMETRY'] is on but OpenTelemetry cannot be imported: %s", exc)
        else:
            if observers.of_type(OtelObserver) is None:
                observers.add(OtelObserver(trace_capture=settings.trace_capture))
    return list(observers)
