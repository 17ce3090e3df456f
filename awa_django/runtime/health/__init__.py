"""What a worker answers to infrastructure probes, and what a supervisor adds up.

``listener`` is the worker's ``/healthz``, ``/readyz`` and ``/metrics``;
``probes`` the HTTP server and the loop ticker it relies on; ``fleet`` the
supervisor's view over its children's reports.  Kept apart from
``leadership`` so either can change without the other.
"""
