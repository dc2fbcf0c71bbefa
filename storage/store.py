"""A store: a root directory laid out like a Kafka log dir, plus txlog's topic metadata.

`<root>/<topic>-<partition>/` hold the segments; `<root>/txlog.json` (replaced atomically
under `<root>/txlog-store.lock`) says which topics exist, their partition counts and
config overrides. The metadata file is the source of truth: a topic exists once its
entry is durable, and partition directories are created before it is written.

A directory with no `txlog.json` but Kafka partition directories (or `meta.properties`)
is a real Kafka data directory: it opens read-only, topics inferred from directory names.
A broker of a multi-broker cluster holds only some partitions of a topic, so there the
partitions present are the topic's readable ones (`Store.partitions`), the partition
count is the highest number seen plus one (a lower bound: the log dir does not record
the real count), and only a read of an absent partition fails.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from storage.config import CONFIG_NAMES, ConfigValue, TopicConfig, validate_overrides
from storage.durable import atomic_write, directory_fd, fsync_dir, fsync_file, in_parallel, raise_first, sync_round
from storage.errors import (
    InconsistentTopicIdError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    KafkaStorageError,
    ReadOnlyStoreError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from storage.file_stamp import change_key
from storage.lock import FileLock
from storage.log_loader import lay_out_empty_log
from storage.partition_log import PartitionLog
from storage.partition_metadata import read_topic_id
from storage.producer_ids import ProducerIdAllocator
from storage.safe_open import read_no_follow, refuse_linked_dir, refuse_links
from storage.topic_name import parse_partition_dir, validate_topic_name

if TYPE_CHECKING:  # the cleaner is imported when a partition compacts (storage/partition_log.py)
    from storage.log_cleaner import CleanerStats

META_FILE = "txlog.json"
STORE_LOCK = "txlog-store.lock"
FORMAT_VERSION = 1
MAX_PARTITIONS = 10_000


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    size_bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    config: dict[str, ConfigValue]
    overrides: dict[str, ConfigValue] = field(default_factory=dict)
    topic_id: str | None = None  # from Kafka's partition.metadata; txlog topics have none
    absent: list[int] = field(default_factory=list)  # partitions below the count this log dir lacks


class Store:
    """Entry point of the segment store; one object per process and root is the intended use."""

    def __init__(self, root: str, *, read_only: bool, kafka_layout: bool, clock: Callable[[], int] | None):
        self.root = root
        self.read_only = read_only
        self.kafka_layout = kafka_layout
        self._clock = clock
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = None if read_only else FileLock(os.path.join(root, STORE_LOCK))
        self._pids = None if read_only else ProducerIdAllocator(root)
        self.unwritable: str | None = None  # why `open_for_reading` opened it read-only
        self._closed = False
        # The topics as last read, under the file's change key (`_known_topics`): (key, topics).
        self._read_topics: tuple[tuple[int, int, int, int], dict[str, dict[str, Any]]] | None = None

    @staticmethod
    def exists(path: str | os.PathLike) -> bool:
        """Whether `path` holds a store `open` would open without creating one (txlog's or Kafka's)."""
        root = os.path.abspath(os.fspath(path))
        if not os.path.isdir(root):
            return False
        return os.path.isfile(os.path.join(root, META_FILE)) or _looks_like_kafka_dir(root)

    @classmethod
    def open(cls, path: str | os.PathLike, *, read_only: bool = False, clock: Callable[[], int] | None = None) -> Store:
        """Open (creating if missing) a store; a real Kafka data directory always opens read-only."""
        root = os.path.abspath(os.fspath(path))
        if os.path.exists(root) and not os.path.isdir(root):
            raise KafkaStorageError(f"{root} exists and is not a directory")
        refuse_links(root, itself=False)  # the root is the user's path; nothing inside it may be a link
        if os.path.isfile(os.path.join(root, META_FILE)):
            return cls(root, read_only=read_only, kafka_layout=False, clock=clock)
        if os.path.isdir(root) and _looks_like_kafka_dir(root):
            return cls(root, read_only=True, kafka_layout=True, clock=clock)
        if read_only:
            raise KafkaStorageError(f"{root} is not a txlog store or Kafka data directory")
        if os.path.isdir(root) and os.listdir(root):
            raise KafkaStorageError(f"{root} is not empty and is not a txlog store")
        os.makedirs(root, exist_ok=True)
        store = cls(root, read_only=False, kafka_layout=False, clock=clock)
        with store._writer_lock:
            if not os.path.exists(store._meta_path):
                store._write_meta({})
        return store

    @classmethod
    def open_for_reading(cls, path: str | os.PathLike, *, clock: Callable[[], int] | None = None) -> Store:
        """Open for a client whose work is reading (a Consumer, Admin): writable if this process may
        write the directory, else read-only, as `txlog consume` opens it.

        Readers never need to write (docs/reliability-scenarios.md scenario 70). A directory on
        a read-only mount, or one this user may not write, opens read-only (its writes raise
        ReadOnlyStoreError naming why). A full disk is found only by writing: its partitions
        open as read-only views when recovery's writes are refused (`PartitionLog`), and the
        writes a reader chooses to make (offset commits) fail with KafkaStorageError.
        """
        root = os.path.abspath(os.fspath(path))
        if os.path.isdir(root) and not os.access(root, os.W_OK):
            store = cls.open(root, read_only=True, clock=clock)
            read_only_mount = bool(os.statvfs(root).f_flag & os.ST_RDONLY)
            store.unwritable = "it is on a read-only file system" if read_only_mount else "this user may not write it"
            return store
        return cls.open(root, clock=clock)

    # ---- metadata ---------------------------------------------------------------------------------

    @property
    def _meta_path(self) -> str:
        return os.path.join(self.root, META_FILE)

    def _topics(self) -> dict[str, dict[str, Any]]:
        """The topics as the file says now: a fresh dict of the caller's own (a change writes it back)."""
        if self.kafka_layout:
            return _infer_kafka_topics(self.root)
        try:
            meta = json.loads(read_no_follow(self._meta_path))
        except (OSError, ValueError) as exc:
            raise KafkaStorageError(f"cannot read {self._meta_path}: {exc}") from exc
        if meta.get("version", 0) > FORMAT_VERSION:
            raise KafkaStorageError(f"{self._meta_path} has format version {meta['version']}, newer than this txlog")
        return meta.get("topics", {})

    def _known_topics(self) -> dict[str, dict[str, Any]]:
        """The topics for a look that changes nothing (shared: never modify it): read again only when the file
        changed since the last read, one stat otherwise.

        Every AddPartitionsToTxn checks its partitions against the topics (issue 26: the read and parse
        were a tenth of a one-record transaction's registration). Another process's change replaces
        the file by rename (`_write_meta`), which gives it another change key; a key too fresh to
        vouch for that (storage/file_stamp.py) is not kept, and the file is read.
        """
        if self.kafka_layout:
            return self._topics()
        try:
            key = change_key(self._meta_path)
        except OSError:
            key = None  # the read says what is wrong
        cached = self._read_topics
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        topics = self._topics()
        self._read_topics = None if key is None else (key, topics)
        return topics

    def _write_meta(self, topics: dict[str, dict[str, Any]]) -> None:
        body = {"format": "txlog", "version": FORMAT_VERSION, "topics": topics}
        atomic_write(self._meta_path, json.dumps(body, indent=2, sort_keys=True).encode() + b"\n")

    @property
    def _writer_lock(self) -> FileLock:
        """The lock every write holds; a read-only store has none (its writes stop at _check_writable)."""
        if self._lock is None:
            raise ReadOnlyStoreError(f"{self.root} is open read-only; it cannot be written")
        return self._lock

    def check_writable(self) -> None:
        """Raise ReadOnlyStoreError (saying why) unless this store may be written; KafkaStorageError if closed."""
        self._check_writable()

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaStorageError("store is closed")
        if self.read_only:
            what = "a Kafka data directory" if self.kafka_layout else "open read-only"
            why = f": {self.unwritable}" if self.unwritable else ""
            raise ReadOnlyStoreError(f"{self.root} is {what}; it cannot be written{why}")

    def _topic(self, name: str) -> dict[str, Any]:
        topic = self._known_topics().get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
        return topic

    # ---- topics -------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, Any] | None = None,
        *,
        internal: bool = False,
        dry_run: bool = False,
    ) -> None:
        """Create a topic; its partition directories and first segments exist before it is listed.

        `dry_run` checks everything a creation checks and writes nothing (Kafka's validate_only).
        Every partition's files are written first, none fsynced, then made durable together in one
        sync round (`sync_round`: each partition's checkpoint and directory fsynced, all at once, or
        one syncfs(2) where allowed; no rule orders one partition's files against another's), then
        the store directory is fsynced and the metadata names the topic: the topic exists only once
        every partition is durable (docs/reliability-scenarios.md scenario 87). If one fails, the
        topic is not created (its directories are left for the next create to replace).
        """
        self._check_writable()
        validate_topic_name(name, allow_internal=internal)
        _check_partition_count(partitions)
        overrides = validate_overrides(config or {})
        TopicConfig.from_overrides(overrides)  # the rules between configs (min/max compaction lag)
        with self._writer_lock:
            topics = self._topics()
            if name in topics:
                raise TopicAlreadyExistsError(f"topic '{name}' already exists")
            if dry_run:
                return
            self._lay_out_partitions(name, range(partitions))
            fsync_dir(self.root)
            topics[name] = {"partitions": partitions, "config": overrides}
            self._write_meta(topics)

    def _lay_out_partitions(self, name: str, partitions: range) -> None:
        """The partitions' directories, each with its first, empty segment, made durable in one sync round
        (create_topic, create_partitions); the first failure raised once every call of a step ended.

        The layouts run at once too (`in_parallel`): a file's creation may wait on the filesystem's
        journal (about 2 ms each on this project's busy VM disk), and no rule orders one partition's
        files against another's."""
        laid_out = in_parallel([partial(self._lay_out_partition, name, p) for p in partitions])
        syncs = [partial(fsync_file, path) for paths in laid_out for path in paths]
        raise_first(sync_round(syncs, directory_fd(self.root)))

    def _lay_out_partition(self, name: str, p: int) -> list[str]:
        """The directory with its first, empty segment, as Kafka creates it with the topic, nothing fsynced;
        the files and directory that need an fsync before the topic may be named.

        Read-only readers (inspect, Spark) can then open a topic nobody has written yet.
        """
        path = self.partition_dir(name, p)
        refuse_linked_dir(path)  # not a leftover of ours: rmtree would refuse it, makedirs would write through it
        if os.path.isdir(path):
            shutil.rmtree(path)  # left by a create that crashed before its metadata was written
        os.makedirs(path)
        return [*lay_out_empty_log(path), path]

    def partition_dir(self, name: str, p: int) -> str:
        """Where the partition's files live (`<root>/<topic>-<partition>`, Kafka's layout)."""
        return os.path.join(self.root, f"{name}-{p}")

    def list_topics(self, *, include_internal: bool = True) -> list[str]:
        names = sorted(self._known_topics())
        return names if include_internal else [n for n in names if not n.startswith("__")]

    def has_topic(self, name: str) -> bool:
        return name in self._known_topics()

    def partition_count(self, name: str) -> int:
        return int(self._topic(name)["partitions"])

    def partitions(self, name: str) -> list[int]:
        """The topic's readable partitions: all of them, except in a Kafka log dir holding only some."""
        topic = self._topic(name)
        return list(topic.get("present", range(int(topic["partitions"]))))

    def absent_partitions(self, name: str) -> list[int]:
        """Partitions below the count whose directories this (Kafka) log dir does not hold."""
        present = set(self.partitions(name))
        return [p for p in range(self.partition_count(name)) if p not in present]

    def topic_id(self, name: str) -> str | None:
        """The id Kafka recorded in the topic's partition.metadata files (None in a txlog store).

        Every partition must record the same id; Kafka refuses a log whose file disagrees
        with the topic (INCONSISTENT_TOPIC_ID), and so does this.
        """
        ids = {p: read_topic_id(self.partition_dir(name, p)) for p in self.partitions(name)}
        found = {i for i in ids.values() if i is not None}
        if len(found) > 1:
            listed = ", ".join(f"{p}: {i}" for p, i in sorted(ids.items()) if i is not None)
            raise InconsistentTopicIdError(f"the partitions of topic '{name}' record different topic ids ({listed})")
        return found.pop() if found else None

    def topic_overrides(self, name: str) -> dict[str, ConfigValue]:
        return dict(self._topic(name).get("config", {}))

    def topic_config(self, name: str) -> TopicConfig:
        return TopicConfig.from_overrides(self.topic_overrides(name))

    def describe_topic(self, name: str) -> TopicDescription:
        """Offsets and sizes of the readable partitions; `absent` names the ones a Kafka log dir lacks."""
        parts = []
        for p in self.partitions(name):
            log = self.partition(name, p)
            parts.append(
                PartitionDescription(
                    p,
                    log.log_start_offset,
                    log.log_end_offset,
                    log.last_stable_offset,
                    log.size_bytes,
                    len(log.segments),
                )
            )
        return TopicDescription(
            name,
            parts,
            self.topic_config(name).to_dict(),
            self.topic_overrides(name),
            topic_id=self.topic_id(name),
            absent=self.absent_partitions(name),
        )

    def alter_topic_config(
        self,
        name: str,
        set_configs: Mapping[str, Any] | None = None,
        delete_configs: list[str] | tuple[str, ...] = (),
        *,
        replace: bool = False,
        dry_run: bool = False,
    ) -> dict[str, ConfigValue]:
        """Change config overrides (as kafka-configs --alter); open partition logs pick them up.

        `replace` drops every override not in `set_configs` (Kafka's non-incremental AlterConfigs);
        `dry_run` checks and returns the overrides the change would leave, writing nothing.
        """
        self._check_writable()
        updates = validate_overrides(set_configs or {})
        unknown = [k for k in delete_configs if k not in CONFIG_NAMES]
        if unknown:
            raise InvalidConfigurationError(f"unknown topic config {', '.join(map(repr, unknown))}")
        with self._writer_lock:
            topics = self._topics()
            if name not in topics:
                raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
            overrides = {} if replace else dict(topics[name].get("config", {}))
            overrides.update(updates)
            for key in delete_configs:
                overrides.pop(key, None)
            TopicConfig.from_overrides(overrides)  # the rules between configs, before anything is written
            if dry_run:
                return overrides
            topics[name]["config"] = overrides
            self._write_meta(topics)
        config = TopicConfig.from_overrides(overrides)
        for (topic, _), log in self._logs.items():
            if topic == name:
                log.config = config
        return overrides

    def create_partitions(self, name: str, total: int, *, dry_run: bool = False) -> None:
        """Grow a topic to `total` partitions (Kafka never shrinks a topic); `dry_run` only checks."""
        self._check_writable()
        _check_partition_count(total)
        with self._writer_lock:
            topics = self._topics()
            if name not in topics:
                raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
            current = int(topics[name]["partitions"])
            if total <= current:
                raise InvalidPartitionsError(f"topic '{name}' has {current} partitions; the new count must be larger")
            if dry_run:
                return
            self._lay_out_partitions(name, range(current, total))
            fsync_dir(self.root)
            topics[name]["partitions"] = total
            self._write_meta(topics)

    def delete_topic(self, name: str) -> None:
        """Forget the topic first (atomic), then remove its directories the way Kafka does."""
        self._check_writable()
        with self._writer_lock:
            topics = self._topics()
            if name not in topics:
                raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")
            count = int(topics.pop(name)["partitions"])
            self._write_meta(topics)
            for key in [k for k in self._logs if k[0] == name]:
                self._logs.pop(key).close()
            for p in range(count):
                path = self.partition_dir(name, p)
                if os.path.islink(path):
                    os.unlink(path)  # the link goes, never what it points at (storage/safe_open.py)
                elif os.path.isdir(path):
                    doomed = f"{path}.{uuid.uuid4().hex}-delete"
                    os.rename(path, doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
            fsync_dir(self.root)

    # ---- partitions -----------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, opened (and recovered) on first use and cached for this store object."""
        if self._closed:
            raise KafkaStorageError("store is closed")
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            return log
        meta = self._topic(topic)
        count = int(meta["partitions"])
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"topic '{topic}' has no partition {partition} (partitions: 0..{int(meta['partitions']) - 1})"
            )
        path = self.partition_dir(topic, partition)
        if self.kafka_layout and partition not in self.partitions(topic):
            held = ", ".join(map(str, self.partitions(topic)))
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic '{topic}' is not in this Kafka log directory (another broker "
                f"holds it); partitions here: {held}"
            )
        if not os.path.isdir(path) and self.read_only:
            raise UnknownTopicOrPartitionError(f"partition directory {path} is missing")
        config = TopicConfig.from_overrides(meta.get("config", {}))
        kwargs = {"clock": self._clock} if self._clock is not None else {}
        log = PartitionLog(path, topic, partition, config, read_only=self.read_only, **kwargs)
        self._logs[key] = log
        return log

    def allocate_producer_id(self) -> int:
        self._check_writable()
        assert self._pids is not None, "only a read-only store has no allocator"
        return self._pids.allocate()

    def enforce_retention(self) -> int:
        """Apply retention to every partition of every topic; returns segments deleted."""
        self._check_writable()
        deleted = 0
        for name, meta in self._topics().items():
            for p in range(int(meta["partitions"])):
                deleted += self.partition(name, p).enforce_retention()
        return deleted

    def compact(
        self,
        topic: str,
        partition: int | None = None,
        *,
        force: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[CleanerStats]:
        """Clean a compacted topic's partitions (one, or all) now: what Kafka's cleaner thread does, on demand.

        `force` cleans whatever is cleanable even below min.cleanable.dirty.ratio. Returns the
        stats of the partitions that were cleaned. UnknownTopicOrPartitionError for an unknown
        topic or partition; InvalidConfigurationError when the topic's cleanup.policy has no `compact`.
        """
        self._check_writable()
        meta = self._topic(topic)
        config = TopicConfig.from_overrides(meta.get("config", {}))
        if not config.compact:
            raise InvalidConfigurationError(
                f"topic '{topic}' has cleanup.policy={config.cleanup_policy}: only a policy with compact is compacted"
            )
        targets = self.partitions(topic) if partition is None else [partition]
        logs = [self.partition(topic, p) for p in targets]  # every partition checked before any is cleaned
        out = []
        for log in logs:
            stats = log.compact(force=force, progress=progress)
            if stats is not None:
                out.append(stats)
        return out

    def close(self) -> None:
        """Close every open partition cleanly (a snapshot at each log end)."""
        if self._closed:
            return
        errors = []
        for log in self._logs.values():
            try:
                log.close()
            except Exception as exc:  # noqa: BLE001  close the rest, then raise the first failure
                errors.append(exc)
        self._logs.clear()
        if self._lock is not None:
            self._lock.close()
        if self._pids is not None:
            self._pids.close()
        self._closed = True
        if errors:
            raise errors[0]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_partition_count(partitions: int) -> None:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(
            f"partition count must be an integer from 1 to {MAX_PARTITIONS}, got {partitions!r}"
        )


def _looks_like_kafka_dir(root: str) -> bool:
    names = os.listdir(root)
    if "meta.properties" in names:
        return True
    return any(parse_partition_dir(n) and os.path.isdir(os.path.join(root, n)) for n in names)


def _infer_kafka_topics(root: str) -> dict[str, dict[str, Any]]:
    """Topics of a Kafka log dir from `<topic>-<partition>` directory names.

    `present` lists the partition directories found; the count is the highest plus one.
    """
    found: dict[str, list[int]] = {}
    for name in os.listdir(root):
        parsed = parse_partition_dir(name)
        if parsed and os.path.isdir(os.path.join(root, name)):
            topic, p = parsed
            found.setdefault(topic, []).append(p)
    return {t: {"partitions": max(ps) + 1, "present": sorted(ps), "config": {}} for t, ps in found.items()}
