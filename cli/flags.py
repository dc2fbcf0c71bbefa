"""The command line's shared spelling rules (docs/cli-conventions.md §1a): global options after
the verb, and the old spellings of options whose short flag now has one meaning everywhere.

Global options after the verb: `txlog consume -t x --data-dir d -q` means what
`txlog --data-dir d -q consume -t x` means. Kafka's tools and kcat take every option after the
mode, so users put `--data-dir` wherever they are used to. The root callback (cli.main) stores
the global `Settings` before any verb parses its own arguments (click runs a group's callback
first), so the copies added here to every leaf command only update those settings.

Old spellings: each short flag means one thing across verbs, following kcat (`-o` is where
consume starts, `-f` its format, `-c` a count, `-p` a partition number). Spellings that used to
mean something else in one verb (`verify -o json`, `process -f`, `topics create -c k=v`) keep
working there: each is a hidden copy of the option under its old name, sharing the option's
destination, so help lists one spelling and old scripts still run.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from typer.core import TyperOption

from cli.context import Settings, settings

if TYPE_CHECKING:  # typer vendors click as typer._click, and types its own API with it
    from pydantic import ValidationError
    from typer._click import Command, Context, Parameter
    from typer._click.exceptions import UsageError
    from typer.core import TyperGroup

# Global options a user may also give after the verb; none of them is a verb option anywhere.
GLOBAL_AFTER_VERB = ("--data-dir", "-q", "--quiet")

_OUTPUT_VERBS = (
    "verify",
    "inspect",
    "topics describe",
    "transactions list",
    "transactions describe",
    "transactions describe-producers",
    "transactions find-hanging",
    "groups list",
    "groups describe",
    "groups reset-offsets",
    "groups delete-offsets",
)

# command path -> {old spelling: the option's current long name}; hidden, working, not in help.
OLD_SPELLINGS: dict[str, dict[str, str]] = {
    **{verb: {"-o": "--output"} for verb in _OUTPUT_VERBS},  # -o is kcat's offset now
    "process": {
        "-o": "--output-topic",
        "--output": "--output-topic",
        "--input": "--input-topic",
        "--topic": "--input-topic",
        "-t": "--input-topic",
        "-f": "--follow",
    },
    "sql": {"-o": "--output", "-f": "--file"},  # spark-sql's -f FILE
    "topics create": {"-p": "--partitions", "-c": "--config"},
    "topics alter": {"-p": "--partitions", "-c": "--config"},
}


def _set_data_dir(ctx: typer.Context, value: str | None) -> None:
    if value is None or (ctx.resilient_parsing and not value):
        return  # while completing, a typed value is still recorded: completion reads the store it names
    if not value:
        raise typer.BadParameter("must not be empty", param_hint="'--data-dir'")
    _update(ctx, data_dir=value)


def _set_quiet(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        _update(ctx, quiet=True)


def _update(ctx: typer.Context, **changes: Any) -> None:
    root = ctx.find_root()
    current = root.obj if isinstance(root.obj, Settings) else settings(ctx)
    root.obj = dataclasses.replace(current, **changes)


def _carrier(
    data_dir: Annotated[
        str | None,
        typer.Option(
            "--data-dir",
            metavar="DIR",
            hidden=True,
            callback=_set_data_dir,
            help="The store directory (also accepted before the verb).",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            hidden=True,
            callback=_set_quiet,
            help="Print only data and errors (also accepted before the verb).",
        ),
    ] = False,
) -> None:
    """Only its options are used: typer builds them (typer vendors its own click)."""


@functools.cache
def _global_params() -> tuple[Parameter, ...]:
    """Built once; click only reads a parameter while parsing, so every verb shares the same two."""
    carrier = typer.Typer()
    carrier.command()(_carrier)
    params = list(typer.main.get_command(carrier).params)
    for param in params:
        param.expose_value = False  # the verb's function never sees them; the callbacks did the work
    return tuple(p for p in params if set(p.opts) & set(GLOBAL_AFTER_VERB))


def _old_spelling(option: TyperOption, name: str) -> TyperOption:
    """A hidden copy of `option` answering to `name`: same destination, so the parser fills the option itself."""
    alias = copy.copy(option)
    alias.opts, alias.secondary_opts = [name], []
    alias.hidden = True
    alias.required = False  # the option itself still says when it is missing
    alias.expose_value = False
    return alias


def add_to_every_verb(command: Command, path: str = "") -> None:
    """Every leaf command below `command` gets the global options after the verb, its old spellings and
    its examples (cli.help_text) as the epilog of its help."""
    subcommands = getattr(command, "commands", None)
    if subcommands is not None:  # a group: its leaves take the options
        for name, sub in subcommands.items():
            add_to_every_verb(sub, f"{path} {name}".strip())
        return
    by_name = {name: param for param in command.params for name in getattr(param, "opts", [])}
    for old, current in OLD_SPELLINGS.get(path, {}).items():
        option = by_name.get(current)
        if old not in by_name and isinstance(option, TyperOption):  # (every renamed spelling is an option's)
            command.params.append(_old_spelling(option, old))
    if not set(by_name).intersection(GLOBAL_AFTER_VERB):  # a verb using one of these names keeps its meaning
        command.params.extend(_global_params())
    from cli.help_text import SUMMARIES, epilog

    if not command.epilog:
        command.epilog = epilog(path)
    command.short_help = SUMMARIES.get(path, command.short_help)


# ---- usage errors: one line ---------------------------------------------------------------------------

# click's usage-error class, reached through typer's public BadParameter (typer vendors click).
if TYPE_CHECKING:
    _UsageError = UsageError
else:
    _UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


if TYPE_CHECKING:  # what the mixin is mixed into, so that its super() calls are checked
    _Group = TyperGroup
else:
    _Group = object


class OneLineUsageErrors(_Group):
    """A mixin for the root group: a usage error prints one `Error: ...` line naming the option
    (docs/cli-conventions.md §6), not click's usage block and "Try ... for help" line. Help shown
    for a bare group (`txlog topics`) stays as it is."""

    def make_context(self, *args: Any, **kwargs: Any) -> Context:
        try:
            return super().make_context(*args, **kwargs)
        except _UsageError as exc:
            _one_line(exc)
            raise

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except _UsageError as exc:
            _one_line(exc)
            raise


def _one_line(exc: UsageError) -> None:
    if type(exc).__name__ != "NoArgsIsHelpError":
        exc.ctx = None  # click prints the usage block only when it knows the context
    cause = exc.__cause__
    # typer converts values with pydantic, imported only then: the class is known by its name
    if type(cause).__name__ == "ValidationError" and cast("ValidationError", cause).errors():
        exc.message = _plain(cast("ValidationError", cause).errors()[0])


def _plain(error: Mapping[str, object]) -> str:
    """pydantic's wording ("Input should be greater than or equal to 0") as a user's: "must be 0 or more, not -3"."""
    message, value = str(error.get("msg", "")), error.get("input")
    if message.startswith("Value error, "):
        return message[len("Value error, ") :]
    wanted = message.removeprefix("Input should be ").split(", unable")[0]
    for words, phrase in (
        ("greater than or equal to ", "{} or more"),
        ("less than or equal to ", "{} or less"),
        ("greater than ", "more than {}"),
        ("less than ", "less than {}"),
    ):
        if wanted.startswith(words):
            return f"must be {phrase.format(wanted[len(words) :])}, not {value}"
    if wanted == "a valid integer":
        return f"must be a whole number, not {value!r}"
    return f"{message} (got {value!r})" if value is not None else message
