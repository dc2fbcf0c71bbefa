"""KIP-939's PreparedTxnState: which transaction a two-phase-commit participant prepared.

`Producer.prepare_transaction()` returns one; the external transaction manager keeps it (as
text, `str(state)`) next to its own decision, and after a crash a new instance of the
transactional id finds the transaction still open (`init_transactions(keep_prepared_txn=True)`)
and calls `complete_transaction(state)`: the transaction commits only if it is the one the
state names. A transaction is named by the producer id and epoch that wrote it (the epoch
changes with every transaction under transaction protocol v2), so a state kept from an older
or a newer transaction never commits this one.

As Kafka's `org.apache.kafka.clients.producer.PreparedTxnState`: the text is "producerId:epoch",
the state of no transaction is (-1, -1), written as the empty string, and parsing accepts only
that or two non-negative numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from txlog.errors import IllegalArgumentError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    """The producer id and epoch of a prepared transaction; (-1, -1) means no transaction."""

    producer_id: int = NO_PRODUCER_ID
    epoch: int = NO_PRODUCER_EPOCH

    @property
    def has_transaction(self) -> bool:
        """Whether this names a transaction (Kafka's hasTransaction(): the producer id is not -1)."""
        return self.producer_id != NO_PRODUCER_ID

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}" if self.has_transaction else ""

    @classmethod
    def parse(cls, text: str | None) -> PreparedTxnState:
        """Read back `str(state)`; IllegalArgumentError for anything else (Kafka's IllegalArgumentException)."""
        if text is None or text == "":
            return cls()
        parts = text.split(":")
        if len(parts) != 2 or not all(p.isdigit() and p.isascii() for p in parts):
            raise IllegalArgumentError(
                f"invalid prepared transaction state {text!r}: expected 'producerId:epoch', both numbers >= 0"
            )
        producer_id, epoch = int(parts[0]), int(parts[1])
        if producer_id >= 1 << 63 or epoch > 32767:
            raise IllegalArgumentError(
                f"invalid prepared transaction state {text!r}: producer id or epoch out of range"
            )
        return cls(producer_id, epoch)
