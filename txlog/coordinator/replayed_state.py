"""State kept in step with an internal partition: load a snapshot, then replay the tail.

The coordinator's transaction metadata and the groups' committed offsets are both the
replay of a partition's records (last value per key wins). Replaying from offset 0 on
every open would cost O(history); instead each process that catches up far enough
writes a snapshot of the replayed state with the offset it covers, and the next open
loads it and replays only what came after, so opening costs O(live keys).

A snapshot is only used if the offset it covers is inside the log (docs/reliability-scenarios.md rule 5):
a log cut back below it (power loss) makes it stale, and the state is rebuilt from the
log start instead.

Both internal topics are compacted, and a cleaning may drop a tombstone or a transaction marker
once its delete horizon (delete.retention.ms after the cleaning that first kept it) has passed.
State replayed up to offset N (a snapshot, or a process that has not caught up in a while)
plus the cleaned log from N on would then miss that tombstone, and the deleted key would come
back. A drop needs two cleanings of the batch, the first of which leaves the cleaner
checkpoint (`cleaner-offset-checkpoint`, the first offset not yet cleaned) above it. So state
at N is only extended from N while the partition's checkpoint is at or below N; once the
cleaner has passed it, the state is rebuilt from the log start, which after a cleaning costs
about the live keys (docs/DESIGN.md §7, "Coordinator state and compaction"). A snapshot also
records the checkpoint it was written under: a checkpoint found lower than that was lost or
reset, and the snapshot is not trusted either.
"""

from __future__ import annotations

import glob
import json
import os
import uuid
import zlib
from collections.abc import Callable
from typing import Any

from storage.checkpoint import read_offset_checkpoint
from storage.durable import atomic_write
from storage.errors import KafkaError, KafkaStorageError, OffsetOutOfRangeError
from storage.file_stamp import change_key
from storage.log_cleaner import CLEANER_CHECKPOINT
from storage.partition_log import PartitionLog
from storage.records import RecordBatch
from storage.safe_open import read_no_follow

SNAPSHOT_EVERY = 1000  # batches replayed past the last snapshot before a new one is written
READ_BYTES = 1 << 20
PART_SUFFIX = ".part"


class ReplayedPartition:
    """Drives `apply` over every batch of `log` once, in order, across snapshots and other writers.

    `apply(batch)` folds one batch (data or control) into the owner's state; `dump()`
    returns that state as JSON-able data and `load(data)` restores it (`load(None)`
    resets to empty).
    """

    def __init__(
        self,
        log: PartitionLog,
        snapshot_name: str,
        *,
        apply: Callable[[RecordBatch], None],
        dump: Callable[[], Any],
        load: Callable[[Any], None],
        snapshot_every: int = SNAPSHOT_EVERY,
    ):
        self.log = log
        self.path = os.path.join(log.directory, f"{snapshot_name}.json")
        self._apply, self._dump, self._load = apply, dump, load
        self._snapshot_every = snapshot_every
        self.position = log.log_start_offset
        self._snapshot_offset = -1
        self._cleaner_file: tuple[int, int, int, int] | None = None  # `change_key` of the file last read
        self._cleaned_to = 0
        self._load_snapshot()

    # ---- snapshot -----------------------------------------------------------------------------

    def _load_snapshot(self) -> None:
        snap = _read_snapshot(self.path)
        end = self.log.log_end_offset
        cleaned = self.cleaned_up_to()
        if (
            snap is not None
            and cleaned is not None
            and self.log.log_start_offset <= snap["offset"] <= end
            and snap.get("cleaned", 0) <= cleaned <= snap["offset"]
        ):
            self._load(snap["state"])
            self.position = self._snapshot_offset = snap["offset"]
        else:
            self._reset()

    def _reset(self) -> None:
        self._load(None)
        self.position = self.log.log_start_offset
        self._snapshot_offset = -1

    def maybe_snapshot(self, *, force: bool = False) -> None:
        """Write a snapshot if enough was replayed since the last one (writable views only).

        A snapshot only saves replay time, so failing to write one (disk full, a race with
        another process's snapshot) is not an error. Each writer uses its own temp name:
        two processes may snapshot the same partition at once, and a partition open
        deletes `*.tmp` files.
        """
        if self.log.read_only:
            return
        behind = self.position - max(self._snapshot_offset, 0)
        if self.position == self._snapshot_offset or not (force or behind >= self._snapshot_every):
            return
        state = self._dump()
        cleaned = self.cleaned_up_to()
        if cleaned is None or cleaned > self.position:
            return  # the cleaner passed this state while it was replayed: catch_up rebuilds it first
        body = {
            "offset": self.position,
            "state": state,
            "cleaned": cleaned,
            "crc": _crc(self.position, state, cleaned),
        }
        try:
            self._remove_stale_parts()
            atomic_write(
                self.path,
                json.dumps(body, separators=(",", ":")).encode(),
                tmp_suffix=f".{os.getpid()}.{uuid.uuid4().hex[:8]}{PART_SUFFIX}",
            )
        except (OSError, KafkaStorageError):
            return
        self._snapshot_offset = self.position

    def _remove_stale_parts(self) -> None:
        """Temp files of writers that died mid-snapshot (their pid is gone)."""
        for part in glob.glob(glob.escape(self.path) + ".*" + PART_SUFFIX):
            try:
                os.kill(int(part[len(self.path) + 1 :].split(".")[0]), 0)
            except ProcessLookupError:
                try:
                    os.unlink(part)
                except OSError:
                    pass
            except (ValueError, PermissionError):
                pass

    def cleaned_up_to(self) -> int | None:
        """The partition's cleaner checkpoint: offsets below it have been cleaned (0: never);
        None when the file cannot be read (then no snapshot is trusted).

        Read again only when the file changed (a stat per call): `catch_up` asks on every use.
        """
        path = os.path.join(os.path.dirname(self.log.directory), CLEANER_CHECKPOINT)
        try:
            # Not inode, mtime and size alone: every cleaned group rewrites this file (by rename), and
            # two groups in one clock tick may give its first version's inode number back, with the same
            # mtime and size (storage/file_stamp.py): the cleaner's progress past `position` went unseen.
            key = change_key(path)
        except FileNotFoundError:
            self._cleaner_file, self._cleaned_to = None, 0
            return 0
        except OSError:
            return None
        if key is None or key != self._cleaner_file:
            try:
                offsets = read_offset_checkpoint(path)
            except (OSError, KafkaError):
                return None
            self._cleaner_file = key
            self._cleaned_to = offsets.get((self.log.topic, self.log.partition), 0)
        return self._cleaned_to

    # ---- replay -------------------------------------------------------------------------------

    def catch_up(self) -> int:
        """Apply every whole batch past `position`; returns how many batches were applied."""
        applied = 0
        cleaned = self.cleaned_up_to()
        # The cleaner's comparison first: the log start costs a look at the directory, asked only
        # when the cleaner has passed `position` (almost never: every transaction step goes here).
        if (
            cleaned if cleaned is not None else self._cleaned_to
        ) > self.position and self.position > self.log.log_start_offset:
            # the cleaner went past what was applied: what follows may lack tombstones (module doc);
            # a replay from the log start reads the cleaned log whole, which is always right
            self._reset()
        while True:
            end = self.log.log_end_offset
            if self.position > end:  # the log was cut back below what we applied: start over
                self._reset()
            if self.position >= end:
                return applied
            try:
                batches = self.log.read(self.position, READ_BYTES)
            except OffsetOutOfRangeError:
                self._reset()
                continue
            if not batches:
                return applied
            for batch in batches:
                if batch.last_offset < self.position:
                    continue
                self._apply(batch)
                self.position = batch.last_offset + 1
                applied += 1


def _crc(offset: int, state: Any, cleaned: int | None = None) -> int:
    """Over the offset, the state and (snapshots written since compaction) the cleaner checkpoint."""
    covered = [offset, state] if cleaned is None else [offset, state, cleaned]
    return zlib.crc32(json.dumps(covered, sort_keys=True, separators=(",", ":")).encode())


def _read_snapshot(path: str) -> dict | None:
    """The snapshot, or None when it is missing, torn or fails its CRC (then the log is replayed)."""
    try:
        body = json.loads(read_no_follow(path))  # a link is refused (KafkaStorageError), not replayed around
        if (
            isinstance(body, dict)
            and isinstance(body.get("offset"), int)
            and isinstance(body.get("cleaned", 0), int)
            and body.get("crc") == _crc(body["offset"], body["state"], body.get("cleaned"))
        ):
            return body
    except (OSError, ValueError, KeyError):
        pass
    return None
