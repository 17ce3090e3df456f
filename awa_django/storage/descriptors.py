"""Descriptor catalogs: workers publish, the console reads, the leader expires."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from ..domain.descriptors import Declared, Descriptor
from ..domain.records import DescriptorInfo
from .base import Execute, Steps, atomic_operation, operation

CATALOGS = ("queue", "kind")


def _columns(entries: Mapping[str, tuple[Descriptor, str | None]]) -> list[list[Any]]:
    names = sorted(entries)
    rows = [(name, *entries[name]) for name in names]
    return [
        names,
        [d.display_name for _, d, _ in rows],
        [d.description for _, d, _ in rows],
        [d.owner for _, d, _ in rows],
        [d.docs_url for _, d, _ in rows],
        [json.dumps(list(d.tags)) for _, d, _ in rows],
        [json.dumps(dict(d.extra or {})) for _, d, _ in rows],
        [d.content_hash(q) for _, d, q in rows],
        [q for _, _, q in rows],
    ]


@atomic_operation
def sync(runtime_id: uuid.UUID, declared: Declared) -> Steps[int]:
    """Upsert this runtime's descriptors and record their hashes on its row."""
    queues: dict[str, tuple[Descriptor, str | None]] = {
        name: (d, None) for name, d in declared.queues.items()
    }
    kinds: dict[str, tuple[Descriptor, str | None]] = dict(declared.kinds)
    total = 0
    for catalog, entries in (("queue", queues), ("kind", kinds)):
        rows = yield Execute.named(
            "descriptors", "sync_descriptors", [runtime_id, catalog, *_columns(entries)]
        )
        total += int(rows[0][0] or 0)
    return total


@operation
def status(catalog: str, staleness: float) -> Steps[list[DescriptorInfo]]:
    """Every descriptor of ``catalog`` ("queue" or "kind") with its stale/drift flags."""
    if catalog not in CATALOGS:
        raise ValueError(f"catalog must be one of {CATALOGS}, got {catalog!r}")
    rows = yield Execute.named("descriptors", "descriptor_status", [catalog, staleness])
    return [
        DescriptorInfo(
            name=name,
            display_name=display_name,
            description=description,
            owner=owner,
            docs_url=docs_url,
            tags=list(tags or []),
            extra=json.loads(extra) if extra else {},
            hash=content_hash,
            queue=queue,
            first_seen_at=first_seen_at,
            last_seen_at=last_seen_at,
            stale=stale,
            drift=drift,
            live_hashes=list(live_hashes or []),
        )
        for (
            name,
            display_name,
            description,
            owner,
            docs_url,
            tags,
            extra,
            content_hash,
            queue,
            first_seen_at,
            last_seen_at,
            stale,
            drift,
            live_hashes,
        ) in rows
    ]


@operation
def cleanup(retention: float) -> Steps[int]:
    """Delete descriptors no runtime refreshed within ``retention`` seconds."""
    rows = yield Execute.named("descriptors", "cleanup_descriptors", [retention])
    return int(rows[0][0])
