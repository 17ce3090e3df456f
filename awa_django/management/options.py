"""Command-line options shared by the ``awa_*`` management commands."""

from __future__ import annotations

from argparse import ArgumentParser


def add_database_argument(parser: ArgumentParser) -> None:
    """``--database ALIAS``: every command can work on another queue database."""
    parser.add_argument(
        "--database",
        default=None,
        metavar="ALIAS",
        help="Database alias holding the queue (default: AWA['DATABASE']).",
    )
