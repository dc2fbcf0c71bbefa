"""`python3 -m compat SUITE... [--bootstrap HOST:PORT | --serve]`: run suites, print the table, judge them.

Without --bootstrap or --serve it starts the baseline (a real Kafka 4.4 broker from tests/kafka_rig
with the settings of compat.harness.BASELINE_BROKER_PROPS) and stops it afterwards. With --serve it
starts `txlog serve` on a fresh store instead (compat/txlog_serve.py) and judges the suites against
their txlog allow-lists (compat/<suite>/allowlist.txlog). Each suite's findings go to
compat/<suite>/findings.md (findings.txlog.md for txlog; or under --findings-dir). The exit code is
1 when a test failed that its allow-list does not name, 2 when a suite could not be run at all.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence

from compat.harness import (
    BASELINE,
    BASELINE_BROKER_PROPS,
    TARGET_KINDS,
    TXLOG,
    CompatError,
    SuiteResult,
    Verdict,
    findings,
    findings_name,
    judge,
    suite_dir,
    table,
)

Runner = Callable[..., SuiteResult]


def runners() -> dict[str, tuple[str, Runner]]:
    """Suite name -> (its folder under compat/, its runner), in the scoreboard's order."""
    from compat import franz_go, java_eos, kafka_python, librdkafka

    return {
        "kafka-python": ("kafka_python", kafka_python.run),
        "franz-go": ("franz_go", franz_go.run),
        "java-eos": ("java_eos", java_eos.run),
        "librdkafka": ("librdkafka", librdkafka.run),
    }


# Suites whose runner takes a selection of its tests (a third argument); java-eos is one program.
SELECTABLE = ("kafka-python", "franz-go", "librdkafka")


def run_suites(
    names: list[str],
    bootstrap: str,
    work_dir: str,
    findings_dir: str | None,
    target: str,
    *,
    kind: str = BASELINE,
    tests: list[str] | None = None,
    notes: Callable[[], Sequence[str]] = lambda: (),
) -> list[Verdict]:
    """Run each suite (only `tests` of it, if given) and judge it against its allow-list for `kind`;
    `notes()` is asked after each suite what its findings must say about the target."""
    verdicts = []
    for name in names:
        folder, runner = runners()[name]
        print(f"compat: running {name} against {bootstrap} ...", file=sys.stderr, flush=True)
        result = runner(bootstrap, work_dir, tests) if tests else runner(bootstrap, work_dir)
        verdict = judge(result, folder, kind)
        out_dir = os.path.join(findings_dir, folder) if findings_dir else suite_dir(folder)
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, findings_name(kind)), "w") as f:
            f.write(findings(verdict, bootstrap, target, notes()))
        verdicts.append(verdict)
    return verdicts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m compat", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", help=f"suites to run (default: all): {', '.join(runners())}")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--bootstrap", help="HOST:PORT of the target; default: start the baseline Kafka broker")
    where.add_argument("--serve", action="store_true", help="start `txlog serve` on a fresh store as the target")
    parser.add_argument(
        "--kind",
        choices=TARGET_KINDS,
        help="whose allow-lists and findings files: txlog with --serve, else baseline "
        "(--bootstrap of a txlog serve you started yourself: --kind txlog)",
    )
    parser.add_argument("--target", help="what the target is, for findings.md (default: from --bootstrap)")
    parser.add_argument("--findings-dir", help="write SUITE_FOLDER/findings*.md here instead of under compat/")
    parser.add_argument(
        "--tests",
        help="comma-separated tests of the one suite named: librdkafka numbers (0103), franz-go test names "
        "(TestTxnEtl), kafka-python node ids under test/integration (test_producer_integration.py)",
    )
    args = parser.parse_args(argv)
    names = args.suites or list(runners())
    unknown = [name for name in names if name not in runners()]
    if unknown:
        print(f"Error: unknown suite {', '.join(unknown)} (known: {', '.join(runners())})", file=sys.stderr)
        return 2
    tests = args.tests.split(",") if args.tests else None
    if tests and (len(names) != 1 or names[0] not in SELECTABLE):
        print(f"Error: --tests takes one suite of {', '.join(SELECTABLE)}", file=sys.stderr)
        return 2
    kind = args.kind or (TXLOG if args.serve else BASELINE)
    work_dir = tempfile.mkdtemp(prefix="compat.")
    try:
        verdicts = _run(args, names, tests, kind, work_dir)
    except (CompatError, RuntimeError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    print(table(verdicts))
    print(f"(logs and reports in {work_dir})", file=sys.stderr)
    unexpected = [(v.result.suite, o.test) for v in verdicts for o in v.unexpected]
    for suite, test in unexpected:
        print(f"compat: {suite}: {test} failed and is not in the allow-list", file=sys.stderr)
    return 1 if unexpected else 0


def _run(
    args: argparse.Namespace, names: list[str], tests: list[str] | None, kind: str, work_dir: str
) -> list[Verdict]:
    """Start the target the options name (or take --bootstrap), run the suites, stop the target."""
    if args.bootstrap:
        return run_suites(
            names, args.bootstrap, work_dir, args.findings_dir, args.target or "a broker", kind=kind, tests=tests
        )
    if args.serve:
        from compat.txlog_serve import txlog_serve

        with txlog_serve(work_dir) as server:
            target = args.target or "txlog serve (a fresh store)"
            verdicts = run_suites(
                names, server.bootstrap, work_dir, args.findings_dir, target, kind=kind, tests=tests, notes=server.notes
            )
        for note in server.notes() + server.stop_problems:
            print(f"compat: {note}", file=sys.stderr)
        print(f"(txlog serve's log: {server.log_path})", file=sys.stderr)
        return verdicts
    from tests.kafka_rig.broker import KafkaBroker
    from tests.kafka_rig.kafka_dist import KAFKA_VERSION

    broker = KafkaBroker(os.path.join(work_dir, "broker"), BASELINE_BROKER_PROPS).start()
    try:
        target = f"Apache Kafka {KAFKA_VERSION} (the baseline)"
        return run_suites(names, broker.bootstrap, work_dir, args.findings_dir, target, kind=kind, tests=tests)
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
