"""The one way txlog opens a file inside a store: never through a symbolic link.

A store is a directory that other software (a backup tool, an operator, a hostile file
someone planted) may also touch. A link in it would turn txlog's in-place writes into writes
elsewhere: a `txlog.high-watermark` linked to an outside file had its first bytes
overwritten, a linked `.log` had its target truncated and appended to (issue 23, item 3).
So every file of a store is opened with O_NOFOLLOW on its last component, for reads as well
as writes (a reader serving a link's target would serve bytes that are not the store's), and
a store or partition directory holding a link, or a partition directory that is one, is
refused when it is opened (`refuse_links`; the store root itself is the user's path and may
be a link). Either case is one KafkaStorageError naming the link, as Kafka reports a log dir
it cannot use.

Atomic replaces keep their temporary file beside the target (storage/durable.py), so a
rename never leaves the directory; renaming over a link replaces the link, never its target.
"""

from __future__ import annotations

import errno
import os

from storage.errors import KafkaStorageError

__all__ = ["linked_file_error", "open_no_follow", "read_no_follow", "refuse_linked_dir", "refuse_links"]

# O_CLOEXEC: a store file's descriptor must not leak into the commands `txlog process` runs.
_ALWAYS = os.O_NOFOLLOW | os.O_CLOEXEC


def linked_file_error(path: str) -> KafkaStorageError:
    """The error for a store file or partition directory that is a symbolic link."""
    return KafkaStorageError(
        f"{path} is a symbolic link; txlog follows no link inside a store (a write through it would "
        "land outside the store): put the file or directory itself there"
    )


def open_no_follow(path: str, flags: int, mode: int = 0o644) -> int:
    """os.open of a store file that refuses a link as the last component (KafkaStorageError).

    Every other OSError passes through unchanged (FileNotFoundError means the same to the
    callers as before: absent, or removed by another process).
    """
    try:
        return os.open(path, flags | _ALWAYS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise linked_file_error(path) from None
        raise


def read_no_follow(path: str, limit: int = -1) -> bytes:
    """The whole file (at most `limit` bytes when it is not -1), opened with `open_no_follow`."""
    fd = open_no_follow(path, os.O_RDONLY)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


def refuse_linked_dir(path: str) -> None:
    """Raise KafkaStorageError when `path` (a directory of the store) is a symbolic link; absent is fine."""
    if os.path.islink(path):
        raise linked_file_error(path)


def refuse_links(directory: str, *, itself: bool = True) -> None:
    """Raise KafkaStorageError naming a symbolic link among `directory`'s entries (or `directory`, if `itself`).

    Checked when a store or a partition is opened, so a link is reported at once whichever
    file it replaces, even one txlog would only open later or never (Kafka's checkpoints);
    the entries' types come with the listing (d_type), so it costs one directory read. A
    missing directory holds no link.
    """
    if itself:
        refuse_linked_dir(directory)
    try:
        with os.scandir(directory) as entries:
            linked = sorted(entry.path for entry in entries if entry.is_symlink())
    except FileNotFoundError:
        return
    except OSError as exc:
        raise KafkaStorageError(f"cannot list {directory}: {exc.strerror}") from exc
    if linked:
        raise linked_file_error(linked[0])
