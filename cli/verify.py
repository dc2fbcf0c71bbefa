"""`txlog verify [--topic T]`: a read-only integrity check of a whole store, one table of findings.

The check itself is the library's (`txlog.store_check.check_store`: every partition's files
through `storage.file_check`, then transactions against the coordinator); this verb opens the
store read-only, prints one row per finding and sets the exit code. Exit 3 on any finding,
warnings included (a torn tail is harmless to readers but still a fact about the files);
stderr then ends with the summary line (`-q` drops it) and one `Error: ...` line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import CommandError, complete_topic_names, open_store
from cli.output import OutputFormat, absent_note, emit, error_line, output_option, pretty_print_table, status

if TYPE_CHECKING:  # pragma: no cover
    from txlog.store_check import Finding

VERIFICATION_FAILED = 3

COLUMNS = [("SEVERITY", "severity"), ("TOPIC", "topic"), ("PARTITION", "partition"), ("FILE", "file"),
           ("OFFSET", "offset"), ("FINDING", "finding")]
VerifyOutputOption = output_option(OutputFormat.table, OutputFormat.json, OutputFormat.jsonl, OutputFormat.csv,
                                   help="table, json, jsonl or csv.")


def finding_row(f: Finding) -> dict[str, Any]:
    """One finding as a row (its JSON keys are the columns' keys)."""
    where = f.location
    return {"severity": f.severity.value, "topic": where.topic, "partition": where.partition, "file": where.file,
            "offset": where.offset, "finding": f.message}


# ---- the verb --------------------------------------------------------------------------------------


def verify(
    ctx: typer.Context,
    topic: Annotated[str | None, typer.Option(
        "--topic", "-t", metavar="TOPIC", autocompletion=complete_topic_names, show_default=False,
        help="Only this topic's partitions (default: every topic, internal ones included).",
    )] = None,
    output: VerifyOutputOption = OutputFormat.table,
) -> None:
    """Check the whole store: CRCs, offsets, indexes, txn indexes, producer state, transactions, LSO.

    Read-only: nothing is locked, written or repaired, so it is safe on a live store and on a
    Kafka log directory. Prints one row per finding and exits 3 if there is any (warnings too).
    """
    from txlog.store_check import check_store

    store = open_store(ctx, read_only=True)
    try:
        if topic is not None and not store.has_topic(topic):
            raise CommandError(f"unknown topic '{topic}'")
        report = check_store(store, topic)
    finally:
        store.close()
    emit([finding_row(f) for f in report.findings], COLUMNS, output, text=pretty_print_table, missing="-")
    n = len(report.findings)
    for name, absent in report.absent.items():
        status(ctx, absent_note(name, absent))
    status(ctx, f"checked {report.partitions} partition{'s' * (report.partitions != 1)}, "
                f"{report.batches} batch{'es' * (report.batches != 1)}: {n} finding{'s' * (n != 1)}")
    if report.findings:
        error_line(f"verify found {n} problem{'s' * (n != 1)} (see the table)")
        raise typer.Exit(VERIFICATION_FAILED)
