"""Ids carried as Kafka request strings (txlog/requests.py `check_id`): one limit, one clear error everywhere.

Kafka's schemas carry a transactional id or a group id as a STRING with an i16 length, so an id
is non-empty and at most 32767 UTF-8 bytes. Over the limit, or not encodable, every door (the
Producer, the coordinators behind Admin, the Consumer's group, the CLI) refuses it with its
Kafka error and a sentence, never an encoder's ValueError or a UnicodeEncodeError.
"""

from __future__ import annotations

import pytest

import txlog
from storage.errors import InvalidRequestError
from tests.cli.cli_helpers import assert_one_error
from tests.cli.cli_helpers import txlog as run_txlog
from txlog.errors import InvalidGroupIdError
from txlog.requests import MAX_STRING_BYTES, check_id

LONGEST = "x" * MAX_STRING_BYTES
TOO_LONG = "x" * (MAX_STRING_BYTES + 1)
TOO_LONG_IN_UTF8 = "é" * (MAX_STRING_BYTES // 2 + 1)  # fewer characters than the limit, more bytes
SURROGATE = "id-\udcff"  # what os.fsdecode makes of a non-UTF-8 byte: not encodable


def test_the_limit_is_kafkas_i16_string_length():
    assert MAX_STRING_BYTES == 32767
    assert check_id(LONGEST, "group id", InvalidGroupIdError) == LONGEST


@pytest.mark.parametrize("bad", ["", None, 7, TOO_LONG, TOO_LONG_IN_UTF8, SURROGATE])
def test_check_id_refuses_what_kafka_cannot_carry(bad):
    with pytest.raises(InvalidGroupIdError, match="group id"):
        check_id(bad, "group id", InvalidGroupIdError)


@pytest.mark.parametrize("bad", [TOO_LONG, TOO_LONG_IN_UTF8, SURROGATE, ""])
def test_init_transactions_refuses_the_id_and_persists_nothing(store_path, bad):
    # As in Kafka: the producer takes any transactional.id; the coordinator refuses InitProducerId
    # (INVALID_REQUEST) before it writes anything.
    producer = txlog.Producer(store_path, transactional_id=bad)
    with pytest.raises(InvalidRequestError, match="transactional.id"):
        producer.init_transactions()
    producer.close()
    assert txlog.Admin(store_path).list_transactions() == []


def test_the_transaction_coordinator_refuses_a_transactional_id_kafka_cannot_store(store_path):
    admin = txlog.Admin(store_path)
    with pytest.raises(InvalidRequestError, match="longer than Kafka's limit"):
        admin.describe_transaction(TOO_LONG)
    with pytest.raises(InvalidRequestError, match="not valid Unicode"):
        admin.describe_transaction(SURROGATE)


def test_a_group_id_that_does_not_encode_is_an_invalid_group_id(store_path):
    admin = txlog.Admin(store_path)
    admin.create_topic("t", 1)
    consumer = txlog.Consumer(store_path, group_id=SURROGATE, enable_auto_commit=False)
    try:
        with pytest.raises(InvalidGroupIdError, match="not valid Unicode"):
            consumer.committed(txlog.TopicPartition("t", 0))
    finally:
        consumer.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["produce", "-t", "t", "--transactional-id", TOO_LONG],
        ["transactions", "describe", "--transactional-id", TOO_LONG],
        ["abort", "--transactional-id", TOO_LONG],
    ],
    ids=["produce", "transactions describe", "abort"],
)
def test_the_cli_says_one_line_for_an_id_over_the_limit(tmp_path, argv):
    data_dir = str(tmp_path / "store")
    txlog.Admin(data_dir).create_topic("t", 1)
    message = assert_one_error(run_txlog(*argv, data_dir=data_dir, input="a\n"))
    assert f"longer than Kafka's limit of {MAX_STRING_BYTES}" in message
