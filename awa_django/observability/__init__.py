"""What a job's life looks like from outside: hooks, logs, signals, telemetry.

:mod:`.hooks` is the one seam: the producer and the worker runtime report
each step of a job's life to :data:`.hooks.observers`, and every consumer --
the structured log lines (:mod:`.logs`), the Django signals
(:mod:`awa_django.signals`), OpenTelemetry (:mod:`.otel`, optional extra)
and Prometheus (:mod:`.prometheus`, optional extra) -- is an
:class:`~.hooks.Observer` registered there.  None of them is imported by the
hot path unless it is installed and switched on.
"""
