"""The process `txlog demo` kills: an idempotent producer appending until SIGKILL arrives.

Run as `python -m cli._demo_writer DATA_DIR TOPIC PARTITION PRODUCER_ID`. It prints `ready`,
then one line `<sequence> <offset>` per acknowledged batch (after the append returned,
i.e. after the fsync), flushed at once so that the parent sees every acknowledgement.
Only storage is imported, so it starts quickly.
"""

from __future__ import annotations

import sys
import time

MAX_SECONDS = 30.0  # a safety net: the demo kills this process long before


def record(sequence: int) -> tuple[bytes, bytes]:
    """The key and value of the record with this sequence (the demo rebuilds it to retry)."""
    return b"crash-%d" % sequence, b"record %d, written by a process about to be killed" % sequence


def batch(producer_id: int, sequence: int) -> bytes:
    from storage.records import build_batch

    key, value = record(sequence)
    return build_batch([(key, value, [], None)], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)


def main(argv: list[str]) -> int:
    from storage import Store

    data_dir, topic, partition, producer_id = argv[0], argv[1], int(argv[2]), int(argv[3])
    store = Store.open(data_dir)
    log = store.partition(topic, partition)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    sequence = 0
    deadline = time.monotonic() + MAX_SECONDS
    while time.monotonic() < deadline:  # a dead parent ends the loop too (BrokenPipeError)
        result = log.append(batch(producer_id, sequence))
        out.write(f"{sequence} {result.base_offset}\n")
        out.flush()
        sequence += 1
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
