"""A store reads `txlog.json` again only when it changed (issue 26).

Every AddPartitionsToTxn asks for its topic's partition count; reading and parsing the metadata
each time was a tenth of a one-record transaction's registration. A look that changes nothing now
stats the file and reuses its last read while the file's change key (storage/file_stamp.py) is
the same. Checked here: repeated looks read it once; another store's change of the topics (as
another process makes it) is seen by the very next look, also when made at once after a look;
a change the store makes itself is seen as well.
"""

from __future__ import annotations

import os
import time

import pytest

import storage.store as store_module
from storage import Store
from storage.errors import UnknownTopicOrPartitionError


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The paths of the metadata reads the store makes."""
    seen: list[str] = []
    real = store_module.read_no_follow

    def read(path, *args, **kwargs):
        seen.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(store_module, "read_no_follow", read)
    return seen


def _settled(store: Store) -> None:
    """The metadata's mtime moved into the past: a key taken now may vouch for it."""
    past = time.time_ns() - 10_000_000_000
    os.utime(os.path.join(store.root, store_module.META_FILE), ns=(past, past))


def test_repeated_looks_read_the_metadata_once(store_path, reads):
    store = Store.open(store_path)
    try:
        store.create_topic("t", 3)
        _settled(store)
        reads.clear()
        for _ in range(5):
            assert store.partition_count("t") == 3
            assert store.has_topic("t")
            assert store.list_topics() == ["t"]
        assert len(reads) == 1
    finally:
        store.close()


@pytest.mark.parametrize("settle", [True, False], ids=["settled", "same-tick"])
def test_another_stores_changes_are_seen_by_the_next_look(store_path, settle):
    store, other = Store.open(store_path), Store.open(store_path)
    try:
        store.create_topic("t", 1)
        if settle:
            _settled(store)
        assert store.partition_count("t") == 1
        other.create_partitions("t", 4)
        assert store.partition_count("t") == 4
        other.create_topic("u", 2)
        assert store.list_topics() == ["t", "u"]
        other.delete_topic("t")
        assert not store.has_topic("t")
        with pytest.raises(UnknownTopicOrPartitionError):
            store.partition_count("t")
        store.create_topic("t", 2)  # its own change
        assert store.partition_count("t") == 2
        assert other.partition_count("t") == 2
    finally:
        other.close()
        store.close()
