"""The documentation stays complete: every setting and command is documented.

The settings reference and the command reference are generated (by
docs/_ext/awa_docs.py) from ``awa_django.conf`` and the commands' parsers;
these tests make sure there is something true to generate: a description
for every key the parser accepts, a help text for every flag, a page for
every command, and no page or message pointing at a file users do not have.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand

from awa_django import conf

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
AWA_COMMANDS = sorted(name for name, app in get_commands().items() if app == "awa_django")


def test_every_setting_the_parser_accepts_has_a_description():
    accepted = set(conf._TOP_KEYS) | conf._STRUCTURED_KEYS
    described = set(conf.SETTING_DESCRIPTIONS)
    assert accepted - described == set(), "add a line to conf.SETTING_DESCRIPTIONS"
    assert described - accepted == set(), "a description names a key the parser does not accept"
    assert all(text.strip() for text in conf.SETTING_DESCRIPTIONS.values())


def test_every_queue_option_has_a_description():
    assert set(conf.QUEUE_OPTION_DESCRIPTIONS) == set(conf._QUEUE_KEYS)
    assert all(text.strip() for text in conf.QUEUE_OPTION_DESCRIPTIONS.values())


def test_the_generated_rows_carry_the_real_defaults():
    rows = {doc.key: doc for doc in conf.documented_settings()}
    assert set(rows) == set(conf._TOP_KEYS) | conf._STRUCTURED_KEYS
    defaults = conf.AwaSettings()
    for key in conf._TOP_KEYS:
        assert rows[key].default == getattr(defaults, key.lower()), key
        assert rows[key].accepts
    assert rows["QUEUES"].default == {"default": {}}
    assert rows["HEARTBEAT_INTERVAL"].duration and not rows["QUEUE_SLOT_COUNT"].duration
    assert rows["QUEUE_SLOT_COUNT"].accepts == "integer 4 to 256"
    for key, reason in conf.NOT_IMPLEMENTED.items():
        assert rows[key].not_implemented == reason
    assert rows["DATABASE"].not_implemented is None

    options = {doc.key: doc for doc in conf.documented_queue_options()}
    assert set(options) == set(conf._QUEUE_KEYS)
    queue = conf.QueueConfig("any")
    for option, doc in options.items():
        assert doc.default == getattr(queue, option), option
    for option, reason in conf.NOT_IMPLEMENTED_QUEUE_OPTIONS.items():
        assert options[option].not_implemented == reason


def _own_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    common = {
        option
        for action in BaseCommand().create_parser("manage.py", "x")._actions
        for option in action.option_strings
    }
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_own_actions(sub))
            continue
        if not set(action.option_strings) <= common or not action.option_strings:
            found.append(action)
    return found


@pytest.mark.parametrize("name", AWA_COMMANDS)
def test_every_flag_of_every_command_has_help(name):
    command = load_command_class("awa_django", name)
    assert command.help.strip(), f"{name} has no help text"
    parser = command.create_parser("manage.py", name)
    actions = _own_actions(parser)
    assert actions, name
    missing = [action.option_strings or action.dest for action in actions if not action.help]
    assert missing == [], f"{name}: flags without help: {missing}"


def test_the_command_reference_covers_every_command():
    page = (DOCS / "reference" / "commands.md").read_text()
    documented = re.findall(r"^```\{awa-command\} (\S+)$", page, flags=re.MULTILINE)
    assert sorted(documented) == AWA_COMMANDS


def test_the_settings_reference_uses_the_generated_tables():
    page = (DOCS / "reference" / "settings.md").read_text()
    assert "```{awa-settings}" in page and "```{awa-queue-options}" in page


FOREIGN_FILES = re.compile(r"\b(API\.md|DESIGN\.md|spec/)")


def test_no_page_or_message_refers_to_a_file_outside_the_repository():
    """Docs and Python sources name no file a user of the package lacks."""
    offenders = []
    sources = [*DOCS.rglob("*.md"), *DOCS.rglob("*.py"), *(ROOT / "awa_django").rglob("*.py")]
    sources += [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    for path in sources:
        if "_build" in path.parts or not path.exists():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FOREIGN_FILES.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_example_on_the_settings_reference_is_valid():
    page = (DOCS / "reference" / "settings.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```$", page, flags=re.MULTILINE | re.DOTALL)
    namespace: dict = {}
    exec(code, namespace)  # the page's own example, as written
    parsed, problems = conf.parse_settings(namespace["AWA"])
    assert problems == []
    assert parsed.queues["email"].deadline == 600
