"""The `.index` file: a sparse map from offsets to byte positions in a segment (docs/kafka-formats.md §3.3).

Kafka keeps the active segment's index as a preallocated, memory-mapped file owned by
one broker. txlog has no broker: several processes open the same partition, appends
happen under a flock the *caller* holds, and readers take no lock. So the index here is
a plain append-only file whose length is always `entries × 8` (what Kafka leaves after
trimming at roll or close), built on the shared `EntryFile` machinery.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from operator import itemgetter, lt

from storage.entry_file import (
    DEFAULT_MAX_INDEX_SIZE,
    EntryFile,
    EntryFileIndex,
    IndexOrderError,
    Raw,
    increasing_columns,
    relative_offset,
)
from storage.errors import CorruptIndexError
from storage.varint import INT32_MAX

# ---- the offset index ---------------------------------------------------------

_ENTRY = struct.Struct(">ii")  # relativeOffset, position
_REL = itemgetter(0)


def _follows(prev: Raw | None, cur: Raw) -> bool:
    """Offsets and positions only grow; the first entry that breaks this ends the index (zero tail)."""
    rel, pos = cur
    if prev is None:
        return rel >= 0 and pos >= 0
    return rel > prev[0] and pos > prev[1]


# One check shared by every index (a closure per segment was two more objects for the GC to walk).
_RUN_CHECK = increasing_columns((0, lt), (1, lt))


class OffsetIndex(EntryFileIndex[tuple[int, int]]):
    """The `.index` of one segment, shared by every process that opens the partition."""

    ENTRY_SIZE = _ENTRY.size

    def __init__(
        self,
        path: str,
        base_offset: int,
        *,
        writable: bool = True,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    ) -> None:
        self.base_offset = base_offset
        self.max_entries = max_index_size // _ENTRY.size
        self._file = EntryFile(
            path,
            _ENTRY,
            _follows,
            rule="relative offsets and positions must strictly increase",
            writable=writable,
            create=True,
            run_check=_RUN_CHECK,
        )

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Where to start scanning the log for `target_offset`: (base, 0) if nothing indexed precedes it."""
        view = self._file.view()
        i = bisect_right(view.entries, target_offset - self.base_offset, hi=view.valid, key=_REL)
        if i == 0:
            return (self.base_offset, 0)
        return self._convert(view.entries[i - 1])

    def probe(self, target_offset: int) -> tuple[int, int]:
        """`lookup`'s answer from a bisection of the file in place (EntryFile.probe): no parse, nothing checked.

        A damaged file may answer any of its entries, so the caller checks the position (`LogSegment.probe_position`).
        """
        rel = target_offset - self.base_offset
        raw = self._file.probe(0, rel) if rel >= 0 else None
        return (self.base_offset, 0) if raw is None else self._convert(raw)

    def last_entry(self) -> tuple[int, int] | None:
        view = self._file.view()
        return self._convert(view.entries[view.valid - 1]) if view.valid else None

    def append(self, offset: int, position: int) -> None:
        """Index `offset` (the last offset of a batch or chunk) at byte `position` of its start.

        Ordering is checked against the file, not against what this object saw last: another
        process may have appended since. IndexOrderError then means it is already indexed.
        """
        self.append_many([(offset, position)])

    def append_many(self, entries: list[tuple[int, int]]) -> None:
        """`append` of each (offset, position) in turn, written at once (one write, one fstat);
        IndexOrderError (nothing written) if any would break the order."""
        if not entries:
            return
        view = self._file.prepare_append()
        last = view.entries[view.valid - 1] if view.valid else None
        raw = []
        for offset, position in entries:
            rel = relative_offset(offset, self.base_offset)
            if not 0 <= position <= INT32_MAX:
                raise OverflowError(f"position {position} does not fit an int32")
            if last is not None:
                last_rel, last_pos = last
                if rel <= last_rel:
                    raise IndexOrderError(
                        f"offset {offset} is not after the last indexed offset {self.base_offset + last_rel}"
                    )
                if position <= last_pos:
                    raise IndexOrderError(f"position {position} is not after the last indexed position {last_pos}")
            last = (rel, position)
            raw.append(last)
        self._file.append_many(raw)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset ≥ `offset`, because the log is being cut there."""
        view = self._file.view()
        keep = bisect_left(view.entries, offset - self.base_offset, hi=view.valid, key=_REL)
        self._file.truncate_entries(keep)

    def reset(self) -> None:
        self._file.truncate_entries(0)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError if the file is not exactly what a correct writer leaves.

        Run by the segment layer on open; a failure means "rebuild from the log".
        `log_size` adds the bounds check: every position must start inside the log.
        """
        view = self._file.check_shape()
        if log_size is not None and view.valid:
            rel, pos = view.entries[view.valid - 1]  # positions increase, so the last is the largest
            if pos >= log_size:
                raise CorruptIndexError(
                    f"{self.path}: entry for offset {self.base_offset + rel} points at byte {pos}, "
                    f"beyond the log size {log_size}"
                )

    def is_full(self) -> bool:
        """Kafka rolls the segment when its index is full (docs/kafka-formats.md §3.2).

        The limit keeps files Kafka-sized."""
        return len(self) >= self.max_entries

    def _convert(self, raw: Raw) -> tuple[int, int]:
        return (self.base_offset + raw[0], raw[1])
