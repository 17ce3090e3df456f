"""The health listener bounds the connections it holds.

A client that opens connections and sends nothing holds a socket of the
worker's for up to ``REQUEST_TIMEOUT`` each; without a bound, enough of them
would take the file descriptors the worker needs for its database
connections.  Beyond ``MAX_CONNECTIONS`` a connection is answered 503 at once
and closed.  A real ``awa_worker --health-addr`` process.
"""

from __future__ import annotations

import contextlib
import socket

import pytest

from awa_django.runtime.health.listener import MAX_CONNECTIONS
from tests.observability.probes import WORKER_ENV, ProbedWorker, get, ready

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_connections_beyond_the_cap_are_answered_503_at_once(queue, start_worker):
    worker = ProbedWorker(
        start_worker("--queue", queue, "--health-addr", "127.0.0.1:0", env=WORKER_ENV)
    )
    worker.poll("/readyz", ready)
    host, port = worker.address().rsplit(":", 1)

    with contextlib.ExitStack() as idle:
        # Connected, silent: each holds a handler until its request timeout.
        for _ in range(MAX_CONNECTIONS):
            idle.enter_context(socket.create_connection((host, int(port)), timeout=10))
        # Accepted after them (the backlog is FIFO), so it finds them all held.
        beyond = get(worker.address(), "/healthz", timeout=10)
        assert beyond.status == 503, beyond
        assert "too many connections" in beyond.json()["error"]
    # The silent ones gone, the listener answers again.
    worker.poll("/healthz", lambda answer: answer.status == 200)
