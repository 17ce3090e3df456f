"""What the ``awa_*`` commands print: JSON documents, tables, confirmations.

Every listing takes ``--json`` and then prints exactly one JSON document
(datetimes in ISO 8601, UUIDs as strings, dataclasses as objects).  Without
it, tables are drawn with ``rich`` when it is importable (the ``cli``
extra) and as plain aligned text otherwise.

Mutating commands print the database they are about to change (alias,
host, port and database name; never the password) and, when stdin is a
terminal and ``--yes`` is absent, ask ``Proceed? [y/N]``.  Exit codes are
the same everywhere: 0 done, 1 not found, refused or declined, 2 usage.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import json
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import IO, Any, Literal, cast

from django.core.management.base import CommandError, OutputWrapper

from awa_django.exceptions import CallbackNotFound, EncryptionError, InvalidJob, JobNotFound

try:
    import rich  # noqa: F401 - only whether it is there
except ImportError:  # pragma: no cover - rich is the cli extra
    _HAVE_RICH = False
else:
    _HAVE_RICH = True

#: Whether tables are drawn with rich; tests set it to False for the plain fallback.
RICH = _HAVE_RICH

#: Console width when stdout is not a terminal (a pipe or a file): wide
#: enough that tables are not folded; on a terminal rich uses its width.
PIPE_WIDTH = 240

#: Exit status of a command that did what was asked.
EXIT_OK = 0
#: Exit status when the target does not exist, the change is refused or declined.
EXIT_REFUSED = 1
#: Exit status of a usage error (argparse's own, and values the API rejects).
EXIT_USAGE = 2


# --- JSON ---------------------------------------------------------------------


def json_default(value: Any) -> Any:
    """``json.dumps(default=...)`` for what the operator API returns."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID | decimal.Decimal | PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def to_json(data: Any) -> str:
    """``data`` as one indented JSON document (see :func:`json_default`)."""
    return json.dumps(data, indent=2, default=json_default)


# --- human output -----------------------------------------------------------------


def timestamp(value: dt.datetime | None) -> str:
    """A datetime for a table cell: ISO 8601 to the second, ``-`` for None."""
    return "-" if value is None else value.isoformat(timespec="seconds")


def cell(value: Any) -> str:
    """Any value as table text: strings as they are, ``-`` for None, JSON otherwise."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dt.datetime):
        return timestamp(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return json.dumps(value, default=json_default)


@dataclass(frozen=True)
class Column:
    """A table column; numbers read better right-aligned.

    ``fold=False`` keeps every cell on one line (ids, timestamps): when the
    table is too wide, the other columns fold instead.
    """

    header: str
    justify: Literal["left", "right"] = "left"
    fold: bool = True


class Output:
    """Where a command prints: its ``self.stdout``, with rich or as plain text."""

    def __init__(
        self, stream: OutputWrapper, *, no_color: bool = False, force_color: bool = False
    ) -> None:
        self.stream = stream
        self.no_color = no_color
        self.force_color = force_color
        self._console: Any = None

    @classmethod
    def of(cls, stream: OutputWrapper, options: dict[str, Any]) -> Output:
        """The output of a command, honouring Django's ``--no-color``/``--force-color``."""
        return cls(
            stream,
            no_color=bool(options.get("no_color")),
            force_color=bool(options.get("force_color")),
        )

    def _rich_console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            tty = self.stream.isatty()
            self._console = Console(
                # OutputWrapper is a text stream; its stubs do not say IO[str].
                file=cast(IO[str], self.stream),
                width=None if tty else PIPE_WIDTH,
                no_color=self.no_color,
                force_terminal=True if self.force_color else None,
                highlight=False,
                markup=False,
                emoji=False,
            )
        return self._console

    def json(self, data: Any) -> None:
        """Print ``data`` as one JSON document (the whole of stdout for ``--json``)."""
        self.stream.write(to_json(data), ending="\n")

    def line(self, text: str = "") -> None:
        """Print one line as it is (no markup)."""
        if RICH:
            self._rich_console().print(text, soft_wrap=True)
        else:
            self.stream.write(text)

    def heading(self, text: str) -> None:
        """Print a line in bold (plain text without rich)."""
        if RICH:
            from rich.text import Text

            self._rich_console().print(Text(text, style="bold"), soft_wrap=True)
        else:
            self.stream.write(text)

    def table(
        self,
        title: str,
        columns: Sequence[str | Column],
        rows: Sequence[Sequence[Any]],
        *,
        empty: str | None = None,
        header: bool = True,
    ) -> None:
        """Print a table of ``rows`` (cells go through :func:`cell`).

        With no rows and ``empty`` given, print ``empty`` instead.
        """
        if not rows and empty is not None:
            self.line(empty)
            return
        spec = [c if isinstance(c, Column) else Column(c) for c in columns]
        texts = [[cell(value) for value in row] for row in rows]
        for row in texts:
            if len(row) != len(spec):
                raise ValueError(f"a row of {len(row)} cells in a table of {len(spec)} columns")
        if RICH:
            self._rich_table(title, spec, texts, header=header)
        else:
            self._plain_table(title, spec, texts, header=header)

    def _rich_table(
        self, title: str, spec: list[Column], rows: list[list[str]], *, header: bool
    ) -> None:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=title, show_header=header)
        for i, column in enumerate(spec):
            whole = None
            if not column.fold:
                whole = max([len(column.header), *(len(row[i]) for row in rows)])
            table.add_column(
                column.header,
                justify=column.justify,
                overflow="fold",
                no_wrap=not column.fold,
                min_width=whole,
            )
        for row in rows:
            table.add_row(*(Text(value) for value in row))
        self._rich_console().print(table)

    def _plain_table(
        self, title: str, spec: list[Column], rows: list[list[str]], *, header: bool
    ) -> None:
        # One line per row: a newline inside a cell would break the alignment.
        rows = [[value.replace("\n", " ") for value in row] for row in rows]
        lines = [[c.header for c in spec], ["-" * len(c.header) for c in spec]] if header else []
        lines += rows
        widths = [max(len(line[i]) for line in lines) for i in range(len(spec))]
        if header:
            lines[1] = ["-" * width for width in widths]
        self.stream.write(title)
        for line in lines:
            padded = [
                value.rjust(width) if column.justify == "right" else value.ljust(width)
                for value, width, column in zip(line, widths, spec, strict=True)
            ]
            self.stream.write("  ".join(padded).rstrip())


# --- errors and confirmation ----------------------------------------------------------


@contextlib.contextmanager
def operator_errors() -> Iterator[None]:
    """The operator API's errors as exit codes: not found (or no key) 1, invalid input 2."""
    try:
        yield
    except InvalidJob as exc:
        raise CommandError(str(exc), returncode=EXIT_USAGE) from None
    except (JobNotFound, CallbackNotFound, EncryptionError) as exc:
        raise CommandError(str(exc), returncode=EXIT_REFUSED) from None


def not_found(message: str) -> CommandError:
    """The error (exit status 1) of a command whose target does not exist."""
    return CommandError(message, returncode=EXIT_REFUSED)


def usage_error(message: str) -> CommandError:
    """The error (exit status 2) of arguments that do not go together."""
    return CommandError(message, returncode=EXIT_USAGE)


def describe_database(database: str | None) -> str:
    """``alias (host:port/dbname)`` of the connection a command is about to change.

    Read from the open connection, so libpq's defaults and environment
    variables are resolved; the password is never part of it.
    """
    from awa_django import ops

    alias = ops.database_alias(database)
    connection = ops.database_connection(alias)
    connection.ensure_connection()
    info = connection.connection.info
    host = info.host or "local socket"
    return f"{alias} ({host}:{info.port}/{info.dbname})"


def _stdin_is_terminal() -> bool:
    isatty = getattr(sys.stdin, "isatty", None)
    return bool(isatty and isatty())


def confirm_change(
    out: Output,
    database: str | None,
    summary: str,
    *,
    assume_yes: bool,
    always_ask: bool = False,
) -> None:
    """Print the target database and ``summary``, then ask ``Proceed? [y/N]``.

    The question is asked when stdin is a terminal (or ``always_ask``) and
    ``assume_yes`` (``--yes``) is false; any answer but y/yes, or end of
    input, raises a ``CommandError`` with exit status 1 before anything
    changed.
    """
    out.line(f"database: {describe_database(database)}")
    out.line(summary)
    if assume_yes or not (always_ask or _stdin_is_terminal()):
        return
    out.stream.write("Proceed? [y/N] ", ending="")
    out.stream.flush()
    try:
        # The question went to the command's stdout (call_command(stdout=...) too).
        answer = input("")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError("declined; nothing changed", returncode=EXIT_REFUSED)
