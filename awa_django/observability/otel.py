"""OpenTelemetry metrics and spans (the ``otel`` extra).  Placeholder: filled in next."""

from __future__ import annotations

from .hooks import Observer


class OtelObserver(Observer):
    def __init__(self, *, trace_capture: bool = True) -> None:
        self.trace_capture = trace_capture
