"""Store: topics (create/list/describe/delete/alter/create_partitions), config validation,
docs/reliability-scenarios.md scenarios 56 (unknown topic or partition) and 57 (hostile topic
names), the producer
id allocator, and what Store.open refuses.
"""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from storage import Store
from storage.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    KafkaStorageError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from storage.records import build_batch

DEFAULTS = {
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "retention.ms": 604800000,
    "retention.bytes": -1,
    "max.message.bytes": 1048588,
    "index.interval.bytes": 4096,
    "producer.id.expiration.ms": 86400000,
    "max.producer.ids": 0,
    "cleanup.policy": "delete",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 9223372036854775807,
    "delete.retention.ms": 86400000,
}


def batch(values, ts=None) -> bytes:
    ts = int(time.time() * 1000) if ts is None else ts
    return build_batch([(None, v, None, ts) for v in values])


def snapshot_tree(root: str) -> dict[str, tuple]:
    """Every path under `root` (recursively) with its kind, size and content hash."""
    out: dict[str, tuple] = {}
    if not os.path.exists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = ("dir",)
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


# ---- topics --------------------------------------------------------------------------------------


def test_create_list_describe(store, store_path):
    assert store.list_topics() == []
    store.create_topic("orders", partitions=3, config={"segment.bytes": 1048576})
    store.create_topic("audit")
    store.create_topic("__internal_one", partitions=2, internal=True)
    assert store.list_topics() == ["__internal_one", "audit", "orders"]
    assert store.list_topics(include_internal=False) == ["audit", "orders"]
    for p in range(3):
        assert os.path.isdir(os.path.join(store_path, f"orders-{p}"))
    assert not os.path.exists(os.path.join(store_path, "orders-3"))

    store.partition("orders", 1).append(batch([b"a", b"b"]))
    d = store.describe_topic("orders")
    assert d.name == "orders"
    assert [p.partition for p in d.partitions] == [0, 1, 2]
    assert [(p.log_start_offset, p.log_end_offset, p.last_stable_offset) for p in d.partitions] == [
        (0, 0, 0),
        (0, 2, 2),
        (0, 0, 0),
    ]
    assert d.partitions[1].size_bytes > 0 and d.partitions[0].size_bytes == 0
    assert all(p.segments == 1 for p in d.partitions)
    assert d.overrides == {"segment.bytes": 1048576}
    assert d.config == {**DEFAULTS, "segment.bytes": 1048576}
    assert store.describe_topic("audit").config == DEFAULTS
    assert store.describe_topic("audit").overrides == {}


def test_topics_and_config_persist_across_reopen(store_path):
    s = Store.open(store_path)
    s.create_topic("t", partitions=2, config={"retention.ms": "3600000", "max.producer.ids": 7})
    s.partition("t", 1).append(batch([b"x"]))
    s.close()
    s = Store.open(store_path)
    assert s.list_topics() == ["t"]
    d = s.describe_topic("t")
    assert len(d.partitions) == 2
    assert d.overrides == {"retention.ms": 3600000, "max.producer.ids": 7}
    assert d.partitions[1].log_end_offset == 1
    s.close()


def test_create_existing_topic_fails_and_leaves_it_alone(store):
    store.create_topic("t", partitions=2)
    store.partition("t", 0).append(batch([b"keep"]))
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("t", partitions=5)
    assert store.partition_count("t") == 2
    assert store.partition("t", 0).log_end_offset == 1


@pytest.mark.parametrize("count", [0, -1, 10_001, True, 1.5, "2"])
def test_bad_partition_count(store, store_path, count):
    before = snapshot_tree(store_path)
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("t", partitions=count)
    assert store.list_topics() == []
    assert snapshot_tree(store_path) == before


def test_delete_topic(store, store_path):
    store.create_topic("t", partitions=2)
    store.create_topic("other")
    store.partition("t", 0).append(batch([b"gone"]))
    store.partition("other", 0).append(batch([b"kept"]))
    store.delete_topic("t")
    assert store.list_topics() == ["other"]
    leftovers = [n for n in os.listdir(store_path) if n.startswith(("t-", "t."))]
    assert leftovers == []
    with pytest.raises(UnknownTopicOrPartitionError):
        store.partition("t", 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.describe_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("t")
    # recreated under the same name it starts empty
    store.create_topic("t", partitions=1)
    assert store.partition("t", 0).log_end_offset == 0
    assert store.partition("other", 0).log_end_offset == 1


def test_alter_topic_config(store):
    store.create_topic("t", partitions=1, config={"segment.bytes": 1048576})
    log = store.partition("t", 0)
    assert store.alter_topic_config("t", {"max.message.bytes": "200", "retention.ms": -1}) == {
        "segment.bytes": 1048576,
        "max.message.bytes": 200,
        "retention.ms": -1,
    }
    assert store.describe_topic("t").config["max.message.bytes"] == 200
    # the open partition log picks the change up
    with pytest.raises(RecordTooLargeError):
        log.append(batch([b"x" * 300]))
    assert store.alter_topic_config("t", delete_configs=["max.message.bytes"]) == {
        "segment.bytes": 1048576,
        "retention.ms": -1,
    }
    assert store.describe_topic("t").config["max.message.bytes"] == DEFAULTS["max.message.bytes"]
    assert log.append(batch([b"x" * 300])).base_offset == 0


@pytest.mark.parametrize(
    "config",
    [
        {"no.such.key": 1},
        {"cleanup.policy": "compact,shred"},
        {"cleanup.policy": "delete,,compact"},
        {"min.cleanable.dirty.ratio": 1.5},
        {"min.cleanable.dirty.ratio": "nan"},
        {"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5},
        {"delete.retention.ms": -1},
        {"segment.bytes": "abc"},
        {"segment.bytes": 13},
        {"segment.bytes": 2**31},
        {"segment.bytes": None},
        {"segment.bytes": True},
        {"retention.ms": -2},
        {"retention.bytes": "1.5"},
        {"max.message.bytes": -1},
        {"producer.id.expiration.ms": 0},
        {"max.producer.ids": -1},
    ],
)
def test_bad_config_is_rejected_everywhere(store, store_path, config):
    before = snapshot_tree(store_path)
    with pytest.raises(InvalidConfigurationError):
        store.create_topic("t", partitions=1, config=config)
    assert store.list_topics() == []
    assert snapshot_tree(store_path) == before
    store.create_topic("t", partitions=1, config={"segment.bytes": 1048576})
    before = snapshot_tree(store_path)
    with pytest.raises(InvalidConfigurationError):
        store.alter_topic_config("t", config)
    assert store.topic_overrides("t") == {"segment.bytes": 1048576}
    assert snapshot_tree(store_path) == before


def test_alter_delete_of_unknown_key_is_rejected(store):
    store.create_topic("t", partitions=1, config={"segment.bytes": 1048576})
    with pytest.raises(InvalidConfigurationError):
        store.alter_topic_config("t", delete_configs=["no.such.key"])
    assert store.topic_overrides("t") == {"segment.bytes": 1048576}


def test_dry_runs_check_everything_and_write_nothing(store, store_path):
    store.create_topic("t", partitions=1, config={"segment.bytes": 1048576})
    before = snapshot_tree(store_path)
    store.create_topic("new", partitions=2, config={"retention.ms": 5}, dry_run=True)
    assert store.alter_topic_config("t", {"retention.ms": 5}, dry_run=True) == {
        "segment.bytes": 1048576,
        "retention.ms": 5,
    }
    store.create_partitions("t", 3, dry_run=True)
    assert snapshot_tree(store_path) == before
    assert (store.list_topics(), store.partition_count("t")) == (["t"], 1)
    assert store.topic_overrides("t") == {"segment.bytes": 1048576}
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("t", dry_run=True)
    with pytest.raises(InvalidConfigurationError):
        store.create_topic("new", config={"retention.ms": -2}, dry_run=True)
    with pytest.raises(InvalidPartitionsError):
        store.create_partitions("t", 1, dry_run=True)
    assert snapshot_tree(store_path) == before


def test_alter_with_replace_keeps_only_the_configs_given(store):
    store.create_topic("t", partitions=1, config={"segment.bytes": 1048576, "retention.ms": 5})
    assert store.alter_topic_config("t", {"retention.ms": 7}, replace=True) == {"retention.ms": 7}
    assert store.topic_overrides("t") == {"retention.ms": 7}
    assert store.alter_topic_config("t", {}, replace=True) == {}
    assert store.topic_config("t").retention_ms == DEFAULTS["retention.ms"]


def test_create_partitions(store, store_path):
    store.create_topic("t", partitions=1)
    store.partition("t", 0).append(batch([b"p0"]))
    store.create_partitions("t", 3)
    assert store.partition_count("t") == 3
    assert [p.partition for p in store.describe_topic("t").partitions] == [0, 1, 2]
    assert store.partition("t", 2).append(batch([b"p2"])).base_offset == 0
    assert store.partition("t", 0).log_end_offset == 1
    for total in (3, 2, 0):
        with pytest.raises(InvalidPartitionsError):
            store.create_partitions("t", total)
    assert store.partition_count("t") == 3
    with pytest.raises(UnknownTopicOrPartitionError):
        store.create_partitions("nosuch", 4)
    assert not os.path.exists(os.path.join(store_path, "nosuch-0"))
    store.close()
    s = Store.open(store_path)
    assert s.partition_count("t") == 3
    assert s.partition("t", 2).log_end_offset == 1
    s.close()


# ---- docs/reliability-scenarios.md scenario 56: unknown topic or bad partition -------------------------


def test_scenario56_unknown_topic_or_partition_creates_nothing(store, store_path, tmp_path):
    store.create_topic("t", partitions=3)
    store.partition("t", 0).append(batch([b"existing"]))
    store.partition("t", 0).append(batch([b"existing2"]))
    before_root = snapshot_tree(store_path)
    before_parent = sorted(os.listdir(tmp_path))

    with pytest.raises(UnknownTopicOrPartitionError):
        store.partition("nosuch", 0)
    for bad in (-1, 3, 4, 1000, "x", "0", "1", 1.0, None, True):
        with pytest.raises(UnknownTopicOrPartitionError):
            store.partition("t", bad)
    for call in (
        lambda: store.describe_topic("nosuch"),
        lambda: store.delete_topic("nosuch"),
        lambda: store.alter_topic_config("nosuch", {"retention.ms": 1}),
        lambda: store.create_partitions("nosuch", 2),
        lambda: store.partition_count("nosuch"),
    ):
        with pytest.raises(UnknownTopicOrPartitionError):
            call()

    assert snapshot_tree(store_path) == before_root
    assert sorted(os.listdir(tmp_path)) == before_parent
    assert store.list_topics() == ["t"]
    log = store.partition("t", 0)
    assert [(r.offset, r.value) for b in log.read(0) for r in b.records()] == [(0, b"existing"), (1, b"existing2")]


# ---- docs/reliability-scenarios.md scenario 57: hostile topic names ------------------------------------

HOSTILE = [
    "a/b",
    "/abs",
    "../escape",
    "..",
    ".",
    "a\x00b",
    "\x00",
    "-leading",
    "--config",
    "",
    "x" * 250,
    "a b",
    "a\\b",
    "t\n",
    "tópico",
    "__internal",
]


@pytest.mark.parametrize("name", HOSTILE, ids=[repr(n)[:20] for n in HOSTILE])
def test_scenario57_hostile_topic_names(store, store_path, tmp_path, name):
    store.create_topic("t", partitions=1)
    root_before = snapshot_tree(store_path)
    parent_before = snapshot_tree(str(tmp_path))
    grandparent_before = sorted(os.listdir(tmp_path.parent))

    with pytest.raises(InvalidTopicError):
        store.create_topic(name, partitions=2)
    # operations on an existing topic of that name can only fail; none may touch the disk
    with pytest.raises(KafkaError):
        store.partition(name, 0)
    with pytest.raises(KafkaError):
        store.delete_topic(name)
    with pytest.raises(KafkaError):
        store.alter_topic_config(name, {"retention.ms": 1})
    with pytest.raises(KafkaError):
        store.create_partitions(name, 3)

    assert snapshot_tree(store_path) == root_before
    assert snapshot_tree(str(tmp_path)) == parent_before
    assert sorted(os.listdir(tmp_path.parent)) == grandparent_before
    assert store.list_topics() == ["t"]


def test_topic_name_limits(store, store_path):
    longest = "y" * 249
    store.create_topic(longest)
    assert os.path.isdir(os.path.join(store_path, f"{longest}-0"))
    for name in ("a.b", "A-1", "x..y", "._-", "t-0"):
        store.create_topic(name)
    store.create_topic("__internal", internal=True)
    assert set(store.list_topics()) == {longest, "a.b", "A-1", "x..y", "._-", "t-0", "__internal"}


# ---- producer ids --------------------------------------------------------------------------------------


def test_producer_id_allocator_is_unique_and_persistent(store_path):
    s1 = Store.open(store_path)
    s2 = Store.open(store_path)  # a second handle on the same root, as a second process would have
    ids = []
    for i in range(60):
        ids.append((s1 if i % 3 else s2).allocate_producer_id())
    assert len(set(ids)) == len(ids)
    assert all(i >= 0 for i in ids)
    s1.close()
    s2.close()
    s3 = Store.open(store_path)
    later = [s3.allocate_producer_id() for _ in range(5)]
    assert min(later) > max(ids)
    assert len(set(later)) == 5
    s3.close()


# ---- what Store.open refuses ------------------------------------------------------------------------------


def test_non_store_non_empty_directory_is_refused(tmp_path):
    root = tmp_path / "notastore"
    root.mkdir()
    (root / "notes.txt").write_text("precious")
    (root / "sub").mkdir()
    before = snapshot_tree(str(root))
    with pytest.raises(KafkaStorageError):
        Store.open(str(root))
    with pytest.raises(KafkaStorageError):
        Store.open(str(root), read_only=True)
    assert snapshot_tree(str(root)) == before


def test_read_only_open_of_missing_directory_creates_nothing(tmp_path):
    root = tmp_path / "missing"
    with pytest.raises(KafkaStorageError):
        Store.open(str(root), read_only=True)
    assert not root.exists()


def test_open_creates_missing_root_and_reopens_empty(tmp_path):
    root = tmp_path / "a" / "b" / "store"
    s = Store.open(str(root))
    assert s.list_topics() == []
    s.close()
    s = Store.open(str(root))
    assert s.list_topics() == []
    s.close()


def test_open_on_a_regular_file_is_a_typed_error(tmp_path):
    path = tmp_path / "afile"
    path.write_bytes(b"data")
    with pytest.raises(KafkaError):
        Store.open(str(path))
    assert path.read_bytes() == b"data"


def test_closed_store_refuses_use(store_path):
    s = Store.open(store_path)
    s.create_topic("t")
    s.close()
    s.close()  # idempotent
    with pytest.raises(KafkaStorageError):
        s.partition("t", 0)
    with pytest.raises(KafkaStorageError):
        s.create_topic("u")
    with pytest.raises(KafkaStorageError):
        s.allocate_producer_id()
