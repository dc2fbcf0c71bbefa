"""Producer-id allocation that is unique across processes and survives kill -9.

The high-water mark lives in `<root>/producer-ids.json` and is replaced atomically
under an flock before an id is handed out, so the persisted value is always ≥ every id
ever returned (docs/reliability-scenarios.md scenario 37), whatever moment a process dies at.
"""

from __future__ import annotations

import json
import os

from storage.durable import atomic_write
from storage.errors import KafkaStorageError
from storage.lock import FileLock
from storage.safe_open import read_no_follow

FILENAME = "producer-ids.json"
LOCK_NAME = "producer-ids.lock"


class ProducerIdAllocator:
    def __init__(self, root: str):
        self.path = os.path.join(root, FILENAME)
        self._lock = FileLock(os.path.join(root, LOCK_NAME))

    def allocate(self, count: int = 1) -> int:
        """Reserve `count` consecutive ids and return the first."""
        with self._lock:
            first = self.next_id()
            atomic_write(self.path, json.dumps({"version": 1, "next_producer_id": first + count}).encode())
            return first

    def next_id(self) -> int:
        """The id the next allocation returns (0 on a fresh store)."""
        try:
            data = json.loads(read_no_follow(self.path))
            return int(data["next_producer_id"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError) as exc:
            raise KafkaStorageError(f"{self.path} is damaged: {exc}") from exc

    def close(self) -> None:
        self._lock.close()
