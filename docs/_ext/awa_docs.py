"""Sphinx directives that generate reference tables from the code itself.

``awa-settings``
    Every top-level key of ``settings.AWA``: default, accepted values and
    description, from :func:`awa_django.conf.documented_settings`.
``awa-queue-options``
    Every option of one ``AWA["QUEUES"][name]`` dict, from
    :func:`awa_django.conf.documented_queue_options`.
``awa-command NAME``
    The help text and every flag of ``manage.py NAME`` (subcommands
    included), read from the command's own argparse parser.  Django's common
    options (``--verbosity``, ``--settings``, ...) are left out.
``awa-metrics``
    Every metric of :mod:`awa_django.observability.metrics` under its
    Prometheus name, with its type, labels and description.
``awa-otel-metrics``
    The same metrics as OpenTelemetry instruments: name, instrument, unit,
    attributes and description.

Nodes are built directly (no generated markup to re-parse), so the
directives behave the same in MyST and reStructuredText pages.  Text
between double backquotes in a description becomes inline code.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

_CODE = re.compile(r"``(.+?)``")


def inline(text: str) -> list[nodes.Node]:
    """``text`` as text nodes, with ````code```` spans as literals."""
    parts: list[nodes.Node] = []
    position = 0
    for match in _CODE.finditer(text):
        if match.start() > position:
            parts.append(nodes.Text(text[position : match.start()]))
        parts.append(nodes.literal(match[1], match[1]))
        position = match.end()
    if position < len(text):
        parts.append(nodes.Text(text[position:]))
    return parts


def _cell(*content: nodes.Node | str) -> nodes.entry:
    paragraph = nodes.paragraph()
    for item in content:
        paragraph += nodes.Text(item) if isinstance(item, str) else item
    entry = nodes.entry()
    entry += paragraph
    return entry


def table(headers: list[str], rows: list[list[nodes.entry]], widths: list[int]) -> nodes.table:
    tgroup = nodes.tgroup(cols=len(headers))
    for width in widths:
        tgroup += nodes.colspec(colwidth=width)
    head = nodes.thead()
    header_row = nodes.row()
    for header in headers:
        header_row += _cell(header)
    head += header_row
    tgroup += head
    body = nodes.tbody()
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            row += cell
        body += row
    tgroup += body
    result = nodes.table(classes=["awa-reference"])
    result += tgroup
    return result


def human_seconds(value: float) -> str:
    """``30 s``, ``0.001 s``, ``259200 s (3 days)``."""
    text = f"{value:g} s"
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if value >= size and value % size == 0:
            count = int(value // size)
            return f"{text} ({count} {unit[:-1] if count == 1 else unit})"
    return text


def default_text(value: Any, duration: bool) -> str:
    if value is None:
        return "None"
    if duration:
        return human_seconds(float(value))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"{value:_}"
    return repr(value)


def settings_table(rows: list[Any]) -> nodes.table:
    body = []
    for doc in rows:
        description: list[nodes.Node] = inline(doc.description)
        if doc.not_implemented:
            description.append(nodes.Text(" "))
            description.append(
                nodes.strong("", f"Accepted, no effect yet ({doc.not_implemented}).")
            )
        key = nodes.literal(doc.key, doc.key)
        default = nodes.literal("", default_text(doc.default, doc.duration))
        body.append([_cell(key), _cell(default), _cell(doc.accepts), _cell(*description)])
    return table(["Key", "Default", "Accepts", "Description"], body, [22, 16, 22, 40])


class SettingsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from awa_django import conf
        from awa_django.conf import declarations

        self.env.note_dependency(declarations.__file__)
        return [settings_table(conf.documented_settings())]


class QueueOptionsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from awa_django import conf
        from awa_django.conf import declarations

        self.env.note_dependency(declarations.__file__)
        return [settings_table(conf.documented_queue_options())]


# --- management commands ----------------------------------------------------------


def command_parser(name: str) -> argparse.ArgumentParser:
    """The argparse parser of ``manage.py name``."""
    from django.core.management import get_commands, load_command_class

    command = load_command_class(get_commands()[name], name)
    return command.create_parser("manage.py", name)


def django_common_options() -> set[str]:
    """Option strings every Django command has (``--verbosity``, ``--settings``, ...)."""
    from django.core.management.base import BaseCommand

    parser = BaseCommand().create_parser("manage.py", "command")
    return {option for action in parser._actions for option in action.option_strings}


def own_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions that are not Django's common options or ``--help``."""
    common = django_common_options()
    return [
        action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        and not (action.option_strings and set(action.option_strings) <= common)
    ]


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand of ``parser``."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _flag(action: argparse.Action) -> str:
    names = ", ".join(action.option_strings) or action.dest
    if action.nargs == 0:
        return names
    metavar = action.metavar or (action.dest.upper() if action.option_strings else "")
    return f"{names} {metavar}".strip()


def _default(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "off"
    if action.default in (None, [], argparse.SUPPRESS):
        return "-"
    return str(action.default)


def flags_table(actions: list[argparse.Action]) -> nodes.table:
    body = []
    for action in actions:
        description = inline(action.help or "")
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            description.append(nodes.Text(f" One of: {', '.join(map(str, action.choices))}."))
        body.append(
            [
                _cell(nodes.literal("", _flag(action))),
                _cell(nodes.literal("", _default(action))),
                _cell(*description),
            ]
        )
    return table(["Flag", "Default", "Description"], body, [28, 12, 60])


class CommandDirective(SphinxDirective):
    required_arguments = 1
    option_spec = {"no-help": directives.flag}

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        parser = command_parser(name)
        result: list[nodes.Node] = []
        if "no-help" not in self.options and parser.description:
            result.append(nodes.paragraph("", "", *inline(parser.description)))
        usage = parser.format_usage().removeprefix("usage: ").strip()
        result.append(nodes.literal_block(usage, usage, language="text"))
        flags = [a for a in own_actions(parser) if not isinstance(a, argparse._SubParsersAction)]
        if flags:
            result.append(flags_table(flags))
        result.extend(subcommand_sections(name, parser))
        return result


def subcommand_sections(prefix: str, parser: argparse.ArgumentParser) -> list[nodes.Node]:
    """Title, usage and flags of each subcommand of ``parser``, nested ones included."""
    result: list[nodes.Node] = []
    for sub_name, sub_help, sub in subcommands(parser):
        title = nodes.paragraph()
        title += nodes.strong("", f"{prefix} {sub_name}")
        if sub_help:
            title += nodes.Text(": ")
            title.extend(inline(sub_help))
        result.append(title)
        sub_usage = sub.format_usage().removeprefix("usage: ").strip()
        result.append(nodes.literal_block(sub_usage, sub_usage, language="text"))
        sub_flags = [a for a in own_actions(sub) if not isinstance(a, argparse._SubParsersAction)]
        if sub_flags:
            result.append(flags_table(sub_flags))
        result.extend(subcommand_sections(f"{prefix} {sub_name}", sub))
    return result


# --- metrics ----------------------------------------------------------------------


class MetricsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from awa_django.observability import metrics

        self.env.note_dependency(metrics.__file__)
        body = []
        for metric in metrics.ALL:
            name = metrics.prometheus_name(metric)
            labels = ", ".join(metric.attributes) or "-"
            body.append(
                [
                    _cell(nodes.literal(name, name)),
                    _cell(metric.instrument),
                    _cell(labels),
                    _cell(*inline(metric.description)),
                ]
            )
        return [table(["Prometheus name", "Type", "Labels", "Description"], body, [34, 10, 18, 38])]


# How the OpenTelemetry observer builds each kind of the table.
_OTEL_INSTRUMENTS = {
    "counter": "Counter (asynchronous)",
    "histogram": "Histogram",
    "gauge": "Gauge (asynchronous)",
}


class OtelMetricsDirective(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from awa_django.observability import metrics

        self.env.note_dependency(metrics.__file__)
        body = [
            [
                _cell(nodes.literal(metric.name, metric.name)),
                _cell(_OTEL_INSTRUMENTS[metric.instrument]),
                _cell(nodes.literal(metric.unit, metric.unit)),
                _cell(", ".join(metric.attributes) or "-"),
                _cell(*inline(metric.description)),
            ]
            for metric in metrics.ALL
        ]
        headers = ["Instrument name", "Kind", "Unit", "Attributes", "Description"]
        return [table(headers, body, [28, 14, 9, 16, 33])]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("awa-settings", SettingsDirective)
    app.add_directive("awa-queue-options", QueueOptionsDirective)
    app.add_directive("awa-command", CommandDirective)
    app.add_directive("awa-metrics", MetricsDirective)
    app.add_directive("awa-otel-metrics", OtelMetricsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
