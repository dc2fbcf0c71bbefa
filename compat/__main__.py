"""`python3 -m compat SUITE... [--bootstrap HOST:PORT]`: run suites, print the table, judge them.

Without --bootstrap it starts the baseline (a real Kafka 4.4 broker from tests/kafka_rig with the
settings of compat.harness.BASELINE_BROKER_PROPS) and stops it afterwards. Each suite's findings go
to compat/<suite>/findings.md (or --findings-dir). The exit code is 1 when a test failed that its
allow-list does not name, 2 when a suite could not be run at all.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable

from compat.harness import BASELINE_BROKER_PROPS, CompatError, SuiteResult, Verdict, findings, judge, suite_dir, table

Runner = Callable[[str, str], SuiteResult]


def runners() -> dict[str, tuple[str, Runner]]:
    """Suite name -> (its folder under compat/, its runner), in the scoreboard's order."""
    from compat import franz_go, java_eos, kafka_python, librdkafka

    return {
        "kafka-python": ("kafka_python", kafka_python.run),
        "franz-go": ("franz_go", franz_go.run),
        "java-eos": ("java_eos", java_eos.run),
        "librdkafka": ("librdkafka", librdkafka.run),
    }


def run_suites(names: list[str], bootstrap: str, work_dir: str, findings_dir: str | None, target: str) -> list[Verdict]:
    verdicts = []
    for name in names:
        folder, runner = runners()[name]
        print(f"compat: running {name} against {bootstrap} ...", file=sys.stderr, flush=True)
        result = runner(bootstrap, work_dir)
        verdict = judge(result, folder)
        out_dir = os.path.join(findings_dir, folder) if findings_dir else suite_dir(folder)
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "findings.md"), "w") as f:
            f.write(findings(verdict, bootstrap, target))
        verdicts.append(verdict)
    return verdicts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m compat", description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*", help=f"suites to run (default: all): {', '.join(runners())}")
    parser.add_argument("--bootstrap", help="HOST:PORT of the target; default: start the baseline Kafka broker")
    parser.add_argument("--target", help="what the target is, for findings.md (default: from --bootstrap)")
    parser.add_argument("--findings-dir", help="write SUITE_FOLDER/findings.md here instead of under compat/")
    args = parser.parse_args(argv)
    names = args.suites or list(runners())
    unknown = [name for name in names if name not in runners()]
    if unknown:
        print(f"Error: unknown suite {', '.join(unknown)} (known: {', '.join(runners())})", file=sys.stderr)
        return 2
    work_dir = tempfile.mkdtemp(prefix="compat.")
    broker = None
    try:
        if args.bootstrap:
            bootstrap, target = args.bootstrap, args.target or "a broker"
        else:
            from tests.kafka_rig.broker import KafkaBroker
            from tests.kafka_rig.kafka_dist import KAFKA_VERSION

            broker = KafkaBroker(os.path.join(work_dir, "broker"), BASELINE_BROKER_PROPS).start()
            bootstrap, target = broker.bootstrap, f"Apache Kafka {KAFKA_VERSION} (the baseline)"
        verdicts = run_suites(names, bootstrap, work_dir, args.findings_dir, target)
    except (CompatError, RuntimeError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    finally:
        if broker is not None:
            broker.stop()
    print(table(verdicts))
    print(f"(logs and reports in {work_dir})", file=sys.stderr)
    unexpected = [(v.result.suite, o.test) for v in verdicts for o in v.unexpected]
    for suite, test in unexpected:
        print(f"compat: {suite}: {test} failed and is not in the allow-list", file=sys.stderr)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
