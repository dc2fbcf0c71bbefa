"""produce_many's rounds of several appends (acks=all outside a transaction): a differential test.

The same calls (produce_many mixed with send on one partition, then on two) through a producer
whose rounds make one append each (max_in_flight_requests_per_connection=1, the old path) and one
whose rounds make up to 5 appends with one fdatasync (`PartitionLog.append_requests`) give
byte-identical log files, the same offsets in every future, the same HW; the second takes the new
path (rounds of more than one append) and makes fewer fdatasyncs.
"""

from __future__ import annotations

import os

import txlog
from storage import Store
from storage.high_watermark import HighWatermarkFile
from storage.partition_log import PartitionLog

TS = 1_700_000_000_000


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if name.endswith(".log") and "__" not in directory:
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = f.read()
    return out


def _run(root: str, in_flight: int, monkeypatch) -> dict:
    rounds: list[int] = []
    real = PartitionLog.append_requests

    def counted(log, requests, **kwargs):
        rounds.append(len(requests))
        return real(log, requests, **kwargs)

    syncs: list[int] = []
    real_sync = os.fdatasync
    with monkeypatch.context() as m:
        m.setattr(PartitionLog, "append_requests", counted)
        m.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real_sync(fd))[1])
        with Store.open(root) as store:
            store.create_topic("t", 2)
            p = txlog.Producer(
                store,
                batch_size=2048,
                max_request_size=4096,
                linger_ms=50,
                max_in_flight_requests_per_connection=in_flight,
                clock=lambda: TS,
            )
            offsets = []
            for call in range(6):
                values = [b"%d-%d-" % (call, i) + b"v" * (i * 7 % 400) for i in range(300)]
                keys = [b"k%d" % (i % 13) for i in range(300)]
                single = p.send("t", b"single-%d" % call, b"k", partition=call % 2)
                many = p.produce_many(
                    "t",
                    values,
                    keys,
                    partition=None if call >= 4 else call % 2,
                    timestamps=[TS + i for i in range(300)],
                )
                assert many.get() == 300
                offsets.append((single.get().partition, single.get().offset, many.batches()))
            p.close()
            end = [store.partition("t", n).log_end_offset for n in range(2)]
        hw = [HighWatermarkFile(os.path.join(root, f"t-{n}"), writable=False).read() for n in range(2)]
    return {"files": _files(root), "offsets": offsets, "end": end, "hw": hw, "rounds": rounds, "syncs": len(syncs)}


def test_several_appends_a_round_write_what_one_append_a_round_writes(tmp_path, monkeypatch):
    old = _run(str(tmp_path / "old"), 1, monkeypatch)
    new = _run(str(tmp_path / "new"), 5, monkeypatch)
    assert old["rounds"] == [] and max(new["rounds"]) > 1  # each took its path
    assert new["files"] == old["files"] and len(old["files"]) == 2
    assert new["offsets"] == old["offsets"]
    assert new["end"] == old["end"] == new["hw"] == old["hw"]
    assert sum(new["end"]) == 6 * 301
    assert new["syncs"] < old["syncs"]
