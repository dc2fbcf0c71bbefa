"""Which partition a keyed record goes to: Kafka's murmur2 (the default) or murmur3.

Kafka's Java producer (BuiltInPartitioner.partitionForKey) puts a keyed record on
`toPositive(murmur2(keyBytes)) % numPartitions`, where murmur2 is MurmurHash2, 32-bit,
little-endian words, seed 0x9747b28c (org.apache.kafka.common.utils.Utils.murmur2), and
toPositive clears the sign bit (`h & 0x7fffffff`, not `abs`). txlog does the same by
default, so a key lands on the partition a Java producer (or kafka-python, or librdkafka with
`partitioner=murmur2_random`, kcat's usual setting against Java clients) would pick: per-key
order and co-partitioning survive moving data between txlog and Kafka.

`murmur3` (mmh3, unsigned, modulo the partition count) was txlog's rule before; it stays as a
named choice so that a store written with it keeps its key placement.

Keyless records are not hashed: the producer keeps a sticky partition per batch
(txlog/clients/producer.py `_choose_partition`).

`partition_many` places a whole column of keys in one native call (storage.murmur2, the
same murmur2 in Rust) for the producer's bulk path. The per-key hash below stays pure Python
(no maintained C build of Kafka's murmur2 is on PyPI), so it is cached per key: a producer
sends the same keys over and over (user ids, order ids), and a cache hit costs one dict lookup.
The cache is bounded (16384 keys of at most 256 bytes, a few MiB at worst); when full it is
cleared, which costs nothing per hit and keeps memory flat for streams of unique keys.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

import mmh3

from storage.murmur2 import murmur2_partitions

PartitionerFn = Callable[[bytes, int], int]
"""(key bytes, partition count) -> partition; keyless records never reach it."""

MURMUR2 = "murmur2"
MURMUR3 = "murmur3"
DEFAULT_PARTITIONER = MURMUR2
PARTITIONER_NAMES = (MURMUR2, MURMUR3)

_SEED = 0x9747B28C  # Kafka's Utils.murmur2 seed
_M = 0x5BD1E995  # MurmurHash2's multiplier; R = 24 below
_MASK = 0xFFFFFFFF
_words = struct.Struct("<I").iter_unpack


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 of `data`, as Java's signed 32-bit int."""
    h = murmur2_unsigned(data)
    return h - 0x100000000 if h & 0x80000000 else h


def murmur2_unsigned(data: bytes) -> int:
    """Kafka's Utils.murmur2 of `data` as an unsigned 32-bit value (Python ints do not wrap,
    so every product is masked back to 32 bits, as Java's int arithmetic wraps)."""
    n = len(data)
    h = _SEED ^ n
    whole = n & ~3
    if whole:
        for (k,) in _words(data[:whole] if whole != n else data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) ^ ((k * _M) & _MASK)) & _MASK
    rest = n - whole
    if rest:  # the last 1-3 bytes, little-endian, then one multiply (Java's switch fall-through)
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h = ((h ^ data[whole]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def to_positive(h: int) -> int:
    """Kafka's Utils.toPositive: the sign bit cleared (not abs: -1 -> 0x7fffffff)."""
    return h & 0x7FFFFFFF


_CACHE_LIMIT = 1 << 14  # keys
_CACHE_KEY_BYTES = 256  # longer keys are hashed every time, so the cache stays small


def _cached(hash_positive: Callable[[bytes], int]) -> PartitionerFn:
    """A partitioner that remembers each key's positive hash (bounded: cleared when full)."""
    cache: dict[bytes, int] = {}

    def partition(key: bytes, count: int) -> int:
        h = cache.get(key)
        if h is None:
            h = hash_positive(key)
            if len(key) <= _CACHE_KEY_BYTES:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[key] = h
        return h % count

    return partition


def _murmur2_positive(key: bytes) -> int:
    return murmur2_unsigned(key) & 0x7FFFFFFF


def _murmur3_unsigned(key: bytes) -> int:
    return mmh3.hash(key, signed=False)


def named_partitioner(name: str) -> PartitionerFn:
    """A fresh (own-cache) partitioner for `name`, one of PARTITIONER_NAMES; ValueError otherwise."""
    if name == MURMUR2:
        return _cached(_murmur2_positive)
    if name == MURMUR3:
        return _cached(_murmur3_unsigned)
    raise ValueError(f"partitioner must be one of {', '.join(PARTITIONER_NAMES)} (or a callable), not {name!r}")


NO_PARTITION = -1
"""What partition_many returns for a None key: not hashed, the caller applies the sticky rule."""


def partition_many(keys: Iterable, count: int, name: str = DEFAULT_PARTITIONER) -> list[int]:
    """The partition of every key, as the per-key partitioner `name` places it.

    Keys are bytes, bytearray, memoryview, str (hashed as UTF-8) or None (NO_PARTITION);
    anything else is a TypeError naming its index. murmur2 runs natively, all keys in one
    call; murmur3 (kept only for stores written with it) loops the per-key function.
    """
    if count < 1:
        raise ValueError(f"the partition count must be at least 1, not {count}")
    if isinstance(keys, (str, bytes, bytearray, memoryview)):  # iterable, but as characters or ints
        raise TypeError(f"keys must be a sequence with a key per record, not a single {type(keys).__name__}")
    if name == MURMUR2:
        return murmur2_partitions(keys, count)
    one = named_partitioner(name)  # murmur3, or the ValueError for an unknown name
    return [NO_PARTITION if key is None else one(_key_bytes(key, index), count) for index, key in enumerate(keys)]


def _key_bytes(key, index: int) -> bytes:
    """A murmur3 key as the bytes hashed: str as UTF-8, any other buffer as its bytes."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    try:
        return bytes(memoryview(key))
    except TypeError:
        raise TypeError(
            f"key at index {index} must be bytes, bytearray, memoryview, str or None, not {type(key).__name__}"
        ) from None
