"""librdkafka (confluent-kafka) end to end: transactional consume-transform-produce with
send_offsets_to_transaction, in a classic group and a KIP-848 (`group.protocol=consumer`) group.

Each test runs against the real Kafka 4.4 broker and against `txlog serve` (the `endpoint` fixture).
"""

from __future__ import annotations

import pytest

from tests.server import ctp_worker
from tests.server.client_checks import (
    assert_exactly_once,
    produce_inputs,
    read_values,
    record_count,
    transform,
    write_aborted,
)
from tests.server.endpoints import topic_name


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_transform_produce_copies_every_input_once(endpoint, request, big, protocol):
    n = record_count(300, big)
    source, sink = (topic_name(request.node.nodeid, role) for role in ("in", "out"))
    endpoint.create_topic(source, 3)
    endpoint.create_topic(sink, 3)
    inputs = produce_inputs(endpoint.bootstrap, source, n)
    aborted = [f"aborted-{i}" for i in range(30)]
    write_aborted(endpoint.bootstrap, sink, aborted)

    job = ctp_worker.Job(
        endpoint.bootstrap, source, sink, f"{sink}-group", f"{sink}-txn", group_protocol=protocol, abort_every=3
    )
    commits = ctp_worker.run(job, say=lambda line: None)

    assert commits >= n // job.batch
    assert_exactly_once(map(transform, inputs), read_values(endpoint.bootstrap, sink, 3, n))
    # the aborted records are in the log (read_uncommitted sees them, and the batches copied
    # again after each deliberate abort), and read_committed above did not show them
    everything = read_values(endpoint.bootstrap, sink, 3, n + len(aborted), isolation="read_uncommitted")
    assert set(aborted) <= set(everything)
    assert len(everything) > n + len(aborted)
