"""Which encryption keys stored jobs still need (``sql/queries/keys.sql``).

Reads the key id in front of each sealed value (:mod:`awa_django.domain.sealing`);
nothing is decrypted, so it runs where no key is configured.
"""

from __future__ import annotations

from ..domain.sealing import KEY_ID_LENGTH, PREFIX
from .base import Execute, Steps, operation


@operation
def sealed_key_counts() -> Steps[list[tuple[str, str, int]]]:
    """``(place, key id, jobs)`` for every place (``ready``, ``deferred``,
    ``waiting``, ``dlq``, ``history``) and key id with a job there that
    holds a value the key sealed."""
    rows = yield Execute.named(
        "keys", "sealed_key_counts", {"prefix": PREFIX, "id_length": KEY_ID_LENGTH}
    )
    return [(place, key_id, int(count)) for place, key_id, count in rows]
