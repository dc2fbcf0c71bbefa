"""Producer.close() as Kafka's: what goes wrong while closing is logged, never raised, and no record is
dropped silently (docs/DESIGN.md §9, docs/reliability-scenarios.md scenario 70)."""

from __future__ import annotations

import logging
import threading

import pytest

import txlog
from storage.store import Store
from txlog.errors import KafkaTimeoutError
from txlog.transport import Transport


class _GatedTransport(Transport):
    """Produce requests wait at a gate until the test opens it."""

    def __init__(self, store: Store):
        super().__init__(store)
        self.entered = threading.Event()
        self.gate = threading.Event()

    def produce(self, *args, **kwargs):
        self.entered.set()
        self.gate.wait()
        return super().produce(*args, **kwargs)

    def produce_durably(self, *args, **kwargs):  # a wide acks=all round: one request, gated as one
        self.entered.set()
        self.gate.wait()
        return super().produce_durably(*args, **kwargs)


def test_close_with_a_timeout_fails_the_records_never_sent_and_does_not_raise(store_path, caplog):
    store = Store.open(store_path)
    store.create_topic("t", 2)
    transport = _GatedTransport(store)
    producer = txlog.Producer(store, transport=transport, linger_ms=0)
    in_flight = producer.send("t", value=b"first", partition=0)
    transport.entered.wait()  # the sender holds it, inside the Produce request
    never_sent = producer.send("t", value=b"second", partition=1)

    with caplog.at_level(logging.WARNING):
        producer.close(timeout=0.2)  # the flush cannot finish while the gate is shut: logged, not raised
    assert "could not flush on close" in caplog.text
    with pytest.raises(KafkaTimeoutError, match="closed before this record was sent"):
        never_sent.get()
    transport.gate.set()
    assert in_flight.get().offset == 0  # the request already made still ends in its future
    store.close()
