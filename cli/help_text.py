"""Examples at the end of every verb's `--help` (click's epilog), in one table.

Two or three command lines per verb, each one a user can paste. The verbs whose docstring
already ends with examples (`process`, `groups describe`) are not repeated here. Every verb's
help also says that the global options may follow the verb (cli.flags).
"""

from __future__ import annotations

# The one-line summaries of `txlog --help` and `txlog GROUP --help` (click cuts a docstring's first
# sentence at the width of the list, mid-word); each fits an 80-column terminal whole.
# `txlog --help` lists the verbs from here without importing them (cli.main), so every verb has one.
SUMMARIES: dict[str, str] = {
    "produce": "Write records, one per line (kafka-console-producer, kcat -P).",
    "consume": "Print records of a topic (kafka-console-consumer, kcat -C).",
    "commit": "Commit the open transaction of a transactional id.",
    "abort": "Abort an open transaction, by id or where it hangs.",
    "demo": "Show what the segment store guarantees, in a few seconds.",
    "inspect": "Dump log, index and snapshot files (kafka-dump-log.sh).",
    "verify": "Check every file and transaction of the store.",
    "process": "Exactly-once consume-transform-produce through a command.",
    "sql": "SQL over the store, in DuckDB or Spark (a view per topic).",
    "export": "Export committed records to Parquet, Delta or Iceberg, once.",
    "topics": "Create, list, describe, alter, delete topics (kafka-topics).",
    "transactions": "List, describe and repair transactions (kafka-transactions).",
    "groups": "List, describe, reset and delete consumer group offsets.",
    "serve": "Answer Kafka clients and tools over the wire (a broker).",
    "mirror": "Copy topics to or from a Kafka cluster, exactly once.",
    "topics create": "Create a topic.",
    "topics list": "Every topic: partitions, size, end offsets.",
    "topics describe": "Describe topics: partitions, configs, offsets.",
    "topics compact": "Compact a topic now (latest record per key).",
    "transactions list": "List transactional ids and their states.",
    "transactions describe": "Describe one transactional id.",
    "transactions describe-producers": "The producers a partition remembers.",
    "transactions find-hanging": "Find open transactions no coordinator will end.",
    "transactions abort": "Abort a hanging transaction in one partition.",
    "transactions expire": "Expire a transactional id now (fault rehearsal).",
    "transactions force-terminate": "Abort an id's open transaction, 2PC ones too.",
    "groups list": "List consumer groups.",
    "groups describe": "Describe groups: offsets and lag, members or state.",
    "groups reset-offsets": "Plan or write new committed offsets of a group.",
    "groups delete-offsets": "Delete a group's committed offsets.",
}

# Other programs' command lines a verb's help shows after its own examples (they are not txlog's,
# so tests/cli/test_help_examples.py, which parses every example, does not read them).
CLIENT_EXAMPLES: dict[str, tuple[str, ...]] = {
    "serve": (
        "kcat -b 127.0.0.1:9092 -L",
        "kafka-console-consumer.sh --bootstrap-server 127.0.0.1:9092 --topic orders \\",
        "    --from-beginning --isolation-level read_committed",
        "kafka-transactions.sh --bootstrap-server 127.0.0.1:9092 list",
        "python3 -c \"from confluent_kafka import Producer; p = Producer({'bootstrap.servers':",
        "    '127.0.0.1:9092', 'transactional.id': 'app-1'}); p.init_transactions()\"",
    ),
}

GLOBALS_NOTE = "Global options (--data-dir DIR, -q) may also be given after the verb."

EXAMPLES: dict[str, tuple[str, ...]] = {
    "mirror": (
        "txlog mirror --to kafka1:9092 --all                 # every topic, then exit",
        "txlog mirror --to kafka1:9092 -t orders --follow    # keep copying until Ctrl-C",
        "txlog mirror --to kafka1:9092 --all --carry-group billing  # + its positions",
        "txlog mirror --to kafka1:9093 --all -X security.protocol=SSL -X ssl.ca.location=ca.pem",
        "txlog mirror --from kafka1:9092 -t orders",
    ),
    "serve": (
        "txlog serve                                        # 127.0.0.1:9092 on ./txlog-data",
        "txlog --data-dir /srv/log serve --listen 127.0.0.1:0   # a free port, printed on stdout",
        "txlog serve --fault EndTxn:COORDINATOR_NOT_AVAILABLE:2   # rehearse a commit's retries",
    ),
    "produce": (
        "seq 1000 | txlog produce -t orders",
        "txlog produce -t orders -K : keyed.txt              # each line is KEY:VALUE",
        "txlog produce -t orders --transactional-id load-1 batch.txt   # all or nothing",
    ),
    "consume": (
        "txlog consume -t orders -o beginning -e",
        "txlog consume -t orders -g billing --follow -J      # kcat's JSON envelope",
        "txlog consume -t orders -o -10 --property print.key=true --timestamp-format iso",
    ),
    "commit": (
        "txlog produce -t orders --transactional-id load-1 --no-commit batch.txt",
        "txlog commit --transactional-id load-1",
        "txlog commit --transactional-id load-1 --output json",
    ),
    "abort": (
        "txlog abort --transactional-id load-1",
        "txlog transactions find-hanging",
        "txlog abort -t orders -p 0 --start-offset 1200",
    ),
    "demo": (
        "txlog demo",
        "txlog --data-dir /tmp/demo demo",
    ),
    "inspect": (
        "txlog inspect txlog-data/orders-0/00000000000000000000.log --deep-iteration",
        "txlog inspect --files a.log,a.index --verify-index-only",
        "txlog inspect /var/lib/kafka/data/orders-0 --print-data-log --output jsonl",
    ),
    "verify": (
        "txlog verify",
        "txlog verify -t orders --output json",
        "txlog verify --progress 2> verify.log     # periodic lines when stderr is not a terminal",
    ),
    "sql": (
        'txlog sql "SELECT key, count(*) FROM orders GROUP BY key"',
        "txlog sql --file report.sql --output csv",
        "txlog sql          # an interactive shell on a terminal",
        'txlog sql --engine spark "SELECT count(*) FROM orders"   # in a local Spark session',
    ),
    "export": (
        "txlog export --format delta --to lake/orders orders",
        "txlog export --format parquet --to lake/raw orders payments   # again later: adds only what is new",
        "txlog export --format iceberg --to lake/orders-ice orders --progress",
    ),
    "topics create": (
        "txlog topics create orders --partitions 3",
        "txlog topics create orders --config retention.ms=86400000 --if-not-exists",
        "txlog topics create orders.eu_v2     # letters, digits, '.', '_', '-' (not first)",
    ),
    "topics list": (
        "txlog topics list",
        "txlog topics list --exclude-internal --output json",
        "txlog topics list --output csv | tail -n +2 | cut -d, -f1    # names only",
    ),
    "topics describe": (
        "txlog topics describe orders",
        "txlog topics describe --output table",
        "txlog topics describe orders --output json",
    ),
    "topics alter": (
        "txlog topics alter orders --partitions 6",
        "txlog topics alter orders --config retention.ms=3600000 --delete-config segment.bytes",
    ),
    "topics compact": (
        "txlog topics create prices --config cleanup.policy=compact --config segment.bytes=1048576",
        "txlog topics compact prices",
        "txlog topics compact prices --partition 0 --output json",
    ),
    "topics delete": (
        "txlog topics delete orders",
        "txlog topics delete orders --if-exists",
    ),
    "transactions list": (
        "txlog transactions list",
        "txlog transactions list --state Ongoing --duration-filter 60000",
        "txlog transactions list --no-sweep --output json",
    ),
    "transactions describe": (
        "txlog transactions describe --transactional-id load-1",
        "txlog transactions describe --transactional-id load-1 --output json",
    ),
    "transactions describe-producers": (
        "txlog transactions describe-producers -t orders -p 0",
        "txlog transactions describe-producers -t orders -p 0 --output table",
    ),
    "transactions find-hanging": (
        "txlog transactions find-hanging",
        "txlog transactions find-hanging -t orders --max-transaction-timeout 5",
    ),
    "transactions abort": (
        "txlog transactions find-hanging -t orders",
        "txlog transactions abort -t orders -p 0 --start-offset 1200",
    ),
    "transactions expire": (
        "txlog transactions expire --transactional-id load-1",
        "txlog transactions expire --transactional-id load-1 --output json",
    ),
    "transactions force-terminate": (
        "txlog transactions list",
        "txlog transactions force-terminate --transactional-id txlog-spark-q1-7-0",
    ),
    "groups list": (
        "txlog groups list",
        "txlog groups list --state --output json",
    ),
    "groups reset-offsets": (
        "txlog groups reset-offsets -g billing --topic orders --to-earliest",
        "txlog groups reset-offsets -g billing --topic orders:0,1 --shift-by -100 --execute",
        "txlog groups reset-offsets -g billing --all-topics --to-datetime 2026-01-31T09:00:00.000",
        "txlog groups reset-offsets -g billing --topic orders --by-duration PT1H --export > plan.csv",
        "txlog groups reset-offsets -g billing --from-file plan.csv --execute",
    ),
    "groups delete-offsets": (
        "txlog groups delete-offsets -g billing --topic orders",
        "txlog groups delete-offsets -g billing --topic orders:0 --output json",
    ),
}


def epilog(path: str) -> str | None:
    """The epilog for the verb at `path` ("consume", "topics create"); click keeps `\\b` blocks as written."""
    lines = EXAMPLES.get(path)
    if lines is None:
        return "\b\n" + GLOBALS_NOTE
    text = "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
    clients = CLIENT_EXAMPLES.get(path)
    if clients:
        text += "\n\n\b\nKafka's clients and tools against it:\n" + "\n".join(f"  {line}" for line in clients)
    return text + "\n\n\b\n" + GLOBALS_NOTE
