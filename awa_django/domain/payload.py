"""Validation of everything a producer hands us, before any write.

Each check raises :class:`~awa_django.exceptions.InvalidJob` with a message
that names the offending field, so a bad enqueue never reaches the database
and never leaves a half-written job behind.

Arguments are stored in PostgreSQL ``json`` columns (not ``jsonb``): ``json``
keeps the exact text we send, so floats, key order and ``\\u0000`` escapes
come back exactly as they went in.  Dict keys must be strings, because JSON
would silently turn ``{1: "a"}`` into ``{"1": "a"}``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..conf import QUEUE_NAME_RE
from ..exceptions import EncryptionError, InvalidJob
from . import clock
from .sealing import keyring

MAX_KIND_LENGTH = 255
MAX_TAGS = 64
#: Longest tag, in characters.
MAX_TAG_LENGTH = 255
#: Longest ordering key: characters of a str, bytes of a bytes key.
MAX_ORDERING_KEY_LENGTH = 255
MAX_ATTEMPTS_LIMIT = 10_000


def check_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME_RE.match(queue):
        # '#' separates a queue from its stripe number (awa_django.domain.stripes).
        reserved = (
            " ('#' is reserved for queue stripes)"
            if isinstance(queue, str) and "#" in queue
            else ""
        )
        raise InvalidJob(
            f"invalid queue name {queue!r}: must match {QUEUE_NAME_RE.pattern} "
            f"(1-128 characters: letters, digits, '_', '.', ':', '-'){reserved}"
        )
    return queue


def check_priority(priority: Any) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool) or not 1 <= priority <= 4:
        raise InvalidJob(f"invalid priority {priority!r}: must be an integer from 1 to 4")
    return priority


def check_max_attempts(max_attempts: Any) -> int:
    if (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidJob(
            f"invalid max_attempts {max_attempts!r}: must be an integer from 1 to "
            f"{MAX_ATTEMPTS_LIMIT}"
        )
    return max_attempts


def storable(text: str) -> bool:
    """Whether PostgreSQL can store ``text`` as ``text``: no NUL, valid UTF-8
    (no lone surrogate)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_kind(kind: Any) -> str:
    if not isinstance(kind, str) or not kind or len(kind) > MAX_KIND_LENGTH or not storable(kind):
        raise InvalidJob(f"invalid job kind {kind!r}: must be a non-empty string of at most 255")
    return kind


#: The longest delay a job can be given (100 years): further out, a
#: timestamp no longer fits datetime or PostgreSQL's timestamptz.
MAX_DELAY_SECONDS = 100 * 365 * 86400


def check_run_at(run_at: Any) -> dt.datetime | None:
    if run_at is None:
        return None
    if not isinstance(run_at, dt.datetime):
        raise InvalidJob(f"run_at must be a datetime, got {type(run_at).__name__}")
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        raise InvalidJob(
            "run_at must be timezone-aware (use django.utils.timezone.now() or "
            "datetime(..., tzinfo=datetime.UTC)); got a naive datetime"
        )
    # The same horizon as run_in: a time PostgreSQL stores but Python cannot
    # read back (after 9999-12-31 UTC, e.g. datetime.max in a zone west of
    # UTC) would leave a job that breaks every listing of it.
    try:
        utc = run_at.astimezone(dt.UTC)
        latest = clock.now() + dt.timedelta(seconds=MAX_DELAY_SECONDS)
    except OverflowError:
        utc = None
    if utc is None or utc > latest or utc.year < 2:
        raise InvalidJob(
            f"run_at must be at most {MAX_DELAY_SECONDS} seconds (100 years) from now and "
            f"representable in UTC, got {run_at.isoformat()}"
        )
    return run_at


def seconds(value: Any, field: str) -> float:
    """A delay in seconds from an int/float or a timedelta, 0 to 100 years."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:  # NaN
        raise InvalidJob(f"{field} must be seconds (int/float) or a timedelta, got {value!r}")
    if value < 0:
        raise InvalidJob(f"{field} must not be negative, got {value}")
    if value > MAX_DELAY_SECONDS:
        raise InvalidJob(
            f"{field} must be at most {MAX_DELAY_SECONDS} seconds (100 years), got {value}"
        )
    return float(value)


def check_tags(tags: Any) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        raise InvalidJob("tags must be a list of strings")
    result = list(tags)
    if len(result) > MAX_TAGS or not all(
        isinstance(tag, str) and 0 < len(tag) <= MAX_TAG_LENGTH and storable(tag) for tag in result
    ):
        shown = repr(result) if len(repr(result)) <= 200 else repr(result)[:200] + "..."
        raise InvalidJob(
            f"tags must be at most {MAX_TAGS} non-empty strings of at most {MAX_TAG_LENGTH} "
            f"characters without NUL or lone surrogates, got {shown}"
        )
    return result


def check_ordering_key(key: Any) -> str | None:
    if key is None:
        return None
    if isinstance(key, bytes | bytearray | memoryview):
        raw = bytes(key)
        if len(raw) > MAX_ORDERING_KEY_LENGTH:
            raise InvalidJob(f"ordering_key is longer than {MAX_ORDERING_KEY_LENGTH} bytes")
        return "x" + raw.hex()
    if isinstance(key, str) and storable(key):
        if len(key) > MAX_ORDERING_KEY_LENGTH:
            raise InvalidJob(f"ordering_key is longer than {MAX_ORDERING_KEY_LENGTH} characters")
        return key
    raise InvalidJob(
        "ordering_key must be bytes or a str without NUL or lone surrogates, "
        f"got {type(key).__name__}"
    )


#: How deeply lists and dicts may nest in a job's JSON: deeper, the
#: encoder (and PostgreSQL's JSON parser) would run out of stack.
MAX_NESTING = 256


#: The containers JSON nests (a tuple of types: ``isinstance`` against it is
#: several times cheaper than against ``dict | list | tuple``, and this runs
#: for every element of every job's arguments).
_CONTAINERS = (dict, list, tuple)


def _check_keys(value: Any, path: str) -> None:
    # Iterative walk: only dict keys and the nesting depth need checking,
    # the encoder rejects the rest.  The depth bound also stops a circular
    # structure here, which is what lets _encode skip the encoder's own
    # circular-reference bookkeeping.
    stack = [(value, path, 1)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_NESTING and isinstance(item, _CONTAINERS):
            raise InvalidJob(f"{path} nests lists and dicts deeper than {MAX_NESTING} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidJob(
                        f"{where} has a non-string dict key {key!r}: JSON object keys "
                        "must be strings"
                    )
                if isinstance(child, _CONTAINERS):
                    stack.append((child, f"{where}[{key!r}]", depth + 1))
        elif isinstance(item, list | tuple):
            for index, child in enumerate(item):
                if isinstance(child, _CONTAINERS):
                    stack.append((child, f"{where}[{index}]", depth + 1))


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _one_shot_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode`` without its per-call set-up.

    ``JSONEncoder.encode`` builds a new C encoder (and a dict of the
    containers it has entered, to detect cycles) on every call: most of the
    time of encoding a job's few arguments.  The C encoder is built once
    here, with the same options and ``default``, and without the cycle dict:
    :func:`_check_keys` runs first and bounds the nesting, so no cycle
    reaches it.  Where the C accelerator is missing (or differs) this is
    ``_ENCODER.encode`` itself.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    basestring = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or basestring is None:
        return _ENCODER.encode
    try:
        chunks = make(None, _ENCODER.default, basestring, None, ":", ",", False, False, False)
    except TypeError:  # another signature: not the encoder this was written for
        return _ENCODER.encode

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    probe = [1, 2.5, "é\n", None, True, {"k": [()]}]
    try:
        same = encode(probe) == _ENCODER.encode(probe)
    except Exception:  # any surprise means: use the reference encoder
        same = False
    return encode if same else _ENCODER.encode


_encode = _one_shot_encoder()


def to_json(value: Any, field: str) -> str:
    """Serialise ``value`` to compact JSON text or raise InvalidJob."""
    _check_keys(value, field)
    try:
        text = _encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{field} is not JSON-serialisable: {exc}") from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # Lone surrogates cannot travel as UTF-8; escape them instead.
            text = _ASCII_ENCODER.encode(value)
    return text


def check_metadata(metadata: Any) -> str:
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping):
        raise InvalidJob(f"metadata must be a dict, got {type(metadata).__name__}")
    text = to_json(dict(metadata), "metadata")
    if "\\u0000" in text:
        raise InvalidJob("metadata must not contain NUL characters")
    if "\\u" in text and not storable(_ENCODER.encode(dict(metadata))):
        # to_json escaped a lone surrogate, which PostgreSQL's JSON parser
        # refuses in this column.
        raise InvalidJob("metadata must not contain lone surrogates")
    return text


def check_metadata_size(metadata_json: str, limit: int) -> str:
    """``metadata_json`` if it is at most ``limit`` bytes (``MAX_PAYLOAD_BYTES``)."""
    size = len(metadata_json)
    if size > limit or not metadata_json.isascii():
        size = len(metadata_json.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidJob(
            f"metadata is {size} bytes as JSON, over the limit of {limit} "
            "(settings.AWA['MAX_PAYLOAD_BYTES'])"
        )
    return metadata_json


#: The metadata key holding the W3C traceparent captured at enqueue.
TRACEPARENT_KEY = "awa:traceparent"


def encode_arguments(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], limit: int
) -> tuple[str, str]:
    """JSON text of positional and keyword arguments, within ``limit`` bytes."""
    # A tuple encodes as a JSON array, like the list it would be copied to.
    args_json = to_json(args, "args") if args else "[]"
    kwargs_json = to_json(kwargs, "kwargs") if kwargs else "{}"
    size = len(args_json) + len(kwargs_json)  # exact for ASCII text
    if not (args_json.isascii() and kwargs_json.isascii()):
        size = len(args_json.encode("utf-8", "surrogatepass")) + len(
            kwargs_json.encode("utf-8", "surrogatepass")
        )
    if size > limit:
        raise InvalidJob(
            f"job arguments are {size} bytes as JSON, over the limit of {limit} "
            "(settings.AWA['MAX_PAYLOAD_BYTES']); store large data elsewhere and pass a key"
        )
    return args_json, kwargs_json


def seal_arguments(
    args_json: str, kwargs_json: str, limit: int, unique: Any = None
) -> tuple[str, str]:
    """The JSON text of arguments sealed (:mod:`.sealing`), within ``limit``
    bytes as stored.  A unique claim by arguments is refused: its key would
    be a digest of the plain arguments, which a guess of them could match."""
    if unique is not None and unique.by_args:
        raise EncryptionError(
            "an encrypted job cannot be unique by its arguments (the key would be a digest "
            "of the plain arguments): use Unique(by_args=False) with by_queue or by_period"
        )
    ring = keyring()
    sealed_args, sealed_kwargs = ring.seal_json(args_json), ring.seal_json(kwargs_json)
    size = len(sealed_args) + len(sealed_kwargs)  # sealed text is ASCII
    if size > limit:
        raise InvalidJob(
            f"job arguments are {size} bytes as stored (encrypted), over the limit of {limit} "
            "(settings.AWA['MAX_PAYLOAD_BYTES']); store large data elsewhere and pass a key"
        )
    return sealed_args, sealed_kwargs
