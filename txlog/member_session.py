"""A group member's session: how other processes tell a live member from a dead or stalled one.

Kafka's coordinator keeps each member's session in memory and expires it when no
heartbeat came within `session.timeout.ms`, or no poll within `max.poll.interval.ms`.
With no broker the session has to live where every process can see it, and it must
not grow the log (a heartbeat every few seconds per member would), so it is a small
file per member under `<store>/txlog-group-sessions/`:

* the member holds an exclusive flock on it for as long as it is in the group. The
  kernel drops the lock the moment the process dies (kill -9 included), so a
  coordinator that can take the lock knows the member is dead at once, without
  waiting out the session timeout;
* the file holds the member's last heartbeat and last poll (wall-clock ms), rewritten
  in place by the member's heartbeat thread. A paused process (SIGSTOP) keeps its lock
  but stops heartbeating, so it is expired by the timeouts, as in Kafka.

The file is ephemeral state, never fsynced: after a power loss every member is dead
anyway (no process holds a lock), which is exactly what the files then say.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from dataclasses import dataclass

from storage.safe_open import open_no_follow, refuse_linked_dir

SESSIONS_DIR = "txlog-group-sessions"
_FORMAT = ">qq"  # last heartbeat ms, last poll ms
_SIZE = struct.calcsize(_FORMAT)


def session_path(root: str, group: str, member_id: str) -> str:
    """The session file of a member; names are hashed so any group or member id is a safe file name."""
    import hashlib  # here: only a group member needs it, and its import (OpenSSL) costs ~2.5 ms of every start

    digest = hashlib.sha256(f"{group}\0{member_id}".encode()).hexdigest()[:32]
    return os.path.join(root, SESSIONS_DIR, f"{digest}.session")


@dataclass(frozen=True, slots=True)
class SessionView:
    """What another process sees of a member's session."""

    exists: bool
    alive: bool  # the member's process still holds the lock
    heartbeat_ms: int
    poll_ms: int


class MemberSession:
    """The member's own side: hold the lock, write heartbeat and poll times."""

    def __init__(self, root: str, group: str, member_id: str):
        self.path = session_path(root, group, member_id)
        refuse_linked_dir(os.path.dirname(self.path))  # a store's files are never reached through a link
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise
        self.poll_ms = 0

    def beat(self, now_ms: int, *, polled: bool = False) -> None:
        """Record a heartbeat (and a poll): one pwrite, no fsync."""
        if self._fd < 0:
            return
        if polled:
            self.poll_ms = now_ms
        os.pwrite(self._fd, struct.pack(_FORMAT, now_ms, self.poll_ms or now_ms), 0)

    def close(self, *, remove: bool) -> None:
        """Release the lock; `remove` deletes the file first (a member that left needs none)."""
        if self._fd < 0:
            return
        if remove:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(self._fd)
        self._fd = -1


def look(root: str, group: str, member_id: str) -> SessionView:
    """Probe another member's session: is its process alive, and when did it last beat and poll?"""
    path = session_path(root, group, member_id)
    try:
        fd = open_no_follow(path, os.O_RDONLY)
    except FileNotFoundError:
        return SessionView(False, False, 0, 0)
    try:
        data = os.pread(fd, _SIZE, 0)
        heartbeat, poll = struct.unpack(_FORMAT, data) if len(data) == _SIZE else (0, 0)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            return SessionView(True, True, heartbeat, poll)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return SessionView(True, False, heartbeat, poll)
    finally:
        os.close(fd)


def remove(root: str, group: str, member_id: str) -> None:
    """Delete the session file of a member that is gone (only when its process is dead)."""
    try:
        os.unlink(session_path(root, group, member_id))
    except OSError:
        pass
