"""Encryption keys in the stored jobs (``sql/queries/keys.sql``).

Which keys stored jobs still need, read from the key id in front of each
sealed value (:mod:`awa_django.domain.sealing`): nothing is decrypted, so it
runs where no key is configured.  And the held jobs (deferred, dead
letters) read and rewritten in place with the current key: the only rows
whose seal changes after they are written, since these tables are the
mutable ones.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..domain.sealing import KEY_ID_LENGTH, PREFIX
from .base import Execute, Steps, operation


@operation
def sealed_key_counts() -> Steps[list[tuple[str, str, int]]]:
    """``(place, key id, jobs)`` for every place (``ready``, ``running``, ``deferred``,
    ``waiting``, ``dlq``, ``history``) and key id with a job there that
    holds a value the key sealed."""
    rows = yield Execute.named(
        "keys", "sealed_key_counts", {"prefix": PREFIX, "id_length": KEY_ID_LENGTH}
    )
    return [(place, key_id, int(count)) for place, key_id, count in rows]


#: The hold tables whose rows are resealed in place (``awa_keys reseal``).
HELD = ("deferred", "dlq")


@dataclass(frozen=True, slots=True)
class SealedRow:
    """A held job's sealed columns, as JSON text (errors and progress may be None)."""

    job_id: int
    args: str
    kwargs: str
    errors: str | None
    progress: str | None


@operation
def sealed_page(place: str, after: int, limit: int) -> Steps[list[SealedRow]]:
    """Up to ``limit`` sealed jobs of hold table ``place`` (one of
    :data:`HELD`) with ids above ``after``, by id."""
    rows = yield Execute.named("keys", f"sealed_{place}_page", {"after": after, "limit": limit})
    return [SealedRow(*row) for row in rows]


@operation
def reseal(place: str, old: SealedRow, new: SealedRow) -> Steps[bool]:
    """Write ``new`` over the held job ``old`` read, if it is unchanged since."""
    rows = yield Execute.named(
        "keys",
        f"reseal_{place}",
        {
            "job_id": old.job_id,
            "old_kwargs": old.kwargs,
            "args": new.args,
            "kwargs": new.kwargs,
            "errors": new.errors,
            "progress": new.progress,
        },
    )
    return bool(rows)
