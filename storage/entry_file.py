"""Fixed-size-entry files that several processes share: the machinery of all three indexes.

`.index`, `.timeindex` and `.txnindex` have the same physical shape (big-endian entries,
no header) and the same multi-process rules: appends happen under a flock the *caller*
holds, readers take no lock and keep a parsed copy they refresh whenever the file
changed under them, and only the prefix of entries that obey the file's ordering rule
is trusted (a zero-filled Kafka tail or crash garbage is invisible to readers).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

from storage.descriptor_cache import CachedFile
from storage.durable import create_durably, fsync_fd, unlink_durably, write_all
from storage.errors import CorruptIndexError, KafkaStorageError, ReadOnlyStoreError
from storage.varint import INT32_MAX

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # log.index.size.max.bytes

Raw = tuple[int, ...]
Follows = Callable[[Raw | None, Raw], bool]
# Checks the ordering rule between every pair of neighbours in entries[start:] at once,
# at C speed; the per-entry `Follows` loop is only needed to find where a damaged run breaks.
RunCheck = Callable[[list[Raw], int], bool]


def increasing_columns(*rules: tuple[int, Callable[[int, int], bool]]) -> RunCheck:
    """A RunCheck requiring column c of each entry to relate to the next one by `op` (lt, le)."""

    def check(entries: list[Raw], start: int) -> bool:
        rows = entries[start:]
        if len(rows) < 2:
            return True
        columns = list(zip(*rows, strict=True))
        return all(all(map(op, columns[c], columns[c][1:])) for c, op in rules)

    return check


class IndexOrderError(ValueError):
    """An append that would not move the index forward.

    It subclasses ValueError because callers treat it as "another process already
    indexed this" and skip; keeping it a distinct type lets them do that without also
    swallowing real bugs.
    """


class EntryView(NamedTuple):
    """What a refresh found: every complete entry, how many of them are trustworthy, and the file length.

    `entries` is shared with the cache; read it, never mutate it.
    """

    entries: list[Raw]
    valid: int
    length: int


class EntryFile:
    """An append-only file of fixed-size big-endian entries that other processes may change.

    Readers trust only the prefix in which every entry `follows` the one before it, so a
    zero-filled preallocated tail (a file written by Kafka) or garbage after a crash is
    never served, and a trailing partial entry (a writer mid-write) is ignored. The
    parsed entries are cached under the file's (size, mtime); when the file grew, only
    the new tail is read, after checking that the last entry we knew is still there
    (so an in-place truncate-and-rewrite by another process forces a full re-read).
    Mutating methods assume the caller holds the partition's exclusive lock.
    """

    # the parse cache, reset by _forget
    _key: tuple[int, int] | None  # (size, mtime_ns) the cache was built from
    _raw: list[Raw]  # every complete entry
    _valid: int  # length of the trustworthy prefix of _raw
    _length: int  # bytes covered by the last parse
    _last_bytes: bytes  # bytes of the last complete entry, to notice rewrites

    def __init__(
        self,
        path: str,
        layout: struct.Struct,
        follows: Follows,
        *,
        rule: str,
        writable: bool,
        create: bool,
        run_check: RunCheck | None = None,
    ) -> None:
        self.path = path
        self.writable = writable
        self._layout = layout
        self._follows = follows
        self._run_check = run_check
        self._rule = rule
        self._file: CachedFile | None = None  # None until opened (the file may not exist yet)
        # Says whether the file can have been created since a look found it absent (`vouch_absence_by`).
        self._absence_key: Callable[[], object | None] | None = None
        self._absent_under: object | None = None  # the key under which the last open found no file
        # Says whether nobody else can have changed the file since this object last looked (`trust_while`).
        self._hold_token: Callable[[], object | None] | None = None
        self._fresh_under: object | None = None  # the token under which the cache was last made the file's
        self._closed = False
        self._forget()
        if writable and create:
            self._open(create=True)

    # ---- reading -------------------------------------------------------------

    def view(self) -> EntryView:
        """Bring the cache up to date with the disk and return it."""
        self._refresh()
        return EntryView(self._raw, self._valid, self._length)

    def check_shape(self, *, allow_partial: bool = False) -> EntryView:
        """Raise CorruptIndexError unless every byte of the file is a trustworthy entry."""
        view = self.view()
        size = self._layout.size
        if view.length % size and not allow_partial:
            raise CorruptIndexError(
                f"{self.path}: length {view.length} is not a multiple of the {size}-byte entry size"
            )
        if view.valid < len(view.entries):
            i = view.valid
            after = f" after entry {i - 1} {view.entries[i - 1]}" if i else ""
            raise CorruptIndexError(f"{self.path}: entry {i} {view.entries[i]} is out of order{after} ({self._rule})")
        return view

    @property
    def exists(self) -> bool:
        return os.path.exists(self.path)

    def look(self) -> tuple[EntryView, tuple[int, int] | None] | None:
        """One refresh: the cache, and the file's (size, mtime_ns) it was made from (None when the cache is
        not the whole file: it shrank while being read); None when there is no file."""
        view = self.view()
        return None if self._file is None else (view, self._key)

    def peek(self) -> tuple[int, Raw | None]:
        """(file length, last whole entry) read with one fstat and one pread, cache untouched.

        Opening a partition uses it to check sealed segments' indexes in constant time;
        their full parse waits until a lookup needs them.
        """
        self._check_open()
        if self._file is None and not self._open_existing():
            return 0, None
        with self._opened_file as fd:
            length = os.fstat(fd).st_size
        size = self._layout.size
        whole = length // size * size
        if whole == 0:
            return length, None
        data = self._read(whole - size, whole)
        return length, (self._layout.unpack(data) if len(data) == size else None)

    def probe(self, column: int, value: int) -> Raw | None:
        """The entry a bisection of the file in place finds as the last whose `column` is ≤ `value`.

        About log2(entries) preads of one entry each, cache untouched, nothing checked: in a
        damaged file the answer may be any entry, so only a caller that verifies what the entry
        points at may use it (recovery's locate, `LogSegment.probe_position`). It is how Kafka's
        mmapped indexes are searched; a parse and check of every entry waits for the first lookup.
        """
        self._check_open()
        if self._file is None and not self._open_existing():
            return None
        with self._opened_file as fd:
            length = os.fstat(fd).st_size
        size = self._layout.size
        lo, hi = 0, length // size  # entries [0, lo) are <= value, [hi, n) are > value
        found: Raw | None = None
        while lo < hi:
            mid = (lo + hi) // 2
            data = self._read(mid * size, (mid + 1) * size)
            if len(data) < size:
                hi = mid  # the file shrank under the search: what is left ends here
                continue
            entry = self._layout.unpack(data)
            if entry[column] <= value:
                found, lo = entry, mid + 1
            else:
                hi = mid
        return found

    # ---- writing (caller holds the partition lock) --------------------------

    def prepare_append(self) -> EntryView:
        """Refresh and make the end of the file a clean entry boundary.

        A torn partial entry can only be a crash or ENOSPC leftover here (the caller holds
        the lock, so nobody is mid-write) and carries no information, so it is cut. An
        untrustworthy entry is not cut: appending after it would hide the new entry from
        every reader, and only a rebuild from the segment can say what belongs there.
        """
        self._require_writable()
        view = self.view()
        if view.valid < len(view.entries):
            raise CorruptIndexError(f"{self.path}: index is damaged and must be rebuilt before appending")
        clean_length = len(view.entries) * self._layout.size
        if view.length != clean_length:
            self._ftruncate(clean_length)
            self._length = clean_length
            self._key = None
        return EntryView(self._raw, self._valid, self._length)

    def append(self, fields: Raw) -> None:
        """Write one entry at the end (`append_many` of one)."""
        self.append_many([fields])

    def append_many(self, entries: Sequence[Raw]) -> None:
        """Write `entries` at the end in one write; call `prepare_append` first and check their
        ordering against it and among themselves.

        One write for all of an append's entries, not one per entry: a group commit of 64
        batches indexes 64 of them, and each system call is a point where the producer's
        sender thread gives up the GIL and may wait a whole switch interval to get it back.
        The file is not fsynced: indexes are derived data rebuilt after a crash. If the
        write fails part-way, the torn bytes are cut so the file stays a whole number of
        entries (docs/reliability-scenarios.md rule 10).
        """
        self._require_writable()
        if not entries:
            return
        pack = self._layout.pack
        data = b"".join([pack(*fields) for fields in entries])
        if self._file is None:
            self._open(create=True)
        before = self._length
        cache_current = self._key is not None and self._key[0] == before
        token = self._token()
        fresh = token is not None and token is self._fresh_under  # the cache is the file, under this hold
        with self._opened_file as fd:
            try:
                write_all(fd, data)
            except KafkaStorageError:
                self._key = None
                try:
                    os.ftruncate(fd, before)
                except OSError:
                    pass  # the next prepare_append cuts the torn entries
                raise
            st = os.fstat(fd) if cache_current else None
        if st is not None:
            # The writer holds the partition lock, so what it just wrote is the whole new
            # tail: extend the cache instead of re-reading the file on the next call.
            intact = self._valid == len(self._raw)
            self._raw.extend([tuple(fields) for fields in entries])
            self._length = before + len(data)
            self._last_bytes = data[-self._layout.size :]
            if intact:
                self._extend_valid()
            self._key = (st.st_size, st.st_mtime_ns) if st.st_size == self._length else None
            self._fresh_under = token if fresh and self._key is not None else None
        else:
            self._key = None
            self._fresh_under = None

    def truncate_entries(self, count: int) -> None:
        """Keep the first `count` entries and nothing else (garbage and torn tails go too)."""
        self._require_writable()
        self._refresh()
        new_length = count * self._layout.size
        if self._file is None or new_length == self._length:
            return
        self._ftruncate(new_length)
        self._forget()

    def flush(self) -> None:
        """fsync; used at roll and close, and for an ABORT marker's `.txnindex` entry before the marker
        (`WriterHold.index_aborts`), never on a data append's path."""
        self._check_open()
        if self._file is not None:
            with self._file as fd:
                fsync_fd(fd)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._closed = True

    def delete(self) -> None:
        """Close and unlink durably, so a crash cannot resurrect an index of a removed segment."""
        if not self.writable:
            raise ReadOnlyStoreError(f"{self.path}: index was opened read-only")
        self.close()
        unlink_durably([self.path], os.path.dirname(self.path) or ".")

    # ---- internals -----------------------------------------------------------

    def _forget(self) -> None:
        self._fresh_under = None
        self._key = None
        self._raw = []
        self._valid = 0
        self._length = 0
        self._last_bytes = b""

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: index is closed")

    def _require_writable(self) -> None:
        self._check_open()
        if not self.writable:
            raise ReadOnlyStoreError(f"{self.path}: index was opened read-only")

    @property
    def _opened_file(self) -> CachedFile:
        """The file, for the steps that run once `_open` has succeeded (`with self._opened_file as fd:`)."""
        if self._file is None:
            raise KafkaStorageError(f"{self.path} is not open")
        return self._file

    def _open(self, *, create: bool) -> bool:
        """Open the file (through the descriptor cache, never through a link); False if absent and not created."""
        flags = os.O_RDWR | os.O_APPEND if self.writable else os.O_RDONLY
        try:
            self._file = CachedFile(self.path, flags)
        except FileNotFoundError:
            if not create:
                return False
            self._file = CachedFile(self.path, flags, fd=create_durably(self.path))
        except OSError as exc:
            raise KafkaStorageError(f"cannot open {self.path}: {exc.strerror}") from exc
        return True

    def vouch_absence_by(self, key: Callable[[], object | None]) -> None:
        """Let `key` say when a file found absent cannot have been created since: no open is tried then.

        `key()` is the directory's key as last looked at, or None when that key cannot vouch: the
        key must have been taken before any look it vouches for, and change whenever a file is
        created in the directory (PartitionLog's directory key, issue 26). A `.txnindex` is
        absent from most segments, and every abort lookup otherwise tried to open it again.
        """
        self._absence_key = key
        self._absent_under = None

    def trust_while(self, token: Callable[[], object | None]) -> None:
        """Let `token` say when the cache is still the file: no fstat is made then.

        `token()` is an object that stays the same for as long as nobody but this object can change the
        file (the partition's writer lock held by the thread asking, `PartitionLog.exclusive`), and None
        otherwise. A cache made (read or written) under a token is the file while `token()` returns that
        very object: the writer's catch-up looks once, and its own appends keep the cache current. An
        abort's entry was otherwise preceded by three fstats of a file the same hold had just read (issue 26).
        """
        self._hold_token = token
        self._fresh_under = None

    def _token(self) -> object | None:
        return None if self._hold_token is None else self._hold_token()

    def _open_existing(self) -> bool:
        """Open the file if it exists (False if not); not tried while the absence key vouches it is still absent."""
        vouch = self._absence_key
        key = None if vouch is None else vouch()
        if key is not None and key == self._absent_under:
            return False
        if self._open(create=False):
            self._absent_under = None
            return True
        self._absent_under = key  # taken before this open looked, so a later creation moves it
        return False

    def _refresh(self) -> None:
        self._check_open()
        token = self._token()
        if token is not None and token is self._fresh_under and self._key is not None:
            return  # looked (or written) under this very hold: nobody else can have changed the file since
        self._fresh_under = None
        if self._file is None and not self._open_existing():
            self._forget()
            return
        try:
            with self._opened_file as fd:
                st = os.fstat(fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot stat {self.path}: {exc.strerror}") from exc
        key = (st.st_size, st.st_mtime_ns)
        if key == self._key:
            self._fresh_under = token
            return
        if st.st_size < self._length or not self._tail_unchanged():
            self._forget()
        complete = self._parse_from(len(self._raw), st.st_size)
        self._key = key if complete else None
        self._fresh_under = token if complete else None

    def _tail_unchanged(self) -> bool:
        if not self._raw:
            return True
        size = self._layout.size
        start = (len(self._raw) - 1) * size
        return self._read(start, start + size) == self._last_bytes

    def _parse_from(self, first: int, end: int) -> bool:
        """Parse entries `first`… up to byte `end`; False if the file shrank while reading."""
        size = self._layout.size
        start = first * size
        data = self._read(start, end)
        whole = len(data) // size * size
        intact_before = self._valid == len(self._raw)
        self._raw.extend(self._layout.iter_unpack(data[:whole]))
        self._length = start + len(data)
        if whole:
            self._last_bytes = data[whole - size : whole]
        if intact_before:
            self._extend_valid()
        return self._length == end

    def _extend_valid(self) -> None:
        raw, i = self._raw, self._valid
        prev = raw[i - 1] if i else None
        if i < len(raw) and self._run_check is not None and self._follows(prev, raw[i]) and self._run_check(raw, i):
            self._valid = len(raw)  # the common case, an intact file: no per-entry Python loop
            return
        while i < len(raw) and self._follows(prev, raw[i]):
            prev = raw[i]
            i += 1
        self._valid = i

    def _read(self, start: int, end: int) -> bytes:
        chunks = []
        pos = start
        with self._opened_file as fd:
            while pos < end:
                try:
                    chunk = os.pread(fd, end - pos, pos)
                except OSError as exc:
                    raise KafkaStorageError(f"cannot read {self.path}: {exc.strerror}") from exc
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
        return b"".join(chunks)

    def _ftruncate(self, length: int) -> None:
        try:
            with self._opened_file as fd:
                os.ftruncate(fd, length)
        except OSError as exc:
            raise KafkaStorageError(f"cannot truncate {self.path}: {exc.strerror}") from exc


EntryT = TypeVar("EntryT")


class EntryFileIndex(Generic[EntryT]):
    """What the three index classes share: a base offset, an EntryFile, and its life cycle.

    Subclasses say how a raw entry reads at the API (`_convert`, an EntryT) and add their
    own lookups, appends and checks.
    """

    base_offset: int
    _file: EntryFile
    # The entries converted so far (`entries`), with the raw list they came from: the cache's list is only
    # ever extended, or replaced by a new one when the file is re-read from the start (EntryFile._forget),
    # so while it is the same object the converted prefix still holds.
    _converted: tuple[list[Raw], list[EntryT]] | None = None

    @property
    def path(self) -> str:
        return self._file.path

    def entries(self) -> list[EntryT]:
        """Every trustworthy entry, as the index's API presents it (a list of the caller's own).

        Each entry is converted once: a read_committed poll asks for a segment's aborts at least
        once, and converting the whole `.txnindex` every time was most of what such a poll cost more
        than a read_uncommitted one (issue 26).
        """
        view = self._file.view()
        raw = view.entries
        cached = self._converted
        if cached is None or cached[0] is not raw:
            cached = self._converted = (raw, [])
        done = cached[1]
        if len(done) < view.valid:
            convert = self._convert
            done.extend([convert(entry) for entry in raw[len(done) : view.valid]])
        return done[: view.valid]

    def stored_entries(self) -> list[object]:
        """Every whole entry in the file, trusted or not (a trailing partial entry is not one).

        The read-only parse for tools that report what is on disk (the dump tool, the
        integrity check); lookups use only the trusted prefix, `entries()`.
        """
        view = self._file.view()
        return [self._convert_stored(raw) for raw in view.entries]

    def file_length(self) -> int:
        """The file's length in bytes as last read (0 when it does not exist)."""
        return self._file.view().length

    def _convert(self, raw: Raw) -> EntryT:
        raise NotImplementedError

    def _convert_stored(self, raw: Raw) -> object:
        return self._convert(raw)

    def peek_last(self) -> tuple[int, EntryT | None]:
        """(file length, last entry as the API shows it) without parsing the whole file."""
        length, raw = self._file.peek()
        return length, (None if raw is None else self._convert(raw))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def delete(self) -> None:
        self._file.delete()

    def __len__(self) -> int:
        return self._file.view().valid

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def relative_offset(offset: int, base_offset: int) -> int:
    """Offsets are stored relative to the segment; one that does not fit an int32 cannot be indexed."""
    rel = offset - base_offset
    if not 0 <= rel <= INT32_MAX:
        raise OverflowError(f"offset {offset} does not fit an index of a segment based at {base_offset}")
    return rel
