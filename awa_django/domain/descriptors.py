"""Operator labels for queues and job kinds, and how workers publish them.

A descriptor is documentation that travels with the code: a display name,
a description, an owner, a docs link, tags and free-form JSON.  It never
changes dispatch.  Queue descriptors come from the ``"descriptor"`` entry of
a queue in ``AWA["QUEUES"]``; job-kind descriptors from
``@job(descriptor=Descriptor(...))`` (the description defaults to the first
line of the handler's docstring, so every kind has one).

Workers upsert the descriptors of what they run when they start and on
every heartbeat, with a content hash, and record the hashes they hold on
their runtime row.  The console derives *stale* (no live runtime refreshed
it within ``HEARTBEAT_STALENESS``) and *drift* (live runtimes hold different
hashes: a rolling deploy, or two code bases that disagree) from those.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidJob

#: The keys a ``"descriptor"`` dict (and :class:`Descriptor`) accepts.
DESCRIPTOR_KEYS = ("display_name", "description", "owner", "docs_url", "tags", "extra")


@dataclass(frozen=True)
class Descriptor:
    """Labels operators see for a queue or a job kind (never used for dispatch)."""

    display_name: str | None = None
    description: str | None = None
    owner: str | None = None
    docs_url: str | None = None
    tags: Sequence[str] = ()
    extra: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        for name in ("display_name", "description", "owner", "docs_url"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidJob(f"Descriptor.{name} must be a str or None, got {value!r}")
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise InvalidJob(f"Descriptor.tags must be a list of str, got {self.tags!r}")
        object.__setattr__(self, "tags", tuple(self.tags))
        if self.extra is not None:
            if not isinstance(self.extra, Mapping):
                raise InvalidJob(f"Descriptor.extra must be a dict, got {self.extra!r}")
            try:
                json.dumps(self.extra)
            except (TypeError, ValueError) as exc:
                raise InvalidJob(f"Descriptor.extra must be JSON-serialisable: {exc}") from exc

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Descriptor:
        """A descriptor from a settings dict; unknown keys raise ``InvalidJob``."""
        unknown = sorted(set(raw) - set(DESCRIPTOR_KEYS))
        if unknown:
            raise InvalidJob(
                f"unknown descriptor key(s) {', '.join(map(repr, unknown))}; "
                f"valid keys: {', '.join(DESCRIPTOR_KEYS)}"
            )
        return cls(**raw)

    def as_dict(self) -> dict[str, Any]:
        return {
            "display_name": self.display_name,
            "description": self.description,
            "owner": self.owner,
            "docs_url": self.docs_url,
            "tags": list(self.tags),
            "extra": dict(self.extra or {}),
        }

    def content_hash(self, queue: str | None = None) -> str:
        """A short stable hash of the content (and the kind's queue)."""
        body = json.dumps({**self.as_dict(), "queue": queue}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def first_line(doc: str | None) -> str | None:
    """The first non-empty line of a docstring, or None."""
    for line in (doc or "").strip().splitlines():
        if line.strip():
            return line.strip()
    return None


@dataclass(frozen=True)
class Declared:
    """What one worker publishes: ``name -> (descriptor, queue)`` per catalog."""

    queues: Mapping[str, Descriptor]
    kinds: Mapping[str, tuple[Descriptor, str]]


def declared_for(
    run_queues: Iterable[str],
    queue_descriptors: Mapping[str, Descriptor],
    kinds: Iterable[tuple[str, str, Descriptor]],
) -> Declared:
    """The descriptors a worker running ``run_queues`` publishes.

    ``queue_descriptors`` are the declared queue labels; naming a queue the
    worker does not run is an error (a dead reference shows up at start, not
    as a stale row later).  Job kinds are published by the workers that run
    their queue.
    """
    running = set(run_queues)
    foreign = sorted(set(queue_descriptors) - running)
    if foreign:
        raise ValueError(
            f"descriptor declared for queue(s) this worker does not run: {', '.join(foreign)}"
        )
    return Declared(
        queues=dict(queue_descriptors),
        kinds={kind: (d, queue) for kind, queue, d in kinds if queue in running},
    )
