"""Kafka's murmur2 key partitioning of a whole column of keys, in one native call.

`murmur2_partitions(keys, count)` returns the partition of every key among `count` (at least
1, else ValueError): Kafka's `toPositive(Utils.murmur2(key)) % count`, as the Java producer's
BuiltInPartitioner places a keyed record (storage/native/src/encoder.rs). Keys are bytes,
bytearray, memoryview, str (hashed as UTF-8) or None, which gets -1: keyless records are not
hashed, the caller places them by its sticky rule. Anything else is a TypeError naming its index.

This module is the native hash's public door: only storage imports the private
`storage._native`, so txlog.clients.partitioner (the producer's bulk path) comes through here.
"""

from __future__ import annotations

from storage._native import murmur2_partitions

__all__ = ["murmur2_partitions"]
