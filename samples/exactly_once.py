"""Consume-transform-produce, exactly once: run it, kill it at any moment, run it again.

    python3 samples/exactly_once.py [STORE]

The first run seeds `numbers` with 0..999. Every run then copies what is left of it to
`squares` (each value squared) in transactions of 50, with the input offsets committed in
the same transaction, and prints how many distinct squares read_committed shows: always
1000 once a run finishes, however many runs were interrupted before.
"""

from __future__ import annotations

import sys

import txlog


def committed_values(path: str, topic: str) -> list[bytes]:
    with txlog.Consumer(path, isolation_level="read_committed") as c:
        c.subscribe([topic])
        return [r.value for r in c]


def seed(path: str) -> None:
    """All 1000 inputs in one transaction: a seed killed half-way leaves nothing visible."""
    with txlog.Producer(path, transactional_id="numbers-seeder") as p:
        p.init_transactions()  # aborts a seed that was killed before committing
        if committed_values(path, "numbers"):
            return
        p.begin_transaction()
        for i in range(1000):
            p.send("numbers", value=str(i))
        p.commit_transaction()


def main(path: str) -> None:
    with txlog.Admin(path) as admin:
        for topic in ("numbers", "squares"):
            if topic not in admin.list_topics():
                admin.create_topic(topic, 2)
    seed(path)
    with txlog.TransformLoop(
        path,
        input_topic="numbers",
        output_topic="squares",
        group_id="squarer",
        transactional_id="squarer-0",
        transaction_size=50,
        transform=lambda records: [str(int(r.value) ** 2) for r in records],
    ) as loop:
        stats = loop.run()
    print(f"this run: {stats.transactions_committed} transactions, {stats.records_out} records written")
    values = committed_values(path, "squares")
    print(f"squares holds {len(values)} records, {len(set(values))} distinct")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "txlog-data")
