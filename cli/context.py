"""What every command shares: the global options and the store they point at.

The root callback in `cli.main` stores a `Settings` in the click context; commands read
it with `settings(ctx)` and open the store with `open_store` (storage is imported here
lazily, so merely building the app never loads it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # pragma: no cover
    from storage import Store

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


def store_exists(ctx: typer.Context) -> bool:
    return os.path.isdir(settings(ctx).data_dir)


def open_store(ctx: typer.Context, *, create: bool = False, read_only: bool = False) -> Store:
    """Open the store named by --data-dir.

    Only commands that write something the user asked for (`topics create`, `demo`)
    pass `create=True`; every other command reports a missing directory instead of
    leaving an empty store behind.
    """
    from storage import Store

    root = settings(ctx).data_dir
    if not create and not os.path.isdir(root):
        raise MissingStoreError(
            f"no store at {os.path.abspath(root)} (the directory does not exist; "
            "'txlog topics create' makes one, or pass --data-dir)"
        )
    return Store.open(root, read_only=read_only)


def data_dir_for_completion(ctx: typer.Context) -> str:
    """--data-dir as typed so far on the command line being completed, else env, else default."""
    root = ctx.find_root()
    value = root.params.get("data_dir") if root.params else None
    return value or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR


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
