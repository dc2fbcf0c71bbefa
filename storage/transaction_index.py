"""The `.txnindex` file: the aborted transactions whose ABORT marker is in a segment (docs/kafka-formats.md §3.5, §5.6).

A read_committed reader needs to know which producers' data to drop without buffering
whole transactions; this file answers that per segment. Each entry is 34 bytes
(version:i16 = 0, producerId, firstOffset, lastOffset, lastStableOffset as i64), with no
header. Kafka creates the file only when the first abort lands in the segment, so it
is created lazily here too. The multi-process rules are those of `EntryFile` in
storage.offset_index.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import NamedTuple

from storage.entry_file import EntryFile, EntryFileIndex, EntryView, IndexOrderError, Raw
from storage.errors import CorruptIndexError

# Kafka's reader looks only at the first byte of the i16 version, so the second is
# skipped on read; packing 0 into this layout yields exactly the i16 0 on write.
_ENTRY = struct.Struct(">bxqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset
_VERSION = 0
_LAST = itemgetter(3)


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the ABORT marker
    last_stable_offset: int  # LSO right after the abort was applied (docs/kafka-formats.md §5.5)


class StoredAbortedTxn(NamedTuple):
    """An entry as the file holds it, version included: what `stored_entries()` reports."""

    version: int  # the first byte of the i16, as Kafka's reader takes it
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    @property
    def txn(self) -> AbortedTxn:
        return AbortedTxn(*self[1:])


def _plausible(version: int, first: int, last: int, lso: int) -> bool:
    """What every real entry satisfies: the LSO after an abort is an earlier txn's start or marker + 1."""
    return version == _VERSION and first <= last and lso <= last + 1


def _follows(prev: Raw | None, cur: Raw) -> bool:
    """Marker offsets strictly increase; the first entry that breaks this ends what readers trust."""
    version, _pid, first, last, lso = cur
    if not _plausible(version, first, last, lso):
        return False
    return prev is None or last > prev[3]


def _txn(raw: Raw) -> AbortedTxn:
    return AbortedTxn(*raw[1:])


def _last_trusted(view: EntryView) -> AbortedTxn | None:
    return _txn(view.entries[view.valid - 1]) if view.valid else None


def collect_aborted(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> tuple[list[AbortedTxn], bool]:
    """Entries overlapping [fetch_offset, upper_bound_offset), for a read_committed fetch.

    The flag says the search is complete: an entry whose LSO is already ≥ the upper
    bound proves no later segment can hold an abort of a txn that overlaps the range.
    Otherwise the caller continues into the next segment's index (docs/kafka-formats.md §5.6). A module
    function so that a list rebuilt from the log answers exactly as the file would.
    """
    found: list[AbortedTxn] = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return found, True
    return found, False


class TransactionIndex(EntryFileIndex[AbortedTxn]):
    """The `.txnindex` of one segment, shared by every process that opens the partition."""

    ENTRY_SIZE = _ENTRY.size

    def __init__(self, path: str, base_offset: int, *, writable: bool = True) -> None:
        self.base_offset = base_offset
        self._file = EntryFile(
            path,
            _ENTRY,
            _follows,
            rule="version 0, firstOffset ≤ lastOffset, lastStableOffset ≤ lastOffset + 1, "
            "lastOffset strictly increasing",
            writable=writable,
            create=False,
        )

    @property
    def exists(self) -> bool:
        """Whether the file is on disk now (another process may have created it)."""
        return self._file.exists

    def vouch_absence_by(self, key: Callable[[], object | None]) -> None:
        """Lookups skip opening a file found absent while `key` vouches nothing was created since (EntryFile's)."""
        self._file.vouch_absence_by(key)

    def trust_while(self, token: Callable[[], object | None]) -> None:
        """No fstat while `token` says the cache is still the file (EntryFile's)."""
        self._file.trust_while(token)

    def _convert(self, raw: Raw) -> AbortedTxn:
        return _txn(raw)

    def _convert_stored(self, raw: Raw) -> StoredAbortedTxn:
        return StoredAbortedTxn(*raw)

    def last_look(self) -> tuple[AbortedTxn | None, tuple[int, int] | None] | None:
        """One look at the file (EntryFile's `look`): its last trusted entry and its (size, mtime_ns), or
        None when there is no file."""
        looked = self._file.look()
        if looked is None:
            return None
        view, key = looked
        return _last_trusted(view), key

    def last_entry(self) -> AbortedTxn | None:
        return _last_trusted(self._file.view())

    def append(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction; creates the file on first use.

        IndexOrderError (a ValueError) when `last_offset` does not pass the last entry
        on disk, which another process may have written: then the abort is already
        indexed. An entry no correct writer produces is a plain ValueError.
        """
        pid, first, last, lso = entry
        if not _plausible(_VERSION, first, last, lso):
            raise ValueError(f"not a valid aborted transaction: {entry}")
        view = self._file.prepare_append()
        if view.valid:
            prev_last = view.entries[view.valid - 1][3]
            if last <= prev_last:
                raise IndexOrderError(f"last offset {last} is not after the last indexed abort at {prev_last}")
        try:
            self._file.append((_VERSION, pid, first, last, lso))
        except struct.error as exc:
            raise OverflowError(f"{entry} does not fit the int64 fields: {exc}") from exc

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), for a read_committed fetch."""
        return collect_aborted(self.entries(), fetch_offset, upper_bound_offset)

    def count_below(self, offset: int) -> int:
        """How many trusted entries have their ABORT marker below `offset` (a bisection, nothing converted)."""
        view = self._file.view()
        return bisect_left(view.entries, offset, hi=view.valid, key=_LAST)

    def entry_at(self, last_offset: int) -> AbortedTxn | None:
        """The trusted entry whose ABORT marker is at `last_offset`, found by bisection."""
        view = self._file.view()
        i = bisect_left(view.entries, last_offset, hi=view.valid, key=_LAST)
        return _txn(view.entries[i]) if i < view.valid and view.entries[i][3] == last_offset else None

    def stored_count(self) -> int:
        """Whole entries in the file, trusted or not: more than len(self) means damage hides some."""
        return len(self._file.view().entries)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Replace every entry by `entries` (a rebuild from the log) and fsync the file.

        Done in place, like the other index rebuilds, so other processes' open
        descriptors see the new entries (their caches notice the rewrite).
        """
        self.reset()
        for entry in entries:
            self.append(entry)
        self.flush()

    def truncate_to(self, offset: int) -> None:
        """Drop the first entry with last_offset ≥ `offset` and all after it (the log is cut there)."""
        view = self._file.view()
        keep = bisect_left(view.entries, offset, hi=view.valid, key=_LAST)
        if keep == len(view.entries) and view.length == keep * self.ENTRY_SIZE:
            return  # every entry is below `offset` and no torn tail follows: nothing to cut (and no second look)
        self._file.truncate_entries(keep)

    def reset(self) -> None:
        self._file.truncate_entries(0)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless every entry is trustworthy and belongs to this segment.

        A trailing partial entry is tolerated, as Kafka does: it is ignored by readers
        and cut by the next append.
        """
        view = self._file.check_shape(allow_partial=True)
        for raw in view.entries:
            if raw[3] < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: last offset {raw[3]} of {_txn(raw)} is below the segment base {self.base_offset}"
                )
