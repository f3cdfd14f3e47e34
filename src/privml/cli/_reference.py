"""The command-line reference, written from the argument parsers themselves (docs/cli.md includes it).

:func:`cli_reference` walks :func:`privml.cli.main.build_parser` (every
subcommand in full, nested ones such as ``study run`` included) and renders
each command's description, usage and options with their help as Markdown,
so the reference cannot disagree with what ``privml COMMAND --help`` says.
``docs/conf.py`` writes it to ``docs/_generated/cli.md`` on every build.
"""

from __future__ import annotations

import argparse
import re

from privml.cli.main import build_parser

__all__ = ["cli_reference", "commands"]

#: Characters Markdown would read as markup in help text (outside `code` spans).
_MARKUP = re.compile(r"([\\*_<>\[\]|#])")
#: The width usage lines are wrapped at: fixed, so the page does not depend on the terminal it was built in.
USAGE_WIDTH = 96


def commands(parser: argparse.ArgumentParser | None = None) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command's full name (``"privml study run"``) and parser, depth first, in registration order."""
    root = build_parser() if parser is None else parser
    out: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(name: str, current: argparse.ArgumentParser) -> None:
        out.append((name, current))
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child, sub in action.choices.items():
                    walk(f"{name} {child}", sub)

    walk("privml", root)
    return out


def _text(text: str) -> str:
    """Help text as Markdown: markup characters escaped outside `code` spans, which are kept."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: escape everything
        return _MARKUP.sub(r"\\\1", text).replace("`", "\\`")
    return "`".join(part if i % 2 else _MARKUP.sub(r"\\\1", part) for i, part in enumerate(parts))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(prog=parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _options(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        invocation = formatter._format_action_invocation(action)
        help_text = formatter._expand_help(action) if action.help else ""
        lines.append(f"- `{invocation}`" + (f": {_text(' '.join(help_text.split()))}" if help_text else ""))
    return lines


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    lines = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                lines.append(f"- `{choice.dest}`: {_text(' '.join((choice.help or '').split()))}")
    return lines


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference of every command as Markdown (level-2 headings for commands, level 3 for nested ones)."""
    out: list[str] = []
    for name, current in commands(parser):
        depth = name.count(" ")
        if depth:
            out += ["", f"{'#' * min(depth + 1, 3)} {name}", ""]
        if current.description:
            out += [_text(" ".join(current.description.split())), ""]
        out += ["```text", _usage(current), "```", ""]
        subcommands = _subcommands(current)
        if subcommands:
            out += ["Commands:", "", *subcommands, ""]
        options = _options(current)
        if options:
            out += ["Options:", "", *options]
    return "\n".join(out).strip() + "\n"
