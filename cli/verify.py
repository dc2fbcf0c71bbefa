"""`txlog verify [--topic T]`: a read-only integrity check of a whole store, one table of findings.

The check itself is the library's (`txlog.tools.store_check.check_store`: every partition's files
through `storage.file_check`, then transactions against the coordinator); this verb opens the
store read-only, prints one row per finding and sets the exit code. Exit 3 on any finding,
warnings included (a torn tail is harmless to readers but still a fact about the files);
stderr then ends with the summary line (`-q` drops it) and one `Error: ...` line.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.context import complete_topic_names, open_store
from cli.output import OutputFormat, absent_note, emit, error_line, output_option, status
from cli.progress import Progress, ProgressOption, count

if TYPE_CHECKING:  # pragma: no cover
    from txlog.tools.store_check import Finding, StoreCheckReport

VERIFICATION_FAILED = 3

COLUMNS = [
    ("SEVERITY", "severity"),
    ("TOPIC", "topic"),
    ("PARTITION", "partition"),
    ("FILE", "file"),
    ("OFFSET", "offset"),
    ("FINDING", "finding"),
]
# No text layout: no Kafka tool has a verify to copy (the table is its layout).
if TYPE_CHECKING:  # what the verb receives; the Literal of its choices is built at run time
    VerifyOutputOption = OutputFormat
else:
    VerifyOutputOption = output_option(
        OutputFormat.table, OutputFormat.json, OutputFormat.jsonl, OutputFormat.csv, help="table, json, jsonl or csv."
    )


def finding_row(f: Finding, consequences: list[Finding] | None = None) -> dict[str, Any]:
    """One root cause as a row (its JSON keys are the columns' keys); the findings it explains are
    named in the FINDING cell and listed under `consequences` in JSON."""
    where = f.location
    text = f.message
    if consequences:
        text += f" (this also explains: {'; '.join(_where(c) + c.message for c in consequences)})"
    return {
        "severity": f.severity.value,
        "topic": where.topic,
        "partition": where.partition,
        "file": where.file,
        "offset": where.offset,
        "finding": text,
        "consequences": [
            {"file": c.location.file, "offset": c.location.offset, "finding": c.message} for c in consequences or []
        ],
    }


def _where(f: Finding) -> str:
    return f"{f.location.file}: " if f.location.file else ""


DATA_SUFFIX = ".log"
DERIVED_SUFFIXES = (".index", ".timeindex", ".txnindex")  # rebuilt from the .log; wrong when the .log is


def root_causes(findings: list[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """One entry per root cause: damage in a segment's .log (an error) explains what its own index,
    time index and transaction index then fail to match, so those are folded under it."""
    damaged: dict[tuple[str, int | None, str], Finding] = {}
    for f in findings:
        name = f.location.file or ""
        if f.severity.value == "error" and name.endswith(DATA_SUFFIX):
            damaged.setdefault((f.location.topic, f.location.partition, name[: -len(DATA_SUFFIX)]), f)
    explained: dict[int, list[Finding]] = {id(f): [] for f in damaged.values()}
    roots: list[tuple[Finding, list[Finding]]] = []
    for f in findings:
        stem, suffix = os.path.splitext(f.location.file or "")
        cause = damaged.get((f.location.topic, f.location.partition, stem)) if suffix in DERIVED_SUFFIXES else None
        if cause is not None:
            explained[id(cause)].append(f)
        else:
            roots.append((f, explained.get(id(f), [])))
    return roots


# ---- the verb --------------------------------------------------------------------------------------


def verify(
    ctx: typer.Context,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            autocompletion=complete_topic_names,
            show_default=False,
            help="Only this topic's partitions (default: every topic, internal ones included).",
        ),
    ] = None,
    output: VerifyOutputOption = OutputFormat.table,
    progress: ProgressOption = False,
) -> None:
    """Check every file and transaction of the store.

    CRCs, offsets, indexes, transaction indexes, producer state, transactions and the last
    stable offset. Read-only: nothing is locked, written or repaired, so it is safe on a live
    store and on a Kafka log directory. Prints one row per root cause (what a damaged .log
    makes its own indexes fail is named in its row) and exits 3 if there is any (warnings too).
    """
    from txlog.tools.store_check import check_store

    store = open_store(ctx, read_only=True)
    try:
        if topic is not None and not store.has_topic(topic):
            from storage.errors import UnknownTopicOrPartitionError

            raise UnknownTopicOrPartitionError(f"topic '{topic}' does not exist")  # cli/main.py adds the hint
        total = sum(len(store.partitions(n)) for n in ([topic] if topic else store.list_topics(include_internal=True)))

        def describe(r: StoreCheckReport) -> str:
            return f"{r.partitions}/{total} partitions, {count(r.batches, 'batch', 'batches')}"

        with Progress(ctx, "verify", describe, asked=progress) as shown:
            report = check_store(store, topic, progress=shown.update)
    finally:
        store.close()
    roots = root_causes(report.findings)
    emit([finding_row(f, also) for f, also in roots], COLUMNS, output, missing="-")
    n = len(roots)
    for name, absent in report.absent.items():
        status(ctx, absent_note(name, absent))
    folded = len(report.findings) - n
    status(
        ctx,
        f"checked {count(report.partitions, 'partition')}, {count(report.batches, 'batch', 'batches')}: "
        f"{count(n, 'finding')}"
        + (f" (and {folded} more that {'it explains' if n == 1 else 'they explain'})" if folded else ""),
    )
    if report.findings:
        error_line(f"verify found {n} problem{'s' * (n != 1)} (see the table)")
        raise typer.Exit(VERIFICATION_FAILED)
