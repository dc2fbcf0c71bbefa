"""Every command line shown as an example in a `--help` is one the command line accepts.

A user pastes these; an example that says "No such option" (as `transactions find-hanging -t
orders` once did) teaches the wrong spelling. Each example is parsed by the real application
with every verb's body replaced by a recorder, so the check covers options, their values and
their validation callbacks, and that the line reaches exactly one verb, without touching a store.
The examples come from cli/help_text.py and from the verbs whose docstrings end with theirs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

import pytest
import typer

from cli.help_text import EXAMPLES
from cli.main import app

# Shell syntax around an example: pipes and command lists between commands, redirections after.
_COMMANDS = re.compile(r"\s(?:\||&&|;)\s")
_REDIRECTION = re.compile(r"\s\d?[<>].*$")


def _leaves(group: typer.core.TyperGroup) -> Iterator[tuple[str, object]]:
    for name, command in group.commands.items():
        if isinstance(command, typer.core.TyperGroup):
            yield from ((f"{name} {sub}", leaf) for sub, leaf in _leaves(command))
        else:
            yield name, command


def _docstring_examples() -> Iterator[tuple[str, str]]:
    """(verb, line) for the verbs whose own help text ends with examples."""
    for verb, command in _leaves(typer.main.get_command(app)):
        for line in (getattr(command, "help", None) or "").splitlines():
            if line.strip().startswith("txlog "):
                yield verb, line.strip()


def examples() -> list[tuple[str, str]]:
    table = [(verb, line) for verb, lines in EXAMPLES.items() for line in lines]
    return table + sorted(set(_docstring_examples()) - set(table))


def txlog_argv(example: str) -> list[str]:
    """The arguments of the `txlog` command in an example line (comment, pipes and redirections cut)."""
    line = example.split("  #")[0].strip()
    commands = [c.strip() for c in _COMMANDS.split(line)]
    (mine,) = [c for c in commands if c.startswith("txlog ")]
    return shlex.split(_REDIRECTION.sub("", mine))[1:]


@pytest.fixture(scope="module")
def parse():
    """Parse argv with the real application; returns the verb whose body it reached."""
    root = typer.main.get_command(app)
    reached: list[str] = []
    for verb, leaf in _leaves(root):
        leaf.callback = lambda *args, _verb=verb, **kwargs: reached.append(_verb)

    def run(argv: list[str]) -> str:
        reached.clear()
        root.main(argv, prog_name="txlog", standalone_mode=False)
        assert len(reached) == 1, f"{argv} reached {reached}"
        return reached[0]

    return run


def test_every_verb_with_examples_is_a_verb(parse):
    verbs = {verb for verb, _ in _leaves(typer.main.get_command(app))}
    assert set(EXAMPLES) - verbs == set()


def test_the_example_finder_cuts_shell_syntax():
    assert txlog_argv("seq 3 | txlog produce -t orders") == ["produce", "-t", "orders"]
    assert txlog_argv("txlog verify --progress 2> v.log     # lines") == ["verify", "--progress"]
    assert txlog_argv("txlog topics list --output csv | cut -d, -f1") == ["topics", "list", "--output", "csv"]


@pytest.mark.parametrize(("verb", "example"), examples(), ids=lambda value: value)
def test_every_help_example_parses_and_reaches_a_verb(parse, verb, example):
    # a verb's examples may show the steps around it (commit's help starts with produce --no-commit)
    leaves = {name for name, _ in _leaves(typer.main.get_command(app))}
    assert parse(txlog_argv(example)) in leaves, verb
