"""A transactional producer's requests made directly on a transport, with no producer in between.

The coordinator tests drive InitProducerId, AddPartitionsToTxn, Produce and EndTxn themselves, so
that what they count (fsyncs, writes, held locks) is the coordinator's and the partitions' alone.
"""

from __future__ import annotations

from storage.records import build_batch
from txlog.transport import Transport


class DirectTxn:
    """One transactional id's requests on `transport`, writing one-record batches to `topic`."""

    #: The records' timestamp; None stamps the wall clock at build (a subclass fixes it for equal bytes).
    timestamp: int | None = None

    def __init__(self, transport: Transport, transactional_id: str, topic: str):
        self.transport = transport
        self.transactional_id = transactional_id
        self.topic = topic
        ids = transport.init_producer_id(transactional_id)
        self.pid, self.epoch = ids.producer_id, ids.epoch
        self.seq: dict[int, int] = {}

    def register(self, *partitions: int) -> None:
        self.transport.add_partitions_to_txn(
            self.transactional_id, self.pid, self.epoch, [(self.topic, p) for p in partitions]
        )

    def send(self, partition: int, value: bytes) -> None:
        """One record, unsynced (the end's syncs are what the tests look at)."""
        seq = self.seq.get(partition, 0)
        data = build_batch(
            [(None, value, None, self.timestamp)],
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        self.transport.produce(self.topic, partition, data, self.transactional_id, sync=False)
        self.seq[partition] = seq + 1

    def send_to(self, partitions: range, value: bytes) -> None:
        """`value` to each of `partitions`, registered first."""
        self.register(*partitions)
        for p in partitions:
            self.send(p, value)

    def end(self, commit: bool) -> None:
        ids = self.transport.end_txn(self.transactional_id, self.pid, self.epoch, commit)
        self.pid, self.epoch, self.seq = ids.producer_id, ids.epoch, {}

    def commit(self) -> None:
        self.end(True)

    def abort(self) -> None:
        self.end(False)

    def run(self, partitions: tuple[int, ...], commit: bool) -> None:
        self.register(*partitions)
        for p in partitions:
            self.send(p, b"v")
        self.end(commit)
