"""The command-line reference (docs/cli.md) is written from the parsers: every command and option is in it."""

from __future__ import annotations

import argparse

from privml.cli._reference import _text, cli_reference, commands
from privml.cli.main import COMMANDS


def test_every_command_and_option_is_documented_with_its_help() -> None:
    text = cli_reference()
    names = [name for name, _ in commands()]
    assert {f"privml {c}" for c in COMMANDS} <= set(names) and "privml study run" in names
    for name, parser in commands():
        if name != "privml":
            assert f"# {name}\n" in text
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or not action.option_strings:
                continue
            assert any(f"`{option}" in text or f", {option}" in text for option in action.option_strings), name
    # The help of an option added by this session, as --help shows it.
    assert "`--bounds unit\\|private\\[:FRACTION\\]`" not in text  # inside a code span: kept as written
    assert "`--bounds unit|private[:FRACTION]`" in text and "DP quantiles" in text


def test_the_page_does_not_depend_on_the_terminal(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = cli_reference()
    monkeypatch.setenv("COLUMNS", "200")
    assert cli_reference() == narrow


def test_markup_in_help_is_escaped_outside_code() -> None:
    assert _text("q in (0, 1] for `privml train --x`, a|b") == "q in (0, 1\\] for `privml train --x`, a\\|b"
    assert _text("an odd ` backtick *") == "an odd \\` backtick \\*"
