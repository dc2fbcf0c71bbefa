"""A simulated power loss, for crash tests that kill their workers first (not a test module).

After a SIGKILL the page cache still holds everything the dead process wrote, so a reopened
store sees it all. A power loss keeps only what was fdatasynced; of the rest, the kernel's
writeback may or may not have put any part on the disk before the power went. For a
partition log the synced point is its published high watermark (HW, docs/DESIGN.md §3:
every fdatasync publishes it, nothing else does), so `simulate_power_loss` cuts each
partition's log, internal topics included, back to its HW, or, with a `written_back`
policy, to a batch boundary between its HW and its end (the unsynced batches that writeback
happened to save, as a prefix: recovery truncates at the first batch that is not whole
anyway). The policies below are the adversary's usual choices: an ordering bug "X may not be
durable before Y" shows only when X's file kept its unsynced tail and Y's did not.

Call it only when no process has the store open: any view would sync the dead writer's tail
at open and publish the log end as the HW, after which nothing would be cut.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import txn_crash_worker  # the crash tests put this directory on sys.path

from storage.topic_name import TRANSACTION_STATE_TOPIC

#: (topic, partition, ends) -> the offset where the log that survives ends, one of `ends`: the
#: HW first, then the end of each batch past it in log order (the last one is the log end).
WrittenBack = Callable[[str, int, list[int]], int]


def durable_watermark(directory: str) -> int | None:
    """The partition's HW as the writers published it, read from its file without opening the partition.

    Not `PartitionLog.high_watermark`: once the writer is dead, any view asked for the HW
    fdatasyncs the unsynced tail and answers the log end (a read that writes, by design),
    which is exactly the data a power loss at the kill would have taken. None: no HW file.
    """
    from storage.high_watermark import UNREADABLE, HighWatermarkFile

    hw_file = HighWatermarkFile(directory, writable=False)
    try:
        value = hw_file.read()
    finally:
        hw_file.close()
    assert value != UNREADABLE, f"{directory}: the HW file is damaged"
    return value


def segment_bases(directory: str) -> list[int]:
    """The base offsets of the partition's segments, in order."""
    from storage.log_files import segment_bases as bases_of

    return bases_of(os.listdir(directory))


def batch_ends_from(directory: str, offset: int) -> list[int]:
    """`offset`, then the end offset (last offset + 1) of every whole batch at or past it, in log order."""
    from storage.file_records import FileRecords
    from storage.log_files import log_file

    bases = segment_bases(directory)
    first = max(b for b in bases if b <= offset)
    ends = [offset]
    for base in (b for b in bases if b >= first):
        with FileRecords.open(log_file(directory, base)) as records:
            ends += [h.last_offset + 1 for h in records.headers() if h.base_offset >= offset]
    return ends


def cut_at_offset(directory: str, offset: int) -> int:
    """Cut the partition's log where `offset` begins, as a power loss would; returns the bytes cut.

    Segments starting past `offset` go entirely (their files may never have reached the disk);
    the segment holding it is truncated at the byte of the first batch at or past `offset`,
    found with FileRecords. Index files are left as they are: they are never fsynced either, so
    entries past the cut are what a power loss can leave behind.
    """
    from storage.file_records import FileRecords
    from storage.log_files import INDEX_FILE_SUFFIXES, LOG_FILE_SUFFIX, log_file, segment_file

    bases = segment_bases(directory)
    target = max(b for b in bases if b <= offset)
    cut_bytes = 0
    for base in bases:
        if base > target:
            for suffix in (LOG_FILE_SUFFIX, *INDEX_FILE_SUFFIXES):
                path = segment_file(directory, base, suffix)
                if os.path.exists(path):
                    cut_bytes += os.path.getsize(path) if suffix == LOG_FILE_SUFFIX else 0
                    os.unlink(path)
    path = log_file(directory, target)
    position = 0
    with FileRecords.open(path) as records:
        for header in records.headers():
            if header.base_offset >= offset:
                break
            assert header.last_offset < offset, (
                f"{path}: the cut at offset {offset} falls inside the batch {header.base_offset}..{header.last_offset}"
            )
            position = header.position + header.size
    size = os.path.getsize(path)
    os.truncate(path, position)
    return cut_bytes + size - position


def simulate_power_loss(root: str, written_back: WrittenBack | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """Cut every partition of the store (internal topics too) to its durable watermark, or past it.

    `written_back` picks, per partition, how much of the unsynced tail survives (None: none of
    it). Call only when no process has the store open. Returns {(topic, partition): (HW, bytes cut)}.
    """
    out = {}
    for topic, p, directory in txn_crash_worker.partition_dirs(root):
        hw = durable_watermark(directory)
        if hw is None:
            written = sum(
                os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".log")
            )
            assert written == 0, f"{directory}: {written} bytes of log but no HW file: what is durable?"
            continue
        ends = batch_ends_from(directory, hw)
        cut = hw if written_back is None else written_back(topic, p, ends)
        assert cut in ends, f"{directory}: the policy cut at {cut}, not at one of {ends}"
        out[(topic, p)] = (hw, cut_at_offset(directory, cut))
    return out


# ---- writeback policies -----------------------------------------------------------------------------


def coordinator_written_back(topic: str, partition: int, ends: list[int]) -> int:
    """`__transaction_state` kept its whole unsynced tail, every other partition lost its own."""
    return ends[-1] if topic == TRANSACTION_STATE_TOPIC else ends[0]


def data_written_back(topic: str, partition: int, ends: list[int]) -> int:
    """Every partition but `__transaction_state` kept its whole unsynced tail; that one lost its own."""
    return ends[0] if topic == TRANSACTION_STATE_TOPIC else ends[-1]


def random_written_back(rng: random.Random) -> WrittenBack:
    """Each partition kept a random prefix of its unsynced tail (all of it, none, or some batches)."""

    def pick(topic: str, partition: int, ends: list[int]) -> int:
        return rng.choice(ends)

    return pick


#: The policies by name (for test ids and messages); "none": nothing unsynced survived.
WRITEBACK_NAMES = ("none", "coordinator", "data", "random")


def writeback_policy(name: str, rng: random.Random) -> WrittenBack | None:
    """The policy called `name` (one of WRITEBACK_NAMES)."""
    return {
        "none": None,
        "coordinator": coordinator_written_back,
        "data": data_written_back,
        "random": random_written_back(rng),
    }[name]
