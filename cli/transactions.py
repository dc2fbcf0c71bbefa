"""`txlog transactions ...` (kafka-transactions.sh) and the top-level `commit` / `abort` verbs.

Everything is read from the store; txlog has one "broker", 0, which coordinates every
transactional id (the JSON output adds the `__transaction_state` partition that owns it).

Store modes: `describe-producers` opens the store read-only. `list`, `describe` and
`find-hanging` open it writable by default so that the coordinator's sweep first times out
expired transactions and rolls forward decided ones -- what a running broker would already
have done -- and `--no-sweep` opens it read-only instead (nothing written; a Kafka data
directory is always read-only). `abort`, `commit` write.

Exit codes beyond the usual ones: 4 when the outcome of `commit`/`abort --transactional-id`
is ambiguous (the decision may or may not be durable); run the same command again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import (
    USAGE,
    CommandError,
    complete_topic_names,
    complete_transactional_ids,
    open_store,
)
from cli.output import (
    ROW_FORMATS,
    ROW_FORMATS_HELP,
    OutputFormat,
    ResultOutputOption,
    emit,
    output_option,
    pretty_print_table,
    print_result,
    status,
)

if TYPE_CHECKING:  # pragma: no cover
    from txlog.clients.admin import Admin
    from txlog.clients.prepared_txn_state import PreparedTxnState
    from txlog.schemas.transaction_log import TxnState

AMBIGUOUS = 4  # exit code: the transaction's outcome is unknown (docs/reliability-scenarios.md scenario 26)
BROKER_ID = 0  # the one "broker" of a store

app = typer.Typer(
    help="List, describe and repair transactions (kafka-transactions.sh).",
    short_help="List, describe and repair transactions (kafka-transactions).",
    no_args_is_help=True,
)

if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    OutputOption = OutputFormat
else:
    OutputOption = output_option(*ROW_FORMATS, help=ROW_FORMATS_HELP)
NoSweepOption = Annotated[
    bool,
    typer.Option(
        "--no-sweep",
        help="Open the store read-only: do not time out expired transactions first.",
    ),
]
TopicOption = Annotated[
    str,
    typer.Option(
        "--topic",
        "-t",
        metavar="TOPIC",
        help="Topic name.",
        autocompletion=complete_topic_names,
        show_default=False,
    ),
]


def transactional_id_option(help: str) -> Any:
    """`--transactional-id ID` as every verb of this group declares it; only the help differs."""
    return typer.Option(
        "--transactional-id",
        metavar="ID",
        help=help,
        show_default=False,
        autocompletion=complete_transactional_ids,
    )


PartitionOption = Annotated[int, typer.Option("--partition", "-p", min=0, help="Partition number.", show_default=False)]
BrokerIdOption = Annotated[
    int | None,
    typer.Option(
        "--broker-id",
        help="Accepted for kafka-transactions compatibility; txlog's only broker is 0.",
        show_default=False,
    ),
]

LIST_COLUMNS = (
    ("TransactionalId", "transactionalId"),
    ("Coordinator", "coordinator"),
    ("ProducerId", "producerId"),
    ("TransactionState", "transactionState"),
    ("TwoPhaseCommit", "twoPhaseCommit"),  # txlog's: a KIP-939 participant (kafka-transactions has no column)
)
DESCRIBE_COLUMNS = (
    ("CoordinatorId", "coordinatorId"),
    ("TransactionalId", "transactionalId"),
    ("ProducerId", "producerId"),
    ("ProducerEpoch", "producerEpoch"),
    ("TransactionState", "transactionState"),
    ("TransactionTimeoutMs", "transactionTimeoutMs"),
    ("CurrentTransactionStartTimeMs", "currentTransactionStartTimeMs"),
    ("TransactionDurationMs", "transactionDurationMs"),
    ("TopicPartitions", "topicPartitions"),
    ("TwoPhaseCommit", "twoPhaseCommit"),  # txlog's, as in `list`
    ("PreparedTxnState", "preparedTxnState"),  # txlog's: what `commit --prepared-state` must be given
)
PRODUCER_COLUMNS = (
    ("ProducerId", "producerId"),
    ("ProducerEpoch", "producerEpoch"),
    ("LatestCoordinatorEpoch", "latestCoordinatorEpoch"),
    ("LastSequence", "lastSequence"),
    ("LastTimestamp", "lastTimestamp"),
    ("CurrentTransactionStartOffset", "currentTransactionStartOffset"),
)
HANGING_COLUMNS = (
    ("Topic", "topic"),
    ("Partition", "partition"),
    ("ProducerId", "producerId"),
    ("ProducerEpoch", "producerEpoch"),
    ("CoordinatorEpoch", "coordinatorEpoch"),
    ("StartOffset", "startOffset"),
    ("LastTimestamp", "lastTimestamp"),
    ("Duration(min)", "durationMin"),
)


def _parse_state(text: str) -> TxnState:
    """A state by Kafka's name or ours, case, `_` and `-` ignored (Ongoing, prepare-commit, COMPLETE_ABORT)."""
    from txlog.schemas.transaction_log import TxnState

    wanted = text.replace("_", "").replace("-", "").lower()
    for state in TxnState:
        if state.name.replace("_", "").lower() == wanted:
            return state
    known = ", ".join(s.admin_name for s in TxnState if s.admin_name == s.kafka_name)  # the client's states
    raise typer.BadParameter(f"'{text}' is not a transaction state (one of {known})", param_hint="'--state'")


def _check_broker(broker_id: int | None) -> None:
    if broker_id is not None and broker_id != BROKER_ID:
        raise CommandError(f"there is no broker {broker_id}: a txlog store has one broker, {BROKER_ID}")


@contextmanager
def _admin(ctx: typer.Context, *, read_only: bool) -> Iterator[Admin]:
    from txlog.clients.admin import Admin

    with open_store(ctx, read_only=read_only) as store:
        yield Admin(store)


def _now_ms() -> int:
    return int(time.time() * 1000)


# ---- list -------------------------------------------------------------------------------------------


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            metavar="STATE",
            help="Only transactions in this state (repeatable), e.g. Ongoing.",
        ),
    ] = None,
    duration_filter: Annotated[
        int,
        typer.Option(
            "--duration-filter",
            metavar="MS",
            help="Only transactions open longer than MS milliseconds (< 0: all), as KIP-994.",
        ),
    ] = -1,
    no_sweep: NoSweepOption = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """List transactional ids: TransactionalId, Coordinator, ProducerId, TransactionState."""
    states = None if not state else [_parse_state(s) for s in state]
    with _admin(ctx, read_only=no_sweep) as admin:  # no store: 'no store at ...', not an empty list
        found = admin.list_transactions(states)
    if duration_filter >= 0:
        from txlog.schemas.transaction_log import TxnState

        now = _now_ms()
        found = [d for d in found if d.state.state == TxnState.ONGOING and now - d.state.start_ms >= duration_filter]
    rows = [
        {
            "transactionalId": d.transactional_id,
            "coordinator": BROKER_ID,
            "producerId": d.state.producer_id,
            "transactionState": d.state.state.admin_name,
            "twoPhaseCommit": d.state.is_two_phase_commit,
            "coordinatorPartition": d.coordinator_partition,
        }
        for d in found
    ]
    emit(rows, LIST_COLUMNS, output, text=pretty_print_table)


# ---- describe ---------------------------------------------------------------------------------------


@app.command("describe")
def describe(
    ctx: typer.Context,
    transactional_id: Annotated[
        str,
        transactional_id_option("The transactional id to describe."),
    ],
    no_sweep: NoSweepOption = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Describe one transactional id: producer, epoch, state, timeout, open partitions.

    For a two-phase commit (KIP-939) id, PreparedTxnState is the producer id:epoch of its open
    transaction: the state its transaction manager must have kept to commit it.
    """
    from txlog.coordinator.transaction_coordinator import prepared_txn_ids

    with _admin(ctx, read_only=no_sweep) as admin:
        d = admin.describe_transaction(transactional_id)
    if d is None:
        raise CommandError(f"transactional id '{transactional_id}' not found")
    v = d.state
    # Kafka's DescribeTransactions returns the last transaction's start while the state keeps one
    # (a completed transaction too) and kafka-transactions prints None only for -1 (Empty)
    started = v.start_ms >= 0
    row = {
        "coordinatorId": BROKER_ID,
        "transactionalId": d.transactional_id,
        "producerId": v.producer_id,
        "producerEpoch": v.producer_epoch,
        "transactionState": v.state.admin_name,
        "transactionTimeoutMs": v.timeout_ms,
        "currentTransactionStartTimeMs": v.start_ms if started else None,
        "transactionDurationMs": _now_ms() - v.start_ms if started else None,
        "topicPartitions": [f"{t}-{p}" for t, p in v.partitions],
        "twoPhaseCommit": v.is_two_phase_commit,
        "preparedTxnState": None if (ids := prepared_txn_ids(v)) is None else f"{ids.producer_id}:{ids.epoch}",
        "coordinatorPartition": d.coordinator_partition,
    }
    emit([row], DESCRIBE_COLUMNS, output, text=pretty_print_table, single=True)


# ---- describe-producers -----------------------------------------------------------------------------


@app.command("describe-producers")
def describe_producers(
    ctx: typer.Context,
    topic: TopicOption,
    partition: PartitionOption,
    broker_id: BrokerIdOption = None,
    output: OutputOption = OutputFormat.text,
) -> None:
    """The producers a partition remembers, with the start offset of each one's open transaction."""
    _check_broker(broker_id)
    from txlog.topic_partition import TopicPartition

    with _admin(ctx, read_only=True) as admin:
        states = admin.describe_producers(TopicPartition(topic, partition))
    rows = [
        {
            "producerId": s.producer_id,
            "producerEpoch": s.producer_epoch,
            "latestCoordinatorEpoch": s.coordinator_epoch if s.coordinator_epoch >= 0 else None,
            "lastSequence": s.last_sequence,
            "lastTimestamp": s.last_timestamp,
            "currentTransactionStartOffset": (
                s.current_transaction_start_offset if s.current_transaction_start_offset >= 0 else None
            ),
        }
        for s in states
    ]
    emit(rows, PRODUCER_COLUMNS, output, text=pretty_print_table)


# ---- find-hanging -----------------------------------------------------------------------------------


@app.command("find-hanging")
def find_hanging(
    ctx: typer.Context,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="Only this topic (default: every topic).",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ] = None,
    partition: Annotated[
        int | None,
        typer.Option(
            "--partition",
            "-p",
            min=0,
            help="Only this partition (needs --topic).",
            show_default=False,
        ),
    ] = None,
    broker_id: BrokerIdOption = None,
    max_transaction_timeout: Annotated[
        int,
        typer.Option(
            "--max-transaction-timeout",
            metavar="MINUTES",
            min=0,
            help="A transaction open longer than this is hanging even if its coordinator knows it.",
        ),
    ] = 15,
    no_sweep: NoSweepOption = False,
    output: OutputOption = OutputFormat.text,
) -> None:
    """Open transactions no coordinator transaction will ever end (or open too long)."""
    _check_broker(broker_id)
    if partition is not None and topic is None:
        raise CommandError("--partition needs --topic", exit_code=USAGE)
    with _admin(ctx, read_only=no_sweep) as admin:
        found = admin.find_hanging_transactions(None if topic is None else [topic], max_transaction_timeout * 60_000)
        rows = []
        for h in found:
            if partition is not None and h.partition != partition:
                continue
            state = admin.store.partition(h.topic, h.partition).producer_states().get(h.producer_id, {})
            coordinator_epoch = state.get("coordinator_epoch", -1)
            rows.append(
                {
                    "topic": h.topic,
                    "partition": h.partition,
                    "producerId": h.producer_id,
                    "producerEpoch": h.producer_epoch,
                    "coordinatorEpoch": coordinator_epoch if coordinator_epoch >= 0 else None,
                    "startOffset": h.start_offset,
                    "lastTimestamp": state.get("last_timestamp"),
                    "durationMin": h.open_ms // 60_000,
                    "reason": h.reason,
                }
            )
    emit(rows, HANGING_COLUMNS, output, text=pretty_print_table)


# ---- abort (a hanging transaction) ------------------------------------------------------------------


@app.command("abort")
def abort_hanging(
    ctx: typer.Context,
    topic: TopicOption,
    partition: PartitionOption,
    start_offset: Annotated[
        int,
        typer.Option(
            "--start-offset",
            min=0,
            help="First offset of the hanging transaction (see find-hanging).",
            show_default=False,
        ),
    ],
    output: ResultOutputOption = OutputFormat.text,
) -> None:
    """Abort a hanging transaction in one partition by writing an ABORT marker for it."""
    _abort_hanging(ctx, topic, partition, start_offset, output)


def _abort_hanging(
    ctx: typer.Context, topic: str, partition: int, start_offset: int, output: OutputFormat = OutputFormat.text
) -> None:
    from txlog.errors import InvalidTxnStateError
    from txlog.topic_partition import TopicPartition

    with _admin(ctx, read_only=False) as admin:
        try:
            marker = admin.abort_hanging_transaction(TopicPartition(topic, partition), start_offset)
        except InvalidTxnStateError as exc:
            raise CommandError(str(exc)) from None
    status(
        ctx,
        f"Aborted the transaction starting at offset {start_offset} of {topic}-{partition} "
        f"(abort marker at offset {marker}).",
    )
    print_result(
        output,
        {
            "topic": topic,
            "partition": partition,
            "startOffset": start_offset,
            "result": "aborted",
            "abortMarkerOffset": marker,
        },
    )


# ---- expire (fault rehearsal) ------------------------------------------------------------------------


@app.command("expire")
def expire(
    ctx: typer.Context,
    transactional_id: Annotated[
        str,
        transactional_id_option("The transactional id to forget now."),
    ],
    output: ResultOutputOption = OutputFormat.text,
) -> None:
    """Expire a transactional id now, as transactional.id.expiration.ms would after it.

    For rehearsing an application's handling of an expired id in seconds rather than a week:
    an open transaction is aborted first (as its timeout would), then the id's state is
    removed. Its producer's next transactional request gets INVALID_PRODUCER_ID_MAPPING, in
    this store's embedded clients and through `txlog serve` alike; initializing again
    starts afresh. Works while other processes (and `txlog serve`) use the store.
    """
    from txlog.errors import ConcurrentTransactionsError

    with _admin(ctx, read_only=False) as admin:
        if admin.coordinator.describe(transactional_id) is None:  # checked first: creates nothing
            raise CommandError(f"cannot expire: transactional id '{transactional_id}' is unknown")
        try:
            expired = admin.coordinator.expire_transactional_id(transactional_id)
        except ConcurrentTransactionsError as exc:
            raise CommandError(f"cannot expire: {exc}; run the same command again") from None
    if expired is None:  # expired by the sweep between the two looks
        raise CommandError(f"cannot expire: transactional id '{transactional_id}' is unknown")
    status(
        ctx,
        f"Expired transactional id '{transactional_id}' (producer id {expired.producer_id}, "
        f"epoch {expired.producer_epoch}, last state {expired.state.admin_name}).",
    )
    print_result(
        output,
        {
            "transactionalId": transactional_id,
            "result": "expired",
            "producerId": expired.producer_id,
            "producerEpoch": expired.producer_epoch,
            "lastState": expired.state.admin_name,
        },
    )


# ---- force-terminate (Kafka 4.x, KIP-939) -------------------------------------------------------------


@app.command("force-terminate")
def force_terminate(
    ctx: typer.Context,
    transactional_id: Annotated[
        str,
        transactional_id_option("Abort the open transaction of this id, prepared (two-phase commit) or not."),
    ],
    output: ResultOutputOption = OutputFormat.text,
) -> None:
    """Abort a transactional id's open transaction and fence its producer (kafka-transactions forceTerminate).

    For a two-phase commit (KIP-939) transaction whose transaction manager is gone for good:
    nothing else ends it, since the transaction timeout never does. The same as
    `txlog abort --transactional-id ID`.
    """
    _end(ctx, transactional_id, commit=False, output=output)


# ---- commit / abort --transactional-id (top-level verbs) --------------------------------------------


def _end(
    ctx: typer.Context,
    transactional_id: str,
    commit: bool,
    output: OutputFormat = OutputFormat.text,
    prepared_state: PreparedTxnState | None = None,
) -> None:
    from txlog.errors import (
        InvalidProducerEpochError,
        InvalidProducerIdMappingError,
        InvalidTxnStateError,
        ProducerFencedError,
        TransactionOutcomeUnknownError,
    )

    verb = "commit" if commit else "abort"
    with _admin(ctx, read_only=False) as admin:
        if admin.coordinator.describe(transactional_id) is None:  # checked first: creates nothing
            raise CommandError(f"cannot {verb}: transactional id '{transactional_id}' is unknown")
        try:
            if prepared_state is not None:
                ids = admin.commit_prepared_transaction(transactional_id, prepared_state)
            else:
                ids = admin.end_transaction(transactional_id, commit)
        except InvalidProducerIdMappingError as exc:
            raise CommandError(f"cannot {verb}: {exc}") from None
        except InvalidTxnStateError as exc:
            raise CommandError(f"cannot {verb}: {exc}") from None
        except (ProducerFencedError, InvalidProducerEpochError) as exc:
            raise CommandError(f"cannot {verb}: fenced: {exc}") from None
        except TransactionOutcomeUnknownError as exc:
            raise CommandError(
                f"the outcome of the {verb} of '{transactional_id}' is ambiguous: {exc}; run "
                f"'txlog {verb} --transactional-id {transactional_id}' again to learn it (do not abort blindly)",
                exit_code=AMBIGUOUS,
            ) from None
    done = "Committed" if commit else "Aborted"
    status(
        ctx, f"{done} the transaction of '{transactional_id}' (producer id {ids.producer_id}, epoch now {ids.epoch})."
    )
    print_result(
        output,
        {
            "transactionalId": transactional_id,
            "result": done.lower(),
            "producerId": ids.producer_id,
            "producerEpoch": ids.epoch,
        },
    )


def commit(
    ctx: typer.Context,
    transactional_id: Annotated[
        str,
        transactional_id_option("Commit the open transaction of this id."),
    ],
    prepared_state: Annotated[
        str | None,
        typer.Option(
            "--prepared-state",
            metavar="PID:EPOCH",
            help="For a two-phase commit (KIP-939) transaction: the prepared state its transaction manager kept.",
            show_default=False,
        ),
    ] = None,
    output: ResultOutputOption = OutputFormat.text,
) -> None:
    """Commit the open transaction of a transactional id.

    For a transaction left open by `produce --no-commit` or by a producer that died. A
    two-phase commit transaction (KIP-939) commits only with --prepared-state, the
    producer id:epoch its transaction manager kept, and only if that names it (see
    `transactions describe`); abort needs no state. Exit 1 if the id is unknown, has no open
    transaction, or was already decided the other way; exit 4 if the outcome is ambiguous
    (run the same command again).
    """
    state = None if prepared_state is None else _parse_prepared_state(prepared_state)
    _end(ctx, transactional_id, commit=True, output=output, prepared_state=state)


def _parse_prepared_state(text: str) -> PreparedTxnState:
    from txlog.clients.prepared_txn_state import PreparedTxnState
    from txlog.errors import IllegalArgumentError

    try:
        state = PreparedTxnState.parse(text)
    except IllegalArgumentError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--prepared-state'") from None
    if not state.has_transaction:
        raise typer.BadParameter("an empty state names no transaction", param_hint="'--prepared-state'")
    return state


def abort(
    ctx: typer.Context,
    transactional_id: Annotated[
        str | None,
        transactional_id_option("Abort the open transaction of this id."),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="With --partition and --start-offset: abort a hanging transaction.",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ] = None,
    partition: Annotated[
        int | None,
        typer.Option("--partition", "-p", min=0, show_default=False, help="The partition of the hanging transaction."),
    ] = None,
    start_offset: Annotated[
        int | None,
        typer.Option(
            "--start-offset",
            min=0,
            show_default=False,
            help="The first offset of the hanging transaction (see transactions find-hanging).",
        ),
    ] = None,
    output: ResultOutputOption = OutputFormat.text,
) -> None:
    """Abort an open transaction, by id or where it hangs.

    By --transactional-id, or a hanging one (see `transactions find-hanging`) by
    --topic/--partition/--start-offset. Exit 1 if there is nothing to abort; exit 4 if the
    outcome is ambiguous (run it again).
    """
    hanging = (topic, partition, start_offset)
    if transactional_id is not None:
        if any(v is not None for v in hanging):
            raise CommandError(
                "give either --transactional-id or --topic/--partition/--start-offset, not both", exit_code=USAGE
            )
        _end(ctx, transactional_id, commit=False, output=output)
    elif topic is not None and partition is not None and start_offset is not None:
        _abort_hanging(ctx, topic, partition, start_offset, output)
    else:
        raise CommandError("give --transactional-id ID, or --topic T --partition P --start-offset O", exit_code=USAGE)
