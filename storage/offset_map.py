"""The cleaner's key map (Kafka's SkimpyOffsetMap): key hash -> latest offset, bounded by the dedupe buffer.

Kafka keeps a 16-byte MD5 hash of each key and an 8-byte offset per slot, in a buffer of
`log.cleaner.dedupe.buffer.size` bytes (128 MiB by default) split among the cleaner threads,
and stops adding keys once `slots * log.cleaner.io.buffer.load.factor` (0.9) are used: the
cleaner then cleans up to where the map got and leaves the rest for another pass. This map
takes the same number of entries from the same buffer size, so it fills (and the cleaner
makes its passes) where Kafka's does; a Python entry costs more bytes than Kafka's 24, so
the memory is bounded by the same count, not the same bytes. Two keys with the same MD5 are
one key here, as in Kafka.
"""

from __future__ import annotations

import hashlib

from storage.varint import INT32_MAX

#: Kafka's defaults: log.cleaner.dedupe.buffer.size, log.cleaner.threads, log.cleaner.io.buffer.load.factor.
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
DEFAULT_CLEANER_THREADS = 1
DEFAULT_LOAD_FACTOR = 0.9
HASH_SIZE = 16  # MD5
BYTES_PER_ENTRY = HASH_SIZE + 8


def cleaner_buffer_size(
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE, threads: int = DEFAULT_CLEANER_THREADS
) -> int:
    """One cleaner's share of the dedupe buffer, as Kafka's LogCleaner splits it (at most 2 GiB)."""
    return min(dedupe_buffer_size // threads, INT32_MAX)


class OffsetMap:
    """Hashes of keys -> the latest offset seen for them, at most `capacity` entries."""

    def __init__(self, memory: int, load_factor: float = DEFAULT_LOAD_FACTOR):
        self.slots = memory // BYTES_PER_ENTRY
        # Kafka's Cleaner refuses a map that cannot hold even one key: cleaning would never progress.
        if self.slots * load_factor <= 1:
            raise ValueError(
                f"a dedupe buffer of {memory} bytes cannot hold even one key; increase log.cleaner.dedupe.buffer.size"
            )
        self.capacity = int(self.slots * load_factor)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) >= self.capacity

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1

    @staticmethod
    def _hash(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    def put(self, key: bytes, offset: int) -> None:
        """Record `offset` as the latest for `key` (the caller checks `full` before a new key)."""
        self._map[self._hash(key)] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset stored for `key`, or -1."""
        return self._map.get(self._hash(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        """Where the map's coverage ends (a batch's last offset, or a segment's end over a gap)."""
        self.latest_offset = offset

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots
