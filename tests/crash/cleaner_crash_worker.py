"""Worker process for the tests of a cleaner killed mid-swap, plus the helpers they share.

Not a test module (no `test_` prefix). Run as a script, `cleaner_crash_worker.py STORE STEP`, it
opens the store, wraps the swap step `STEP` of storage/log_cleaner.py (one of `SWAP_STEPS`) so that
the process SIGKILLs itself right after the step returns, and cleans partition `c-0`:

    KILL <step>     the step returned; the process is about to SIGKILL itself
    DONE            the cleaning ended without reaching the step (a test failure)

`dirty_log` lays out the partition the tests clean: three sealed segments of ten records over four
keys (one group for the cleaner) and an active segment, so the cleaning keeps the last four records
of the group, each at its offset (docs/reliability-scenarios.md scenario 76).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TOPIC = "c"
T0 = 1_700_000_000_000
#: (offset, key, value) of every record before the cleaning, and after it (the active segment's last).
BEFORE = [(i, f"k{i % 4}".encode(), f"v{i}".encode()) for i in range(30)] + [(30, b"k0", b"active")]
AFTER = [(26, b"k2", b"v26"), (27, b"k3", b"v27"), (28, b"k0", b"v28"), (29, b"k1", b"v29"), (30, b"k0", b"active")]


def dirty_log(path: str) -> str:
    """Create the store and its dirty compacted partition; returns the partition's directory."""
    from storage import Store
    from storage.records import build_batch

    with Store.open(path) as store:
        store.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 1.0})
        log = store.partition(TOPIC, 0)
        for offset, key, value in BEFORE:
            log.append(build_batch([(key, value, None, T0)]))
            if offset % 10 == 9:
                log.roll()  # segments at 0, 10, 20 (the group) and 30 (active)
        return store.partition_dir(TOPIC, 0)


def kill_cleaner_after(path: str, step: str) -> None:
    """Run the worker cleaning `path` and check it was killed right after `step`."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), path, step], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.split() == ["KILL", step], (proc.stdout, proc.stderr)


def read_all(log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start to the end, through `PartitionLog.read`."""
    out = []
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        batches = log.read(offset)
        assert batches, f"a read at {offset} below the end {end} returned nothing"
        for batch in batches:
            out.extend((r.offset, r.key, r.value) for r in batch.records())
        offset = batches[-1].last_offset + 1
    return out


def main() -> None:
    import storage.log_cleaner as cleaner
    from storage import Store

    path, step = sys.argv[1], sys.argv[2]
    real = getattr(cleaner, step)

    def then_die(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)
        print("KILL", step, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(cleaner, step, then_die)  # clean_pass calls the steps by their module-level names
    store = Store.open(path)
    store.partition(TOPIC, 0).compact(force=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
