"""MkDocs hook: the command line's synopses, generated from its parser.

A page line ``<!-- cli: jaxsynth simulate -->`` becomes the help of ``jaxsynth
simulate`` (argparse's ``format_help`` of ``jaxsynth.cli._parser()``, every option with
its help), and ``<!-- cli-usage: jaxsynth rate -->`` its usage line alone, each in a
``text`` block: a page cannot list an option the parser lacks nor miss one it has.
``tests/test_docs.py`` renders ``guide/cli.md`` through ``render`` and checks that it
holds every option.  The width is fixed (``WIDTH``), not the terminal's, so every build
renders the same page.
"""

from __future__ import annotations

import argparse
import functools
import re

WIDTH = 88
"""Columns of the rendered help: the width of the pages' code blocks."""
MARKER = re.compile(r"^<!-- cli(-usage)?: (jaxsynth(?: [\w-]+)?) -->$", re.M)
"""A page line naming a command whose help (or usage line, ``cli-usage``) goes there."""


def commands() -> dict[str, argparse.ArgumentParser]:
    """``jaxsynth`` and each ``jaxsynth SUBCOMMAND``, by the command line that names it."""
    from jaxsynth.cli import _parser

    parser = _parser()
    found = {"jaxsynth": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update({f"jaxsynth {name}": sub for name, sub in action.choices.items()})
    for sub in found.values():
        sub.formatter_class = functools.partial(sub.formatter_class, width=WIDTH)
    return found


def options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string ``parser`` documents (hidden former flags left out)."""
    return [option for action in parser._actions if action.help is not argparse.SUPPRESS
            for option in action.option_strings]


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by its command's help or usage block."""
    found = commands() if MARKER.search(markdown) else {}

    def block(match: re.Match) -> str:
        usage, command = match.groups()
        if command not in found:
            raise ValueError(f"{match.group(0)}: no such command; the commands are "
                             f"{sorted(found)}")
        parser = found[command]
        text = parser.format_usage() if usage else parser.format_help()
        return f"```text\n{text.rstrip()}\n```"

    return MARKER.sub(block, markdown)


def on_page_markdown(markdown, page, config, files):
    return render(markdown)
