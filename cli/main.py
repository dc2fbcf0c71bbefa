"""The `txlog` application: global options, the verbs, and how every run ends.

Exit codes (docs/cli-conventions.md §6): 0 ok, 1 error, 2 usage, 3 a check found problems,
4 the outcome of commit/abort is ambiguous, 130 interrupted. Every expected failure -- any
storage `KafkaError`, an `OSError` from the store, a `CommandError` of the CLI -- ends as one
`Error: <message>` line on stderr; only a bug prints a traceback.

Each group of verbs is a module of its own, named in `VERBS` at the bottom of this file; a
new verb (produce, consume, transactions, ...) is one more module and one more line. A verb's
module is imported only when that verb runs (or its help, or completion, is asked for), so
`txlog --help` and `txlog VERB --help` stay fast: the root help lists the verbs from
cli.help_text.SUMMARIES. Nothing heavy is imported here: `storage` and `txlog` are imported
inside commands, and option values are converted by cli/param_values.py, so a run does not
import pydantic (tests/cli/test_cli_startup.py holds these rules).
"""

from __future__ import annotations

import errno
import gc
import importlib
import os
import re
import sys
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from typer.core import TyperGroup

from cli.context import DATA_DIR_ENV, DEFAULT_DATA_DIR, READ_ONLY_HINT, USAGE, CommandError, Settings
from cli.flags import OneLineUsageErrors
from cli.param_values import install as install_plain_values

if TYPE_CHECKING:
    from typer._click import Command, Context, HelpFormatter  # typer vendors click


class TxlogGroup(OneLineUsageErrors, TyperGroup):
    """The root command group; turns expected failures into `Error: ...` and an exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install_plain_values(self)  # before the verbs are put in: each verb gets them when built
        self.commands = _LazyVerbs()  # each built on first use, for this group only

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)  # the names only: typer's own builds every verb to list them

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The verb list of `txlog --help`, from the summaries: listing the verbs imports none of them."""
        from cli.help_text import SUMMARIES

        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in VERBS])

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except CommandError as exc:
            _fail(str(exc), exc.exit_code)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # typer ends a broken pipe (`| head`) quietly with exit 1
            _fail(_describe_os_error(exc), 1)
        except Exception as exc:
            if _is_kafka_error(exc):
                _fail(_with_hint(exc), 1)
            if _is_undecodable_argument(exc):
                _fail(_non_utf8_argument_message(), USAGE)
            raise


def _is_kafka_error(exc: Exception) -> bool:
    """Whether `exc` is a storage/txlog error, without importing `storage` for the exceptions that are
    not (click's exit of `txlog VERB --help` passes here): a KafkaError exists only once its module does."""
    errors = sys.modules.get("storage.errors")
    return errors is not None and isinstance(exc, errors.KafkaError)


def _fail(message: str, code: int) -> None:
    from cli.output import error_line

    error_line(_printable(message))
    raise typer.Exit(code)


def _with_hint(exc: Exception) -> str:
    """The error's message, plus what to do where one wording fits every verb: an unknown topic, whichever
    layer found it (store, producer, consumer, process), reads the same and says how to create it."""
    from storage.errors import UnknownTopicOrPartitionError

    message = str(exc) or type(exc).__name__
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        message += f" (the store is not writable here; {READ_ONLY_HINT})"
    if (
        isinstance(exc, UnknownTopicOrPartitionError)
        and message.startswith("topic '")
        and message.endswith("' does not exist")
    ):
        name = message[len("topic '") : -len("' does not exist")]
        if re.fullmatch(r"[A-Za-z0-9._-]+", name):  # a name `topics create` takes (no quoting needed)
            message += f" (create it with 'txlog topics create {name}'; 'txlog topics list' shows the topics)"
    return message


def _describe_os_error(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    where = f"{reason}: {_printable(exc.filename)}" if exc.filename is not None else reason
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where += f" (not writable here; {READ_ONLY_HINT})"
    return where


def _printable(name: object) -> str:
    """A path as the user typed it: undecodable bytes (surrogate escapes) shown as \\xNN."""
    text = os.fsdecode(name) if isinstance(name, (str, bytes)) else str(name)
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return re.sub(r"\\udc([89a-f][0-9a-f])", r"\\x\1", text)  # the same byte inside a repr() of the name


def _is_undecodable_argument(exc: Exception) -> bool:
    """A command-line argument with bytes that are not UTF-8 reached code that needs text.

    Python hands such bytes over as lone surrogates (PEP 383); encoding them as UTF-8
    fails with "surrogates not allowed". Byte-valued options (`produce -k/-H/-K`) take them
    as raw bytes instead (cli/produce.py); names (topics, groups, ids) must be text.
    """
    return isinstance(exc, UnicodeEncodeError) and "surrogates not allowed" in str(exc.reason)


def _non_utf8_argument_message() -> str:
    bad = [_printable(arg) for arg in sys.argv[1:] if any("\udc80" <= c <= "\udcff" for c in arg)]
    which = f"argument '{bad[0]}'" if bad else "an argument"
    return (
        f"{which} is not valid UTF-8, and it is used as text here (topic names, group and transactional ids, "
        "formats); only produce's -k, -H values and -K take raw bytes"
    )


class TxlogApp(typer.Typer):
    """The `txlog` script's app (pyproject.toml's entry point calls it); tests run its group in-process instead."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line; the interpreter's exit then skips collecting every object.

        A run of the script ends here (typer always exits by SystemExit), and the interpreter's
        finalization starts with a full garbage collection that walks every object the imports and
        the command left: ~10 ms of a 0.25 s `txlog consume` (bench_consume_inspect.py). Frozen, they
        are out of its reach; the process is ending, so the memory of a cycle among them is the OS's
        to take back. Nothing of ours relies on a cycle's finalizer at exit: atexit handlers still
        run first, every store file is closed by the command, and stdout/stderr are flushed by the
        interpreter itself. A program that calls app() and goes on (catching its SystemExit) keeps
        the freeze: its later garbage is collected as ever, only the objects of the run are not.
        """
        try:
            return super().__call__(*args, **kwargs)
        finally:
            gc.freeze()


app = TxlogApp(
    cls=TxlogGroup,
    name="txlog",
    help="Kafka's exactly-once machinery as an embedded, file-backed tool. "
    "Every command opens the store directory itself; there is no broker.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain click output: `Error: ...` lines, no boxes, no rich import
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        from txlog import __version__

        typer.echo(f"txlog {__version__}")
        raise typer.Exit()


def _check_data_dir(value: str) -> str:
    if not value:
        raise typer.BadParameter("must not be empty")
    return value


@app.callback()
def root(
    ctx: typer.Context,
    data_dir: Annotated[
        str,
        typer.Option(
            "--data-dir",
            envvar=DATA_DIR_ENV,
            metavar="DIR",
            callback=_check_data_dir,
            help="The store directory (a txlog store, or a Kafka log dir opened read-only).",
        ),
    ] = DEFAULT_DATA_DIR,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only data and errors, no status lines.")] = False,
    version: Annotated[
        bool | None,
        typer.Option(
            "--version",
            callback=_version_callback,
            is_eager=True,
            help="Print txlog's version and exit.",
        ),
    ] = None,
) -> None:
    ctx.obj = Settings(data_dir=data_dir, quiet=quiet)


# ---- the verbs: one module per concept, imported when used ---------------------------------------


class Verb(NamedTuple):
    """Where a verb lives: `attribute` of `module` is its function, or a typer app for a group of verbs."""

    module: str
    attribute: str
    context_settings: dict[str, Any] | None = None


# In the order `txlog --help` lists them (single verbs first, then the groups, as typer lists them).
VERBS: dict[str, Verb] = {
    "produce": Verb("cli.produce", "produce"),
    "consume": Verb("cli.consume", "consume"),
    "commit": Verb("cli.transactions", "commit"),
    "abort": Verb("cli.transactions", "abort"),
    "demo": Verb("cli.demo", "demo"),
    "inspect": Verb("cli.inspect", "inspect"),
    "verify": Verb("cli.verify", "verify"),
    "process": Verb("cli.process", "process", {"allow_interspersed_args": False}),
    "sql": Verb("cli.sql", "sql"),
    "export": Verb("cli.export", "export"),
    "topics": Verb("cli.topics", "app"),
    "transactions": Verb("cli.transactions", "app"),
    "groups": Verb("cli.groups", "app"),
    "serve": Verb("cli.serve", "serve"),
    "mirror": Verb("cli.mirror", "mirror"),
}


def _no_options() -> None:
    """The callback of the one-verb app `_build_verb` makes: it makes typer build a group, whose
    commands keep their names."""


def _build_verb(name: str) -> Command:
    """The click command of verb `name`, built by typer as `app.command`/`app.add_typer` would have."""
    from cli.flags import add_to_every_verb
    from cli.help_text import SUMMARIES

    verb = VERBS[name]
    target = getattr(importlib.import_module(verb.module), verb.attribute)
    holder = typer.Typer(rich_markup_mode=app.rich_markup_mode, add_completion=False)
    holder.callback()(_no_options)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name, context_settings=verb.context_settings)(target)
    command: Command = typer.main.get_group(holder).commands[name]
    add_to_every_verb(command, name)  # --data-dir and -q after the verb too (docs/cli-conventions.md §1)
    install_plain_values(command)  # its option values converted without importing pydantic
    command.short_help = SUMMARIES[name]  # what the root help lists without building it
    return command


class _LazyVerbs(MutableMapping[str, "Command"]):
    """The root group's commands: every verb of VERBS is listed, and built on first access."""

    def __init__(self) -> None:
        self._built: dict[str, Command] = {}

    def __getitem__(self, name: str) -> Command:
        if name not in self._built:
            if name not in VERBS:
                raise KeyError(name)
            self._built[name] = _build_verb(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the verbs are fixed by cli.main.VERBS")

    def __iter__(self) -> Iterator[str]:
        yield from VERBS
        yield from (name for name in self._built if name not in VERBS)

    def __len__(self) -> int:
        return len(set(VERBS) | set(self._built))

    def __contains__(self, name: object) -> bool:
        return name in VERBS or name in self._built


if __name__ == "__main__":
    app(prog_name="txlog")
