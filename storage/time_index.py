"""The `.timeindex` file: where in a segment the timestamps pass a given value (docs/kafka-formats.md §3.4).

Entries are (timestamp, relativeOffset): "by this offset the segment had seen a batch
with this max timestamp". Timestamps strictly increase and offsets never go back, which
is what lets a reader binary-search it and what tells a reader where a zero-filled tail
(a preallocated file written by Kafka) begins. The multi-process rules are those of
`EntryFile` in storage.offset_index.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from operator import itemgetter, le, lt

from storage.entry_file import (
    DEFAULT_MAX_INDEX_SIZE,
    EntryFile,
    EntryFileIndex,
    Raw,
    increasing_columns,
    relative_offset,
)
from storage.errors import CorruptIndexError
from storage.varint import INT64_MAX, INT64_MIN

NO_TIMESTAMP = -1

_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
_TS = itemgetter(0)
_REL = itemgetter(1)


def _follows(prev: Raw | None, cur: Raw) -> bool:
    """The same rule `maybe_append` enforces; an empty index behaves as if it ended at (-1, base)."""
    ts, rel = cur
    prev_ts, prev_rel = prev if prev is not None else (NO_TIMESTAMP, 0)
    return ts > prev_ts and rel >= prev_rel


# One check shared by every index (a closure per segment was two more objects for the GC to walk).
_RUN_CHECK = increasing_columns((0, lt), (1, le))


class TimeIndex(EntryFileIndex[tuple[int, int]]):
    """The `.timeindex` of one segment, shared by every process that opens the partition."""

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
            rule="timestamps must strictly increase and offsets must not decrease",
            writable=writable,
            create=True,
            run_check=_RUN_CHECK,
        )

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The greatest entry with timestamp ≤ `timestamp`, or (-1, base) — scan the log from its offset."""
        view = self._file.view()
        i = bisect_right(view.entries, timestamp, hi=view.valid, key=_TS)
        if i == 0:
            return (NO_TIMESTAMP, self.base_offset)
        return self._convert(view.entries[i - 1])

    def last_entry(self) -> tuple[int, int] | None:
        view = self._file.view()
        return self._convert(view.entries[view.valid - 1]) if view.valid else None

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Record that the segment reached `timestamp` by `offset`, if that is news.

        Like Kafka, only a timestamp beyond the last one on disk (or beyond -1 when the
        index is empty) is worth an entry. An offset behind the last one on disk means
        another process already indexed further, so nothing is written either. Returns
        whether an entry was written. Fullness is not enforced here: the files are not
        preallocated, and the segment layer rolls on `is_full()` as Kafka does.
        """
        return self.maybe_append_many([(timestamp, offset)]) == 1

    def maybe_append_many(self, entries: list[tuple[int, int]]) -> int:
        """`maybe_append` of each (timestamp, offset) in turn, each judged against the ones
        before it, the news written at once (one write, one fstat); how many were written."""
        if not entries:
            return 0
        view = self._file.prepare_append()
        last = view.entries[view.valid - 1] if view.valid else (NO_TIMESTAMP, 0)
        news = []
        for timestamp, offset in entries:
            rel = relative_offset(offset, self.base_offset)
            if not INT64_MIN <= timestamp <= INT64_MAX:
                raise OverflowError(f"timestamp {timestamp} does not fit an int64")
            if timestamp <= last[0] or rel < last[1]:
                continue
            last = (timestamp, rel)
            news.append(last)
        self._file.append_many(news)
        return len(news)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is ≥ `offset`, because the log is being cut there."""
        view = self._file.view()
        keep = bisect_left(view.entries, offset - self.base_offset, hi=view.valid, key=_REL)
        self._file.truncate_entries(keep)

    def reset(self) -> None:
        self._file.truncate_entries(0)

    def sanity_check(self, *, next_offset: int | None = None) -> None:
        """Raise CorruptIndexError unless the file is exactly what a correct writer leaves.

        `next_offset` (the segment's exclusive end) adds the bounds check: no entry may name
        an offset the segment does not hold. Keyword-only so that it cannot be confused
        with the offset index's `log_size`.
        """
        view = self._file.check_shape()
        if next_offset is not None and view.valid:
            ts, rel = view.entries[view.valid - 1]
            if self.base_offset + rel >= next_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry ({ts}, {self.base_offset + rel}) is beyond the segment end {next_offset}"
                )

    def is_full(self) -> bool:
        """Full one slot early: Kafka keeps the last slot for the entry forced in at roll."""
        return len(self) >= self.max_entries - 1

    def _convert(self, raw: Raw) -> tuple[int, int]:
        return (raw[0], self.base_offset + raw[1])
