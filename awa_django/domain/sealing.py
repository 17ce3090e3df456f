"""Sealed payloads: what a job of an encrypted kind or queue stores, encrypted.

A job declared ``@job(encrypt=True)`` (or enqueued into a queue with the
``"encrypt": True`` option) has its arguments sealed by the producer before
they reach PostgreSQL, and the worker that runs it seals what the attempt
writes back: the return value, progress, and the message and traceback of
each error entry (the exception's type stays readable: operators triage
by it).  Metadata, tags, concurrency and ordering keys are routing data and
stay plain.

A sealed value is stored as a JSON string in the column it replaces::

    "awa:sealed:1:<key id>:<Fernet token>"

The token is ``cryptography``'s Fernet (AES-128-CBC with HMAC-SHA256, from
the ``crypto`` extra); the key id in front of it is a short digest of the
key that sealed it, not the key.  The id lets a worker pick the one key
that opens a value, lets ``awa_keys status`` count what still needs each
key without decrypting anything, and lets a worker that lacks the key fail
the attempt with :class:`~awa_django.exceptions.EncryptionKeyMissing`
instead of running the handler with garbage.  Being a JSON string, a sealed
value passes through every column, ``COPY`` and SQL function unchanged;
code that shows payloads shows the sealed text.

``AWA["ENCRYPTION_KEYS"]`` lists the keys: the first seals, every one
opens, so a key is rotated by putting a new one first and dropping the old
one once nothing needs it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..exceptions import EncryptionError, EncryptionKeyMissing
from .records import JobInfo

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

#: What every sealed value starts with (version 1 of the format).
PREFIX = "awa:sealed:1:"
#: The JSON text of a sealed value starts with this (a JSON string).
JSON_PREFIX = '"' + PREFIX
#: Hex digits of a key id.
KEY_ID_LENGTH = 12
#: The JSON texts sealed once and reused (see :meth:`Keyring.seal_json`).
EMPTY = ("[]", "{}")


def key_bytes(key: Any) -> bytes:
    """The Fernet key ``key`` (32 url-safe base64-encoded bytes, as
    ``Fernet.generate_key()`` makes them) in its canonical form, so the same
    key written with spaces around it or other padding is the same key;
    ValueError otherwise."""
    if isinstance(key, str):
        key = key.strip().encode("ascii", "replace")
    if not isinstance(key, bytes):
        raise ValueError(f"expected a Fernet key (str), got {type(key).__name__}")
    try:
        raw = base64.urlsafe_b64decode(key.strip() + b"=" * (-len(key.strip()) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ValueError(
            "expected a Fernet key: 32 bytes in url-safe base64 (44 characters), "
            "as cryptography.fernet.Fernet.generate_key() makes them"
        )
    return base64.urlsafe_b64encode(raw)


def key_id(key: bytes) -> str:
    """The id stored with each value the Fernet key ``key`` seals: a digest
    of its 32 bytes, never the key."""
    raw = base64.urlsafe_b64decode(key_bytes(key))
    return hashlib.sha256(b"awa_django sealing key id\x00" + raw).hexdigest()[:KEY_ID_LENGTH]


def is_sealed(value: Any) -> bool:
    """Whether ``value`` (a decoded JSON value) is a sealed value."""
    return isinstance(value, str) and value.startswith(PREFIX)


def is_sealed_json(text: str | None) -> bool:
    """Whether the JSON text ``text`` holds a sealed value."""
    return text is not None and text.startswith(JSON_PREFIX)


def sealed_key_id(value: str) -> str:
    """The key id of the sealed value ``value``."""
    return value[len(PREFIX) : len(PREFIX) + KEY_ID_LENGTH]


class Keyring:
    """The configured keys: the first seals, each opens what it sealed."""

    def __init__(self, keys: Iterable[bytes]) -> None:
        try:
            from cryptography.fernet import Fernet
        except ImportError:
            raise EncryptionError(
                "encrypted jobs need the cryptography package: pip install 'awa-django[crypto]'"
            ) from None
        self._fernets: dict[str, Fernet] = {}
        for key in keys:
            self._fernets.setdefault(key_id(key), Fernet(key_bytes(key)))
        if not self._fernets:
            raise EncryptionError(
                "encrypted jobs need a key: set AWA['ENCRYPTION_KEYS'] to a list of Fernet keys"
            )
        self.primary = next(iter(self._fernets))
        # The seals of the empty values, and what they open to (see seal_json).
        self._empty: dict[str, str] = {}
        self._opened: dict[str, Any] = {}

    @property
    def key_ids(self) -> list[str]:
        """Ids of the configured keys, the sealing one first."""
        return list(self._fernets)

    def seal(self, text: str) -> str:
        """``text`` sealed with the first key."""
        token = self._fernets[self.primary].encrypt(text.encode("utf-8", "surrogatepass"))
        return f"{PREFIX}{self.primary}:{token.decode('ascii')}"

    def open(self, value: str) -> str:
        """The text ``value`` sealed; :class:`EncryptionKeyMissing` when no
        configured key sealed it, :class:`EncryptionError` when it was
        altered."""
        from cryptography.fernet import InvalidToken

        kid = sealed_key_id(value)
        fernet = self._fernets.get(kid)
        if fernet is None:
            raise EncryptionKeyMissing(kid)
        try:
            plain = fernet.decrypt(value[len(PREFIX) + KEY_ID_LENGTH + 1 :].encode("ascii"))
        except (InvalidToken, UnicodeEncodeError):
            raise EncryptionError(
                f"a value sealed with key {kid} does not open: it was altered or truncated"
            ) from None
        return plain.decode("utf-8", "surrogatepass")

    def reseal(self, value: Any) -> Any:
        """``value`` sealed with the first key if another key sealed it (a
        value not sealed, or sealed with the first key, comes back as it is)."""
        if not is_sealed(value) or sealed_key_id(value) == self.primary:
            return value
        return self.seal(self.open(value))

    def reseal_json(self, text: str | None) -> str | None:
        """The JSON text ``text`` with every sealed value in it resealed
        (:meth:`reseal`): the value itself, or the message and traceback of
        each entry of an error history."""
        if text is None or PREFIX not in text:
            return text
        value = json.loads(text)
        if isinstance(value, list):
            resealed: Any = [
                {k: self.reseal(v) if k in ("message", "traceback") else v for k, v in e.items()}
                if isinstance(e, dict)
                else e
                for e in value
            ]
        else:
            resealed = self.reseal(value)
        if resealed == value:  # nothing another key sealed: the text as it was
            return text
        return json.dumps(resealed, ensure_ascii=False, separators=(",", ":"))

    def seal_json(self, text: str) -> str:
        """The JSON text of ``text`` (itself JSON) sealed.

        The empty ``[]`` and ``{}`` -- the args or kwargs of most calls -- are
        sealed once per process and key and the seal reused: a constant
        every job of the kind may carry says nothing (a seal's length
        already tells a short value from a long one), and it halves the
        work of sealing a job that passes only one of the two."""
        if text in EMPTY:
            sealed = self._empty.get(text)
            if sealed is None:
                sealed = self._empty[text] = json.dumps(self.seal(text))
                self._opened[sealed[1:-1]] = json.loads(text)
            return sealed
        return json.dumps(self.seal(text))

    def open_json(self, value: Any) -> Any:
        """``value`` as it was before it was sealed (a value not sealed
        comes back as it is)."""
        if not is_sealed(value):
            return value
        known = self._opened.get(value)
        if known is not None:
            return type(known)()  # a fresh [] or {}: the caller may change it
        return json.loads(self.open(value))


@functools.lru_cache(maxsize=8)
def _keyring(keys: tuple[bytes, ...]) -> Keyring:
    return Keyring(keys)


def keyring() -> Keyring:
    """The keyring of ``AWA["ENCRYPTION_KEYS"]``; :class:`EncryptionError`
    when none is configured or ``cryptography`` is missing."""
    from ..conf import awa_settings

    return _keyring(awa_settings().encryption_keys or ())


def open_arguments(args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """A sealed job's ``args`` and ``kwargs`` as its handler takes them."""
    ring = keyring_for(args, kwargs)
    return ring.open_json(args), ring.open_json(kwargs)


def keyring_for(*values: Any) -> Keyring:
    """The keyring, or :class:`EncryptionKeyMissing` naming the key id of
    the first of ``values`` that is sealed when no key is configured (a
    worker without ``ENCRYPTION_KEYS`` meeting a sealed job)."""
    try:
        return keyring()
    except EncryptionError:
        for value in values:
            if is_sealed(value):
                raise EncryptionKeyMissing(sealed_key_id(value)) from None
        raise


def open_or_none(value: Any) -> Any:
    """``value`` opened, or None when this process cannot open it (no key,
    altered, or not JSON inside)."""
    if not is_sealed(value):
        return value
    try:
        return keyring().open_json(value)
    except (EncryptionError, ValueError):
        return None


#: What a sealed job's error entry says when the process has no key to seal it with.
WITHHELD = "<withheld: this job is encrypted and the process has no key to seal the message>"


def seal_error_entry(entry: Mapping[str, Any], exc: BaseException | None) -> dict[str, Any]:
    """A sealed job's error entry: message and traceback sealed.  The
    messages of :class:`EncryptionError` hold no payload and stay readable
    (an operator needs them to fix the keys)."""
    sealed = dict(entry)
    if isinstance(exc, EncryptionError):
        sealed["traceback"] = ""
        return sealed
    try:
        ring = keyring()
    except EncryptionError:
        sealed["message"] = WITHHELD
        sealed["traceback"] = ""
        return sealed
    for field in ("message", "traceback"):
        text = sealed.get(field)
        if text:
            sealed[field] = ring.seal(text)
    return sealed


def open_info(info: JobInfo) -> JobInfo:
    """``info`` with its sealed fields opened: arguments, return value,
    progress, and the messages and tracebacks of its error history
    (:class:`EncryptionKeyMissing` when a key is not configured here).  A
    job that is not sealed comes back as it is."""
    if not is_sealed(info.kwargs):
        return info
    ring = keyring_for(info.kwargs)
    errors = []
    for entry in info.errors:
        opened = dict(entry)
        for field in ("message", "traceback"):
            if is_sealed(opened.get(field)):
                opened[field] = ring.open(opened[field])
        errors.append(opened)
    return dataclasses.replace(
        info,
        args=ring.open_json(info.args),
        kwargs=ring.open_json(info.kwargs),
        return_value=ring.open_json(info.return_value),
        progress=ring.open_json(info.progress),
        errors=errors,
    )
