"""`txlog mirror --to BOOTSTRAP | --from BOOTSTRAP`: a store's topics to a Kafka cluster, or back, exactly once.

One verb, two directions (docs/mirror.md): `--to` runs txlog/mirror/to_cluster.py's `mirror_to`
(committed store transactions re-produced as Kafka transactions, positions committed inside
them), `--from` runs `mirror_from` of the wing's `from_cluster` module. Client settings pass through
as `-X key=value` (kcat's convention). Ctrl-C/SIGTERM stop between transactions (`--follow`
runs until then). Progress on a terminal (cli/progress.py), one summary line on stderr at the end.
"""

from __future__ import annotations

import threading
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from cli.context import CommandError, complete_topic_names, open_store
from cli.interrupts import Interrupts
from cli.output import status
from cli.progress import Progress, ProgressOption, count

if TYPE_CHECKING:  # the CLI imports txlog only when a command runs
    from storage.store import Store
    from txlog.mirror.common import Progress as MirrorProgress


class _StopOnSignal(Interrupts):
    """Ctrl-C/SIGTERM set the mirror's stop event: it ends after the transaction in flight."""

    def __init__(self, event: threading.Event):
        super().__init__()
        self.event = event

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        super()._handle(signum, frame)
        self.event.set()


def mirror(
    ctx: typer.Context,
    to: Annotated[
        str | None,
        typer.Option(
            "--to", metavar="BOOTSTRAP", help="Mirror the store's topics to this Kafka cluster.", show_default=False
        ),
    ] = None,
    from_: Annotated[
        str | None,
        typer.Option(
            "--from", metavar="BOOTSTRAP", help="Mirror this Kafka cluster's topics into the store.", show_default=False
        ),
    ] = None,
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="A topic to mirror (repeat for more).",
            autocompletion=complete_topic_names,
            show_default=False,
        ),
    ] = None,
    all_topics: Annotated[bool, typer.Option("--all", help="Mirror every topic (internal ones excepted).")] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", help="Keep mirroring new transactions until Ctrl-C instead of exiting when caught up."
        ),
    ] = False,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "-X",
            metavar="KEY=VALUE",
            help="A Kafka client (librdkafka) setting, e.g. -X security.protocol=SASL_SSL (repeat for more).",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The mirror's name: its consumer group and transactional id (default txlog-mirror-to or "
            "txlog-mirror-from). Keep it to resume; one running mirror per name.",
            show_default=False,
        ),
    ] = None,
    transaction_bytes: Annotated[
        int,
        typer.Option(
            "--transaction-bytes",
            min=1,
            help="About how many source bytes per partition go into one cluster transaction (--to; a "
            "source transaction is never split).",
        ),
    ] = 8 << 20,
    carry_groups: Annotated[
        list[str] | None,
        typer.Option(
            "--carry-group",
            metavar="GROUP",
            help="After the copy (--to), give this store consumer group's positions to the same group on "
            "the cluster, translated to the cluster's offsets; its consumers must be stopped (repeat for more).",
            show_default=False,
        ),
    ] = None,
    progress: ProgressOption = False,
) -> None:
    """Mirror topics to or from a Kafka cluster, exactly once.

    --to: each committed transaction of the store becomes part of one Kafka transaction on the
    cluster, the mirror's position committed inside it; aborted records are never copied. Topics
    are created with the same partition counts, and each record keeps its partition, key, value,
    headers and timestamp (offsets are the cluster's own). Run it again, or after a crash, and it
    resumes where the last committed transaction ended: nothing twice, nothing missed.
    """
    from txlog.errors import IllegalArgumentError
    from txlog.mirror.common import parse_client_settings

    if (to is None) == (from_ is None):
        raise IllegalArgumentError("give exactly one of --to BOOTSTRAP or --from BOOTSTRAP")
    if carry_groups and (to is None or follow):
        raise IllegalArgumentError(
            "--carry-group goes with --to and without --follow: it runs once the copy has caught up"
        )
    client_config = parse_client_settings(settings or [])
    stop = threading.Event()
    try:
        _run(
            ctx,
            to,
            from_,
            topics,
            all_topics,
            follow,
            client_config,
            name,
            transaction_bytes,
            progress,
            stop,
            carry_groups,
        )
    except ImportError as exc:
        if "pip install" not in str(exc):
            raise
        raise CommandError(str(exc)) from None  # confluent-kafka is missing: the extra is named


def _run(
    ctx: typer.Context,
    to: str | None,
    from_: str | None,
    topics: list[str] | None,
    all_topics: bool,
    follow: bool,
    client_config: dict[str, str],
    name: str | None,
    transaction_bytes: int,
    progress: bool,
    stop: threading.Event,
    carry_groups: list[str] | None = None,
) -> None:
    """Run one direction until caught up (or stopped), with progress, then print the summary
    (and, after a copy that caught up, carry the groups: docs/mirror.md §3)."""
    shown: Progress[MirrorProgress] = Progress(ctx, "mirror", _describe, asked=progress)
    carried: list[str] = []
    with _StopOnSignal(stop) as interrupts, shown:
        if to is not None:
            from txlog.mirror.to_cluster import mirror_to

            with open_store(ctx, read_only=True) as store:
                summary = mirror_to(
                    store,
                    to,
                    topics,
                    all_topics=all_topics,
                    follow=follow,
                    client_config=client_config,
                    group=name,
                    progress=shown.update,
                    stop=stop,
                    round_bytes=transaction_bytes,
                )
                if carry_groups and not stop.is_set():
                    carried = _carry(store, to, carry_groups, client_config, name)
        else:
            assert from_ is not None
            from txlog.mirror.from_cluster import mirror_from

            with open_store(ctx, create=True) as store:
                summary = mirror_from(
                    store,
                    from_,
                    topics,
                    all_topics=all_topics,
                    follow=follow,
                    client_config=client_config,
                    group=name,
                    progress=shown.update,
                    stop=stop,
                )
    status(ctx, summary.line())
    for line in carried:
        status(ctx, line)
    if interrupts:
        raise typer.Exit(130)  # stopped by Ctrl-C/SIGTERM between transactions (docs/cli-conventions.md)


def _carry(
    store: Store, bootstrap: str, groups: list[str], client_config: dict[str, str], name: str | None
) -> list[str]:
    """The store groups' positions onto the cluster (txlog/mirror/groups.py); one line per group."""
    from txlog.mirror.common import mirror_name
    from txlog.mirror.groups import carry_groups

    carried = carry_groups(store, bootstrap, groups, client_config=client_config, mirror_group=mirror_name(name, "to"))
    return [group.line() for group in carried]


def _describe(p: MirrorProgress) -> str:
    return f"{count(p.records, 'record')} in {count(p.transactions, 'transaction')}, lag {p.lag:,}"
