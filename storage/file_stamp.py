"""When a file's stat says "unchanged": the coarse clock that stamps mtimes, and keys that can vouch for it.

A view that rereads a small file only when it changed (a checkpoint another process replaces)
keeps a key from `os.stat` and compares. Two things make an equal key lie:

* mtimes come from a coarse clock (one tick is a few ms; some file systems keep whole seconds),
  so a change made in the same tick as the look leaves the mtime as it was ("racy git");
* device and inode name no file once it is gone: ext4 gives a freed inode number to the next
  file made, and a checkpoint replaced by rename twice frees its first number and takes it
  back (docs/reliability-scenarios.md 73, 88). In the same tick, with as many digits, the third
  version has the first one's inode, mtime and size.

Both lies need a file stamped in the tick the key was taken in: a file made after a look that
began once the clock had left the key's mtime has a later mtime. So a key is kept only when it
was taken that late (`change_key`), and a look that comes too soon reads the file again. This
costs the stat alone, where the inode's generation (storage/descriptor_cache.py, which compares
it on a reopen) would cost an open, and holds on file systems that keep no generation.
"""

from __future__ import annotations

import os
import time

__all__ = ["change_key", "racy", "stamp_clock_ns"]

_CLOCK_REALTIME_COARSE = 5  # Linux's id of the clock file times are stamped from; Python names only the fine ones


def stamp_clock_ns() -> int:
    """Now, by the clock the kernel stamps a file's mtime from (CLOCK_REALTIME_COARSE on Linux).

    Any change made from now on gets an mtime at or past this; one made earlier this tick may
    have the same mtime as one made later in it. Elsewhere the fine clock less two seconds,
    the coarsest file times in use (FAT), so that every key a look takes counts as too fresh.
    """
    try:
        return time.clock_gettime_ns(_CLOCK_REALTIME_COARSE)
    except (AttributeError, OSError):
        return time.time_ns() - 2_000_000_000


def racy(mtime_ns: int, looked_ns: int) -> bool:
    """Whether a look begun at `looked_ns` (`stamp_clock_ns`) may have missed a change stamped `mtime_ns` too.

    A later change could carry the same mtime while the stamping clock has not left the mtime's
    tick; on a file system that keeps whole seconds (ext3, small ext4 inodes; FAT keeps two),
    while it has not left the mtime's two seconds.
    """
    if mtime_ns % 1_000_000_000 == 0:
        return looked_ns < mtime_ns + 2_000_000_000
    return looked_ns <= mtime_ns


def change_key(path: str) -> tuple[int, int, int, int] | None:
    """(device, inode, mtime, size) of the file `path` names, to compare with the key of a later look;
    None when a later file could have the same key (`racy`): the caller then reads the file again.

    FileNotFoundError when nothing has the name.
    """
    looked = stamp_clock_ns()
    st = os.stat(path)
    if racy(st.st_mtime_ns, looked):
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size
