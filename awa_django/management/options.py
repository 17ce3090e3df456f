"""Command-line options shared by the ``awa_*`` management commands."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError


def database_alias(value: str) -> str:
    """An alias of ``settings.DATABASES``; anything else is a usage error (exit 2)."""
    from django.db import connections

    if value not in connections.settings:
        known = ", ".join(sorted(connections.settings)) or "none"
        raise ArgumentTypeError(f"no database alias {value!r} in settings.DATABASES ({known})")
    return value


def add_database_argument(parser: ArgumentParser) -> None:
    """``--database ALIAS``: every command can work on another queue database."""
    parser.add_argument(
        "--database",
        default=None,
        type=database_alias,
        metavar="ALIAS",
        help="Database alias holding the queue (default: AWA['DATABASE']).",
    )


def add_json_argument(parser: ArgumentParser, what: str) -> None:
    """``--json``: a listing prints ``what`` as one JSON document instead of tables."""
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"Print {what} as one JSON document instead of a table (datetimes in "
        "ISO 8601, ids as strings where they are UUIDs).",
    )


def add_yes_argument(parser: ArgumentParser) -> None:
    """``--yes``/``-y``: a change goes ahead without ``Proceed? [y/N]``."""
    parser.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="Do not ask for confirmation (it is asked only when stdin is a terminal).",
    )


def host_port(value: str) -> str:
    """``HOST:PORT`` (``[::1]:8321`` for IPv6); anything else is a usage error (exit 2)."""
    from awa_django.runtime.config import parse_address

    try:
        parse_address(value)
    except ValueError:
        raise ArgumentTypeError(
            f"expected HOST:PORT such as 127.0.0.1:8321, got {value!r}"
        ) from None
    return value
