"""What a process reports through OpenTelemetry's observable gauges.

Counters and histograms are fed as things happen; gauges are read when
the SDK's reader collects, on its own thread.  So the observer keeps the
few values they report here -- whether this process runs a worker, whether
it leads maintenance, how many attempts it holds, the leader's latest
queue samples -- updated by the hooks and read by the callbacks below.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from opentelemetry.metrics import CallbackOptions, Observation

from .hooks import QueueSample
from .otel_names import SAMPLE_MAX_AGE

Labels = Callable[..., dict[str, str]]


class ProcessGauges:
    """The gauges' state and their collection callbacks."""

    def __init__(self, depth_labels: Labels, lag_labels: Labels) -> None:
        self._depth_labels = depth_labels
        self._lag_labels = lag_labels
        self._samples: tuple[float, Sequence[QueueSample]] | None = None
        # (monotonic time, pending, lag) of the relay's latest outbox reading.
        self._outbox: tuple[float, int, float] | None = None
        self._up: bool | None = None  # None until this process runs a worker
        self._leader = False
        # Attempts claimed and not yet closed or parked (awa.runtime.inflight):
        # changed on the loop and on handler threads, read by the reader's thread.
        self._running = 0
        self._running_lock = threading.Lock()

    def claimed(self, count: int) -> None:
        with self._running_lock:
            self._running += count

    def settled(self, count: int = 1) -> None:
        with self._running_lock:
            self._running = max(self._running - count, 0)

    def sampled(self, samples: Sequence[QueueSample]) -> None:
        self._samples = (time.monotonic(), tuple(samples))

    def outbox_sampled(self, pending: int, lag: float) -> None:
        self._outbox = (time.monotonic(), pending, lag)

    def runtime(self, state: str) -> None:
        if state == "started":
            self._up = True
        elif state == "stopped":
            self._up = False
            self._leader = False
            with self._running_lock:
                self._running = 0  # attempts handed back or interrupted on the way out
        elif state == "leader":
            self._leader = True
        elif state == "follower":
            self._leader = False
            self._samples = None  # the next leader reports the queues

    # -- collection callbacks ------------------------------------------------------

    def _fresh_samples(self) -> Sequence[QueueSample]:
        taken = self._samples
        if taken is None or time.monotonic() - taken[0] > SAMPLE_MAX_AGE:
            return ()
        return taken[1]

    def depth(self, options: CallbackOptions) -> Iterable[Observation]:
        for sample in self._fresh_samples():
            for state, value in (
                ("available", sample.available),
                ("scheduled", sample.scheduled),
                ("running", sample.running),
            ):
                yield Observation(value, self._depth_labels(sample.queue, state))

    def lag(self, options: CallbackOptions) -> Iterable[Observation]:
        for sample in self._fresh_samples():
            yield Observation(sample.lag, self._lag_labels(sample.queue))

    def _fresh_outbox(self) -> tuple[float, int, float] | None:
        taken = self._outbox
        if taken is None or time.monotonic() - taken[0] > SAMPLE_MAX_AGE:
            return None
        return taken

    def outbox_pending(self, options: CallbackOptions) -> Iterable[Observation]:
        taken = self._fresh_outbox()
        if taken is not None:
            yield Observation(taken[1])

    def outbox_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        taken = self._fresh_outbox()
        if taken is not None:
            yield Observation(taken[2])

    def up(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._up is not None:
            yield Observation(1 if self._up else 0)

    def leader(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._up is not None:
            yield Observation(1 if self._leader else 0)

    def inflight(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._up is not None:
            yield Observation(self._running)
