"""What every command shares: the global options and the store they point at.

The root callback in `cli.main` stores a `Settings` in the click context; commands read
it with `settings(ctx)` and open the store with `open_store` (storage is imported here
lazily, so merely building the app never loads it).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # pragma: no cover
    from typer._click import Context as ClickContext  # (typer vendors click)

    from storage import Store
    from txlog.clients.admin import Admin

DEFAULT_DATA_DIR = "./txlog-data"
DATA_DIR_ENV = "TXLOG_DATA_DIR"


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: str
    quiet: bool = False


class CommandError(Exception):
    """An expected failure found by the CLI itself; `cli.main` prints `Error: <message>`."""

    exit_code = 1

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


USAGE = 2  # exit code of a usage error


class MissingStoreError(CommandError):
    """The data directory does not exist, and the command does not create stores."""


def settings(ctx: typer.Context) -> Settings:
    """The global options of this invocation (defaults when a command runs without the root)."""
    obj = ctx.find_root().obj
    if isinstance(obj, Settings):
        return obj
    return Settings(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


READ_ONLY_HINT = (
    "verbs that only read work on it: 'consume' without --group, 'inspect', 'verify', "
    "'topics list|describe', 'groups list|describe', 'transactions list|describe --no-sweep'"
)


def open_store(ctx: typer.Context, *, create: bool = False, read_only: bool = False) -> Store:
    """Open the store named by --data-dir.

    Only commands that write something the user asked for (`topics create`, `demo`)
    pass `create=True`; every other command, read verbs included, reports a missing or
    mistyped directory as "no store at ..." instead of printing an empty list or leaving
    an empty store behind. A store the user may not write is named as such, with the
    verbs that still work (docs/cli-conventions.md §6).
    """
    from storage import Store

    root = settings(ctx).data_dir
    if not create and not Store.exists(root):
        raise MissingStoreError(missing_store_message(root))
    try:
        return Store.open(root, read_only=read_only)
    except OSError as exc:
        if read_only or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise CommandError(
            f"cannot write to the store at {os.path.abspath(root)} ({exc.strerror or exc}); {READ_ONLY_HINT}"
        ) from None


def missing_store_message(root: str) -> str:
    """ "no store at DIR (why)": the one wording for a --data-dir that holds no store."""
    where = os.path.abspath(root)
    if not os.path.exists(where):
        why = "the directory does not exist; 'txlog topics create TOPIC' makes one"
    elif not os.path.isdir(where):
        why = "it is a file, not a directory"
    else:
        why = "the directory holds neither a txlog store nor a Kafka log dir"
    return f"no store at {where} ({why}; name the store with --data-dir DIR or {DATA_DIR_ENV})"


def require_java() -> None:
    """Spark's JVM is found as pyspark finds it: $JAVA_HOME/bin/java, else `java` on PATH. Without one,
    pyspark only says its gateway exited; the user needs to hear which Java to install."""
    import shutil

    home = os.environ.get("JAVA_HOME")
    if (home and os.access(os.path.join(home, "bin", "java"), os.X_OK)) or (not home and shutil.which("java")):
        return
    where = f"JAVA_HOME={home} has no bin/java" if home else "no 'java' on PATH and JAVA_HOME is not set"
    raise CommandError(
        f"sql runs Spark, which needs Java 17 or 21, and none was found ({where}); install one "
        "(e.g. apt-get install openjdk-17-jre-headless) or point JAVA_HOME at it"
    )


def data_dir_for_completion(ctx: typer.Context) -> str:
    """--data-dir as typed so far on the command line being completed (after the verb: recorded in the
    root's Settings by cli.flags; before it: the root's parameter), else env, else default."""
    obj = ctx.find_root().obj
    if isinstance(obj, Settings):
        return obj.data_dir
    context: ClickContext | None = ctx
    while context is not None:
        value = context.params.get("data_dir") if context.params else None
        if value:
            return value
        context = context.parent
    return os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR


def complete_topic_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of topic names, read from the store; silent on any failure."""
    try:
        root = data_dir_for_completion(ctx)
        if not os.path.isdir(root):
            return []
        from storage import Store

        store = Store.open(root, read_only=True)
        try:
            names = store.list_topics()
        finally:
            store.close()
        return [n for n in names if n.startswith(incomplete or "")]
    except Exception:  # noqa: BLE001  completion must never print a traceback into the user's shell
        return []


def _complete_from_admin(ctx: typer.Context, incomplete: str, names: Callable[[Admin], Iterable[str]]) -> list[str]:
    """Shell completion of names an Admin lists on the store read-only (nothing swept or written);
    silent on any failure, like complete_topic_names."""
    try:
        root = data_dir_for_completion(ctx)
        if not os.path.isdir(root):
            return []
        from txlog.clients.admin import Admin

        with Admin(root, read_only=True) as admin:
            found = sorted(set(names(admin)))
        return [n for n in found if n.startswith(incomplete or "")]
    except Exception:  # noqa: BLE001  completion must never print a traceback into the user's shell
        return []


def complete_group_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of consumer group ids (groups with offsets or members)."""
    return _complete_from_admin(ctx, incomplete, lambda admin: admin.list_consumer_groups())


def complete_transactional_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of the transactional ids the coordinator knows."""
    return _complete_from_admin(ctx, incomplete, lambda admin: (d.transactional_id for d in admin.list_transactions()))
