"""Transactions over the wire: real clients of both transaction protocols, fencing, timeouts, and the admin views."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer

from storage import Store
from storage.records import build_batch
from tests.kafka_rig import kafka_dist
from tests.server.raw_client import RawClient
from tests.server.serve_process import ServeProcess
from tests.server.store_reads import read_values
from txlog.clients.admin import Admin
from txlog.fetch import IsolationLevel, latest_offset
from txlog.topic_partition import TopicPartition

PRODUCE, OFFSET_FETCH, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, TXN_OFFSET_COMMIT = 0, 9, 22, 24, 26, 28
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
NONE, INVALID_TXN_STATE, INVALID_TRANSACTION_TIMEOUT, TRANSACTIONAL_ID_NOT_FOUND = 0, 48, 50, 105
UNKNOWN_TOPIC_OR_PARTITION = 3
T0 = TopicPartition("t", 0)
JAVA_PRODUCER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "TxnProducerV2.java")
WAIT_S = 120  # a bound for a background job on a loaded machine, never a speed assertion


def _create_topic(data_dir: str, name: str, partitions: int = 1) -> None:
    with Store.open(data_dir) as store:
        store.create_topic(name, partitions)


def _txn_producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **extra})
    producer.init_transactions(60)
    return producer


# ---- real clients ---------------------------------------------------------------------------------------


def test_confluent_kafka_commits_and_aborts_and_read_committed_sees_only_the_commits(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    producer = _txn_producer(txlog_server.bootstrap, "tx-ck")
    for value, commit in ((b"c1", True), (b"a1", False), (b"c2", True)):
        producer.begin_transaction()
        producer.produce("t", value=value)
        producer.flush(60)  # written before the end, so an abort has data to abort
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    assert read_values(txlog_server.data_dir, T0, "read_committed") == [b"c1", b"c2"]
    assert read_values(txlog_server.data_dir, T0, "read_uncommitted") == [b"c1", b"a1", b"c2"]


def test_a_second_instance_fences_the_first_which_learns_it_is_fenced(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    first = _txn_producer(txlog_server.bootstrap, "tx-fence")
    first.begin_transaction()
    first.produce("t", value=b"zombie")
    first.flush(60)
    second = _txn_producer(txlog_server.bootstrap, "tx-fence")  # aborts the first one's open transaction
    second.begin_transaction()
    second.produce("t", value=b"live")
    second.commit_transaction(60)
    with pytest.raises(KafkaException) as caught:
        first.commit_transaction(60)
    assert caught.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    assert read_values(txlog_server.data_dir, T0, "read_committed") == [b"live"]


def test_kafka_python_transactional_producer_speaks_protocol_v1(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    producer = KafkaProducer(bootstrap_servers=txlog_server.bootstrap, transactional_id="tx-kp")
    producer.init_transactions()
    for value, commit in ((b"k1", True), (b"k2", False), (b"k3", True)):
        producer.begin_transaction()
        producer.send("t", value=value)
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    assert read_values(txlog_server.data_dir, T0, "read_committed") == [b"k1", b"k3"]


def test_the_java_4_producer_speaks_protocol_v2_and_is_fenced_by_a_second_instance(txlog_server):
    """Java 4.x negotiates transaction.version 2: Produce v12 adds the partitions, every EndTxn bumps the epoch."""
    _create_topic(txlog_server.data_dir, "t")
    classes = kafka_dist.compiled_classes(JAVA_PRODUCER, "TxnProducerV2")
    result = subprocess.run(
        [
            kafka_dist.java(),
            "-cp",
            classes + os.pathsep + kafka_dist.classpath(),
            "TxnProducerV2",
            txlog_server.bootstrap,
            "t",
            "tx-java",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "first instance fenced" in result.stdout
    assert read_values(txlog_server.data_dir, T0, "read_committed") == [b"j1", b"j3"]
    with Admin(txlog_server.data_dir, read_only=True) as admin:
        state = admin.describe_transaction("tx-java").state
    # init 0, three ends (one bump each, protocol v2), the second instance's init: 4 (protocol v1 would be 1)
    assert (state.producer_epoch, state.client_transaction_version) == (4, 2)


def test_a_transaction_timeout_above_the_broker_maximum_is_refused(tmp_path):
    server = ServeProcess(str(tmp_path / "store"), args=["--config", "transaction.max.timeout.ms=5000"]).start()
    try:
        with pytest.raises(KafkaException) as caught:
            _txn_producer(server.bootstrap, "tx-long", **{"transaction.timeout.ms": 6000})
        assert caught.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
        _txn_producer(server.bootstrap, "tx-short", **{"transaction.timeout.ms": 5000})
    finally:
        server.kill()


def test_a_transaction_whose_client_died_is_aborted_by_the_background_sweep(tmp_path):
    interval = "transaction.abort.timed.out.transaction.cleanup.interval.ms=200"
    server = ServeProcess(str(tmp_path / "store"), args=["--config", interval]).start()
    try:
        _create_topic(server.data_dir, "t")
        with RawClient(server.bootstrap) as client:  # a client that opens a transaction and vanishes
            ids = _init(client, "tx-dead", timeout_ms=1000)
            _add(client, "tx-dead", ids, "t", 0)
            assert _produce_txn(client, "tx-dead", ids, 0, b"orphan").error_code == NONE
        # Nobody sends another request: only the server's own sweep can end the transaction.
        assert _wait_for(lambda: _lso(server.data_dir, T0) == 2)  # the data and the abort marker
    finally:
        server.kill()
    assert read_values(server.data_dir, T0, "read_committed") == []


# ---- the epoch rules of the two protocols, at the wire ----------------------------------------------------


def test_endtxn_below_v5_keeps_the_epoch_and_v5_bumps_it(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    with RawClient(txlog_server.bootstrap) as client:
        ids = _init(client, "tx-v1")
        for seq in (0, 1):  # protocol v1: the same epoch, sequences continuing
            _add(client, "tx-v1", ids, "t", 0)
            assert _produce_txn(client, "tx-v1", ids, seq, b"v1-%d" % seq).error_code == NONE
            assert _end(client, "tx-v1", ids, commit=True, version=4).error_code == NONE
        assert _describe(client, "tx-v1").producer_epoch == ids[1]
        again = _end(client, "tx-v1", ids, commit=True, version=4)  # a retry of the completed commit
        assert again.error_code == NONE
        assert _end(client, "tx-v1", ids, commit=False, version=4).error_code == INVALID_TXN_STATE

        v2 = _init(client, "tx-v2")
        _add(client, "tx-v2", v2, "t", 0)
        assert _produce_txn(client, "tx-v2", v2, 0, b"v2").error_code == NONE
        ended = _end(client, "tx-v2", v2, commit=True, version=5)
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (NONE, v2[0], v2[1] + 1)
        retried = _end(client, "tx-v2", v2, commit=True, version=5)
        assert (retried.error_code, retried.producer_epoch) == (NONE, v2[1] + 1)
    assert read_values(txlog_server.data_dir, T0, "read_committed") == [b"v1-0", b"v1-1", b"v2"]


def test_produce_v12_adds_its_partition_to_the_transaction_without_add_partitions_to_txn(txlog_server):
    _create_topic(txlog_server.data_dir, "t", 2)
    with RawClient(txlog_server.bootstrap) as client:
        ids = _init(client, "tx-kip890")
        for epoch_ids, value in ((ids, b"first"), ((ids[0], ids[1] + 1), b"second")):
            assert _produce_txn(client, "tx-kip890", epoch_ids, 0, value, version=12).error_code == NONE
            assert _end(client, "tx-kip890", epoch_ids, commit=True, version=5).error_code == NONE
        # Below v12 the partition must have been added: the verification (KIP-890 part 1) refuses it.
        late = (ids[0], ids[1] + 2)
        assert _produce_txn(client, "tx-kip890", late, 0, b"unadded", version=11).error_code == INVALID_TXN_STATE
    assert read_values(txlog_server.data_dir, T0, "read_committed") == [b"first", b"second"]


def test_txn_offset_commit_v5_adds_the_offsets_partition_without_add_offsets_to_txn(txlog_server):
    """KIP-890 part 2: a v2 client (franz-go, Java 4.x) sends no AddOffsetsToTxn; TxnOffsetCommit v5
    joins the group's `__consumer_offsets` partition to the transaction, as Kafka's group
    coordinator asks the transaction coordinator to. Below v5 the partition must have been added."""
    _create_topic(txlog_server.data_dir, "t")
    with RawClient(txlog_server.bootstrap) as client:
        ids = _init(client, "tx-offsets")
        assert _txn_offset_commit(client, "tx-offsets", ids, "g", 7, version=4) == INVALID_TXN_STATE
        assert _txn_offset_commit(client, "tx-offsets", ids, "g", 7, version=5) == NONE
        assert _committed(client, "g") == -1  # pending until the transaction commits
        assert _end(client, "tx-offsets", ids, commit=True, version=5).error_code == NONE
        assert _committed(client, "g") == 7


def test_describe_and_list_transactions_and_describe_producers(txlog_server):
    _create_topic(txlog_server.data_dir, "t")
    with RawClient(txlog_server.bootstrap) as client:
        ids = _init(client, "tx-open")
        _add(client, "tx-open", ids, "t", 0)
        assert _produce_txn(client, "tx-open", ids, 0, b"pending").error_code == NONE
        _init(client, "tx-idle")

        described = _describe(client, "tx-open")
        assert (described.error_code, described.transaction_state) == (NONE, "Ongoing")
        assert (described.producer_id, described.producer_epoch) == ids
        assert [(t.topic, list(t.partitions)) for t in described.topics] == [("t", [0])]
        assert _describe(client, "tx-nobody").error_code == TRANSACTIONAL_ID_NOT_FOUND

        listed = client.send(LIST_TRANSACTIONS, 1, state_filters=("Ongoing", "Bogus"), producer_id_filters=())
        assert [t.transactional_id for t in listed.transaction_states] == ["tx-open"]
        assert list(listed.unknown_state_filters) == ["Bogus"]
        everyone = client.send(
            LIST_TRANSACTIONS,
            2,
            state_filters=(),
            producer_id_filters=(),
            duration_filter=-1,
            transactional_id_pattern="tx-.*",
        )
        assert sorted(t.transactional_id for t in everyone.transaction_states) == ["tx-idle", "tx-open"]
        by_pid = client.send(LIST_TRANSACTIONS, 0, state_filters=(), producer_id_filters=(ids[0],))
        assert [t.transactional_id for t in by_pid.transaction_states] == ["tx-open"]

        producers = client.send(
            DESCRIBE_PRODUCERS,
            0,
            topics=(client.nested(DESCRIBE_PRODUCERS, 0, "TopicRequest", name="t", partition_indexes=(0,)),),
        )
        (partition,) = producers.topics[0].partitions
        (state,) = partition.active_producers
        assert (state.producer_id, state.producer_epoch, state.current_txn_start_offset) == (ids[0], ids[1], 0)

        unknown = client.send(
            DESCRIBE_PRODUCERS,
            0,
            topics=(client.nested(DESCRIBE_PRODUCERS, 0, "TopicRequest", name="nowhere", partition_indexes=(0,)),),
        )
        (missing,) = unknown.topics[0].partitions
        assert (missing.error_code, list(missing.active_producers)) == (UNKNOWN_TOPIC_OR_PARTITION, [])


# ---- helpers: one request each ----------------------------------------------------------------------------


def _init(client: RawClient, tid: str, timeout_ms: int = 60000) -> tuple[int, int]:
    answer = client.send(INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout=timeout_ms)
    assert answer.error_code == NONE
    return answer.producer_id, answer.producer_epoch


def _add(client: RawClient, tid: str, ids: tuple[int, int], topic: str, partition: int) -> None:
    answer = client.send(
        ADD_PARTITIONS,
        3,
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=ids[0],
        v3_and_below_producer_epoch=ids[1],
        v3_and_below_topics=(
            client.nested(ADD_PARTITIONS, 3, "AddPartitionsToTxnTopic", name=topic, partitions=(partition,)),
        ),
    )
    codes = [p.partition_error_code for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition]
    assert codes == [NONE]


def _produce_txn(
    client: RawClient, tid: str, ids: tuple[int, int], seq: int, value: bytes, *, partition: int = 0, version: int = 9
):
    batch = build_batch(
        [(None, value, None, None)], producer_id=ids[0], producer_epoch=ids[1], base_sequence=seq, is_transactional=True
    )
    data = client.nested(
        PRODUCE,
        version,
        "TopicProduceData",
        name="t",
        partition_data=(client.nested(PRODUCE, version, "PartitionProduceData", index=partition, records=batch),),
    )
    response = client.send(PRODUCE, version, transactional_id=tid, acks=-1, timeout=30000, topic_data=(data,))
    return response.responses[0].partition_responses[0]


def _txn_offset_commit(
    client: RawClient, tid: str, ids: tuple[int, int], group: str, offset: int, *, version: int
) -> int:
    """A commit from outside group management (no member), as an assign()ing consumer sends it."""
    partition = client.nested(
        TXN_OFFSET_COMMIT,
        version,
        "TxnOffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic = client.nested(TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestTopic", name="t", partitions=(partition,))
    answer = client.send(
        TXN_OFFSET_COMMIT,
        version,
        transactional_id=tid,
        group_id=group,
        producer_id=ids[0],
        producer_epoch=ids[1],
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(topic,),
    )
    return answer.topics[0].partitions[0].error_code


def _committed(client: RawClient, group: str) -> int:
    topic = client.nested(OFFSET_FETCH, 7, "OffsetFetchRequestTopic", name="t", partition_indexes=(0,))
    answer = client.send(OFFSET_FETCH, 7, group_id=group, topics=(topic,), require_stable=False)
    return answer.topics[0].partitions[0].committed_offset


def _end(client: RawClient, tid: str, ids: tuple[int, int], *, commit: bool, version: int):
    return client.send(
        END_TXN, version, transactional_id=tid, producer_id=ids[0], producer_epoch=ids[1], committed=commit
    )


def _describe(client: RawClient, tid: str):
    return client.send(DESCRIBE_TRANSACTIONS, 0, transactional_ids=(tid,)).transaction_states[0]


def _lso(data_dir: str, tp: TopicPartition) -> int:
    """The partition's last stable offset, read without writing (a writable reader would sweep itself)."""
    with Store.open(data_dir, read_only=True) as store:
        return latest_offset(store.partition(tp.topic, tp.partition), IsolationLevel.READ_COMMITTED)


def _wait_for(condition) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


# ---- KIP-939: InitProducerId v6 -------------------------------------------------------------------------

INVALID_REQUEST, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 42, 53


def _init_v6(client: RawClient, tid: str, *, enable_2pc: bool, keep: bool):
    return client.send(
        INIT_PRODUCER_ID,
        6,
        transactional_id=tid,
        transaction_timeout=60000,
        producer_id=-1,
        producer_epoch=-1,
        enable2_pc=enable_2pc,
        keep_prepared_txn=keep,
    )


def test_two_phase_commit_is_refused_while_the_broker_does_not_enable_it(txlog_server):
    with RawClient(txlog_server.bootstrap) as client:
        for enable_2pc, keep in ((True, False), (True, True), (False, True)):
            answer = _init_v6(client, "tx-2pc", enable_2pc=enable_2pc, keep=keep)
            assert answer.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_init_producer_id_v6_keeps_a_prepared_transaction_for_the_next_instance(tmp_path):
    server = ServeProcess(str(tmp_path / "store"), args=["--config", "transaction.two.phase.commit.enable=true"])
    server.start()
    try:
        _create_topic(server.data_dir, "t")
        with RawClient(server.bootstrap) as client:
            assert _init_v6(client, "tx-2pc", enable_2pc=False, keep=True).error_code == INVALID_REQUEST
            first = _init_v6(client, "tx-2pc", enable_2pc=True, keep=False)
            assert first.error_code == NONE
            assert (first.ongoing_txn_producer_id, first.ongoing_txn_producer_epoch) == (-1, -1)
            ids = (first.producer_id, first.producer_epoch)
            _add(client, "tx-2pc", ids, "t", 0)
            assert _produce_txn(client, "tx-2pc", ids, 0, b"prepared").error_code == NONE
            # the first instance "prepared" and died; the next one keeps its transaction
            kept = _init_v6(client, "tx-2pc", enable_2pc=True, keep=True)
            assert kept.error_code == NONE
            assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == ids
            assert (kept.producer_id, kept.producer_epoch) == (ids[0], ids[1] + 1)
            assert _describe(client, "tx-2pc").transaction_state == "Ongoing"
            assert _end(client, "tx-2pc", ids, commit=True, version=5).error_code != NONE  # the writer is fenced
            new = (kept.producer_id, kept.producer_epoch)
            assert _end(client, "tx-2pc", new, commit=True, version=5).error_code == NONE
        assert read_values(server.data_dir, T0, "read_committed") == [b"prepared"]
    finally:
        server.kill()
