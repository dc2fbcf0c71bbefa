"""A store deleted under an open producer (docs/reliability-scenarios.md scenario 71).

`rm -rf` of the store leaves an open producer's descriptors on unlinked files: writes to them
succeed and reach nobody. The next acknowledgement must fail with KafkaStorageError (Kafka's
KafkaStorageException for a log dir gone offline), not report an offset.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import txlog
from storage.errors import KafkaError, KafkaStorageError
from storage.store import Store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def store(tmp_path) -> str:
    path = str(tmp_path / "store")
    with Store.open(path) as s:
        s.create_topic("t", 1)
    return path


@pytest.mark.parametrize("acks", ["all", 1])
def test_scenario71_the_next_send_after_the_store_is_deleted_fails(store, acks):
    producer = txlog.Producer(store, acks=acks, linger_ms=0)
    assert producer.send("t", value=b"before").get().offset == 0
    shutil.rmtree(store)

    late = producer.send("t", value=b"after")
    with pytest.raises(KafkaStorageError, match="deleted while open"):
        late.get()
    # The partition stays refused: no later send is acknowledged (with acks=1 the sender's follow-up
    # fdatasync met the refusal too, so `send` itself may raise it).
    with pytest.raises(KafkaStorageError, match="deleted while open"):
        producer.send("t", value=b"again").get()
    producer.close()  # logs what it could not do, never raises
    assert not os.path.exists(store)  # nothing was recreated


def test_scenario71_a_transaction_cannot_commit_into_a_deleted_store(store):
    producer = txlog.Producer(store, transactional_id="tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("t", value=b"committed")
    producer.commit_transaction()
    producer.begin_transaction()
    pending = producer.send("t", value=b"never")
    shutil.rmtree(store)

    # The first write the transaction needs (registering the partition in __transaction_state, also
    # deleted) is refused; the coordinator reports a write that reached its file as of unknown outcome,
    # or, when the coordinator first re-reads the store's metadata, that file is named as missing.
    with pytest.raises(KafkaError, match="deleted while open|txlog.json: .*No such file"):
        pending.get()
    with pytest.raises(KafkaError):  # abortable now; its own reads of the deleted store fail too
        producer.commit_transaction()
    producer.close()


def test_scenario71_cli_produce_says_one_error_when_the_store_is_deleted(tmp_path):
    data = str(tmp_path / "data")
    env = dict(os.environ, PYTHONPATH=ROOT, NO_COLOR="1")
    env.pop("TXLOG_DATA_DIR", None)
    cli = [sys.executable, "-m", "cli.main", "--data-dir", data]
    subprocess.run([*cli, "topics", "create", "t"], cwd=ROOT, env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [*cli, "produce", "-t", "t"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"first\n")
    proc.stdin.flush()
    # `produce` sends what it read when its input would block: wait until the line is acknowledged
    # (the high watermark covers it), then delete the store and give it a second line.
    hw_file = os.path.join(data, "t-0", "txlog.high-watermark")
    while not (os.path.exists(hw_file) and txlog_hw(hw_file) >= 1):
        os.sched_yield()
    shutil.rmtree(data)
    out, err = proc.communicate(b"second\n", timeout=120)
    assert proc.returncode == 1, (out, err)
    assert b"Traceback" not in err
    lines = err.decode().splitlines()
    # one Error line, after produce's account of what it wrote before the failure (the first line)
    assert lines[-1].startswith("Error: ") and "deleted while open" in lines[-1], err
    assert len(lines) == 2, err
    assert lines[0].startswith(
        "Written before the failure: 1 of the 2 records sent, to t partition 0 offsets 0-0; "
        "the other 1 were not acknowledged"
    ), err
    assert not os.path.exists(data)


def txlog_hw(path: str) -> int:
    from storage.high_watermark import decode

    with open(path, "rb") as f:
        return decode(f.read())
