"""On-demand benchmark of the RecordBatch codec against kafka-python (not a pytest module).

Run: python tests/benchmarks/bench_codec.py [--records N] [--batches B] [--reps R]

Both libraries get the same records (10-byte key, 100-byte value, no
headers; ~64 KB batches). Each measurement is repeated; the first (cold)
repetition is dropped and the median of the rest is reported, so one
scheduler hiccup cannot decide a ratio. Targets (issue 13, the native codec):
encode >= 10x kafka-python, decode + iterate (touching key and value of every
record) >= 10x.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchutil import warm_median
from kafka.record import MemoryRecords  # test oracle only
from kafka.record.default_records import DefaultRecordBatchBuilder

from storage.file_records import FileRecords
from storage.records import RecordBatch, build_batch

BASE_TS = 1_700_000_000_000
ENCODE_TARGET = 10.0  # x kafka-python
DECODE_TARGET = 10.0


def make_records(count: int) -> list[tuple]:
    """Producer-like records: random bytes (content does not matter, sizes do), timestamps a few ms apart."""
    return [(os.urandom(10), os.urandom(100), None, BASE_TS + i // 64) for i in range(count)]


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return warm_median(times)


def kafka_python_encode(batches: list[list[tuple]]) -> list[bytes]:
    out = []
    for records in batches:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 24,
        )
        for offset, (key, value, _headers, ts) in enumerate(records):
            builder.append(offset, timestamp=ts, key=key, value=value, headers=[])
        out.append(bytes(builder.build()))
    return out


def txlog_encode(batches: list[list[tuple]]) -> list[bytes]:
    return [build_batch(records) for records in batches]


def kafka_python_decode(buf: bytes) -> int:
    seen = 0
    memory = MemoryRecords(buf)
    while (batch := memory.next_batch()) is not None:
        for record in batch:
            _ = record.key  # touched, not kept: the cost measured is decoding them
            _ = record.value
            seen += 1
    return seen


def txlog_decode(buf: bytes) -> int:
    seen = 0
    for batch in FileRecords.in_memory(buf).batches():
        for record in batch.records():
            _ = record.key  # touched, not kept: the cost measured is decoding them
            _ = record.value
            seen += 1
    return seen


def with_base_offsets(batches: list[bytes]) -> bytes:
    """Concatenate batches as a log would hold them (consecutive base offsets)."""
    out, next_offset = [], 0
    for raw in batches:
        batch = RecordBatch.parse(raw)
        out.append(batch.with_offset(next_offset))
        next_offset = batch.next_offset + next_offset
    return b"".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=540, help="records per batch (540 = ~64 KB)")
    parser.add_argument("--batches", type=int, default=8, help="batches per repetition")
    parser.add_argument("--reps", type=int, default=25, help="timed repetitions after the cold one")
    args = parser.parse_args()

    batches = [make_records(args.records) for _ in range(args.batches)]
    total = args.records * args.batches

    ours = txlog_encode(batches)
    theirs = kafka_python_encode(batches)
    # Same bytes apart from the leader epoch (kafka-python writes 0, Java/txlog -1): an
    # apples-to-apples comparison, and a cross-check of the encoder.
    pairs = zip(ours, theirs, strict=True)
    assert all(RecordBatch.parse(a).with_offset(0, 0) == b for a, b in pairs), "encoders disagree"
    log = with_base_offsets(ours)
    assert txlog_decode(log) == kafka_python_decode(log) == total

    rows = []
    kp = median_seconds(lambda: kafka_python_encode(batches), args.reps)
    tx = median_seconds(lambda: txlog_encode(batches), args.reps)
    rows.append(("encode", total / kp, total / tx, kp / tx, ENCODE_TARGET))
    kp = median_seconds(lambda: kafka_python_decode(log), args.reps)
    tx = median_seconds(lambda: txlog_decode(log), args.reps)
    rows.append(("decode+iterate", total / kp, total / tx, kp / tx, DECODE_TARGET))

    print(
        f"{args.batches} batches x {args.records} records (10 B key, 100 B value), "
        f"{len(ours[0])} bytes per batch; median of {args.reps} runs after a cold one"
    )
    print(f"{'operation':<16}{'kafka-python rec/s':>20}{'txlog rec/s':>15}{'ratio':>8}{'target':>8}")
    for name, kp_rate, tx_rate, ratio, target in rows:
        verdict = "ok" if ratio >= target else "MISSED"
        print(f"{name:<16}{kp_rate:>20,.0f}{tx_rate:>15,.0f}{ratio:>7.2f}x{target:>6.1f}x  {verdict}")

    one = ours[0]
    seconds = median_seconds(lambda: [RecordBatch.parse(one).validate_framing() for _ in range(20)], args.reps) / 20
    print(
        f"parse+validate_framing of one {len(one)}-byte batch: {seconds * 1e6:,.1f} us "
        f"= {len(one) / seconds / 1e6:,.0f} MB/s = {args.records / seconds:,.0f} records/s"
    )
    seconds = median_seconds(lambda: [RecordBatch.parse(one) for _ in range(20)], args.reps) / 20
    print(
        f"parse (header + CRC only) of the same batch: {seconds * 1e6:,.1f} us = {len(one) / seconds / 1e6:,.0f} MB/s"
    )


if __name__ == "__main__":
    main()
