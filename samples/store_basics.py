"""The README's Python example, runnable: idempotent appends, a retried batch, reading back.

python samples/store_basics.py [DATA_DIR]
"""

import sys
import tempfile
import time

from storage import Store
from storage.records import build_batch


def main(path: str) -> None:
    store = Store.open(path)
    if not store.has_topic("orders"):
        store.create_topic("orders", partitions=3, config={"segment.bytes": 1048576})
    log = store.partition("orders", 0)

    pid = store.allocate_producer_id()
    now = int(time.time() * 1000)
    batch = build_batch([(b"k1", b"v1", [("h", b"x")], now)], producer_id=pid, producer_epoch=0, base_sequence=0)
    res = log.append(batch)
    again = log.append(batch)
    assert again.duplicate and again.base_offset == res.base_offset
    print(f"appended at offset {res.base_offset}; the retry was answered with offset {again.base_offset}")

    for b in log.read(0, max_bytes=1 << 20):
        for r in b.records():
            print(r.offset, r.key, r.value, r.headers)
    print("log start", log.log_start_offset, "log end", log.log_end_offset, "LSO", log.last_stable_offset)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="txlog-sample-"))
