"""Adding many values with one attribute set to an SDK histogram at once.

``awa.job.duration`` gets one point per completed job.  The SDK's
``Histogram.record`` spends about ten microseconds on each (a frozen
``Measurement`` with its attributes cleaned and copied, the exemplar
filter, the attribute set hashed to find its aggregation, two locks): on a
worker draining tens of thousands of no-op jobs a second that is more than
everything else telemetry costs per job, and it shares the GIL with the
event loop.  The telemetry thread already holds the durations of a chunk
of closes grouped by attribute set, so :class:`BulkHistogram` records the
first value of a new attribute set through the public API -- which creates
the aggregation, or sends it to overflow, exactly as the SDK would -- and
adds the rest, and every later group of that set, straight into the
aggregation that value went to: bucket counts,
sum, min and max under the aggregation's own lock, which is all the SDK's
``aggregate`` does with a measurement when no exemplar is taken.

It reaches into the SDK's private structures, so it is only used where
the result is the same as recording each value: an SDK histogram with the
explicit-bucket aggregation, no view that filters attributes, cumulative
collection (an aggregation never leaves its stream), an exemplar filter
that takes none of these values, and the attribute names this module
knows.  Anything else -- another SDK version's layout, a delta reader, a
view, ``AlwaysOn`` exemplars, a value that is not a finite non-negative
number -- records each value through ``Histogram.record``.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry import context as otel_context


class _Sdk(NamedTuple):
    histogram: type[Any]
    # Exemplar filters that take no sample from a measurement made outside a
    # sampled span (the telemetry thread's context is empty).
    quiet_filters: tuple[type, ...]
    explicit_buckets: type[Any]


def _sdk_of(instrument: object) -> _Sdk | None:
    """The SDK's classes if ``instrument`` is the SDK's own histogram, else None.

    The instrument's module is asked before the SDK is imported: the metrics
    SDK is a third of what telemetry adds to a worker's start-up (~150 ms on
    a busy machine, in front of its first claim), and no instrument can be
    the SDK's before the application has imported it.
    """
    if not type(instrument).__module__.startswith("opentelemetry.sdk."):
        return None
    sdk = _sdk()
    return sdk if sdk is not None and type(instrument) is sdk.histogram else None


@functools.cache
def _sdk() -> _Sdk | None:
    try:  # the SDK is part of the otel extra, but an application may bring its own
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, TraceBasedExemplarFilter
        from opentelemetry.sdk.metrics._internal.aggregation import (
            _ExplicitBucketHistogramAggregation,
        )
        from opentelemetry.sdk.metrics._internal.instrument import _Histogram
    except ImportError:  # pragma: no cover - exercised only with another SDK layout
        return None
    return _Sdk(
        _Histogram,
        (AlwaysOffExemplarFilter, TraceBasedExemplarFilter),
        _ExplicitBucketHistogramAggregation,
    )


class BulkHistogram:
    """Records groups of values of one histogram instrument."""

    __slots__ = ("_instrument", "_located")

    def __init__(self, instrument: Any) -> None:
        self._instrument = instrument
        # Per attribute set (its key): the aggregations its first value went
        # to, as (view match, the match's key for it, aggregation).
        self._located: dict[tuple[Any, ...], list[tuple[Any, Any, Any]]] = {}

    def record_many(
        self, key: tuple[Any, ...], attributes: Mapping[str, Any], values: Sequence[float]
    ) -> None:
        """Record every value in ``values`` with ``attributes`` (``key``: a
        hashable stand-in for them, the same for the same attributes)."""
        record = self._instrument.record
        if not all(0 <= value < math.inf for value in values):
            for value in values:  # the SDK warns about and drops what it rejects
                record(value, attributes)
            return
        targets = self._targets(key, attributes, known_only=True)
        if targets is None:
            # The first value through the SDK: it creates the stream's
            # aggregation (or sends the value to overflow) as it would.
            record(values[0], attributes)
            values = values[1:]
            targets = self._targets(key, attributes)
            if targets is None:
                for value in values:
                    record(value, attributes)
                return
            if not values:
                return
        for _, _, aggregation in targets:
            _add(aggregation, values)

    def _targets(
        self, key: tuple[Any, ...], attributes: Mapping[str, Any], *, known_only: bool = False
    ) -> list[tuple[Any, Any, Any]] | None:
        """The aggregations a value with ``attributes`` goes to, or None if
        adding to them directly could differ from recording it
        (``known_only``: None as well unless they were found before and are
        still the ones in use)."""
        instrument = self._instrument
        sdk = _sdk_of(instrument)
        if sdk is None:
            return None
        try:
            enabled = getattr(instrument, "_is_enabled", None)
            if enabled is not None and not enabled():
                return None
            consumer: Any = instrument._measurement_consumer  # private SDK layout
            exemplars: Any = consumer._sdk_config.exemplar_filter
            quiet = isinstance(exemplars, sdk.quiet_filters)
            if not quiet or exemplars.should_sample(0.0, 0, attributes, otel_context.get_current()):
                return None
            matches = [
                match
                for storage in consumer._reader_storages.values()
                for match in storage._instrument_view_instrument_matches.get(instrument, ())
            ]
        except AttributeError:
            return None
        located = self._located.get(key)
        if located is not None and len(located) == len(matches):
            if all(
                match is found[0] and match._attributes_aggregation.get(found[1]) is found[2]
                for match, found in zip(matches, located, strict=True)
            ):
                return located
        if known_only:
            return None
        located = []
        for match in matches:
            found = _locate(match, attributes, sdk.explicit_buckets)
            if found is None:
                return None
            located.append((match, *found))
        if len(self._located) < 4096:
            self._located[key] = located
        return located


_AGGREGATION_FIELDS = (
    "_lock",
    "_value",
    "_sum",
    "_min",
    "_max",
    "_boundaries",
    "_record_min_max",
    "_get_empty_bucket_counts",
)


def _locate(
    match: Any, attributes: Mapping[str, Any], explicit_buckets: type[Any]
) -> tuple[Any, Any] | None:
    """The key and the aggregation of ``attributes`` in one view match, if
    values can be added to it directly."""
    if getattr(match, "_reset_on_collect", None) is not False:
        return None  # a delta stream (or a layout this module does not know)
    if match._view._attribute_keys is not None:
        return None  # the view keeps only some attributes: another stream
    for aggr_key, aggregation in list(match._attributes_aggregation.items()):
        if type(aggregation) is not explicit_buckets:
            return None
        if aggregation._attributes == attributes:
            if not all(hasattr(aggregation, name) for name in _AGGREGATION_FIELDS):
                return None
            return aggr_key, aggregation
    return None  # overflow: the first value went to the overflow stream


def _add(aggregation: Any, values: Sequence[float]) -> None:
    """What ``aggregate`` does for each value (in the same order, so the sum
    rounds the same way), for all of them under one hold of the lock."""
    boundaries = aggregation._boundaries
    with aggregation._lock:
        counts = aggregation._value
        if counts is None:
            counts = aggregation._value = aggregation._get_empty_bucket_counts()
        total = aggregation._sum
        for value in values:
            counts[bisect_left(boundaries, value)] += 1
            total += value
        aggregation._sum = total
        if aggregation._record_min_max:
            aggregation._min = min(aggregation._min, *values)
            aggregation._max = max(aggregation._max, *values)
