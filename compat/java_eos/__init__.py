"""A Java kafka-clients 4.4 consume-transform-produce program (ConsumeTransformProduce.java, ours).

It copies records between topics in a consumer group with read_committed, one transaction per
batch carrying the group's offsets (sendOffsetsToTransaction), aborts every third transaction on
purpose, and checks that a read_committed reader sees each input exactly once; once per group
protocol (classic, consumer). Each `CHECK name PASS|FAIL why` line it prints is one test here. It
is compiled with javac against the broker rig's cached kafka-clients jar (tests/kafka_rig), and
the classes are cached, keyed by the source's digest.
"""

from __future__ import annotations

import os

from compat.harness import FAILED, PASSED, CompatError, Outcome, SuiteResult, run_logged
from tests.kafka_rig.kafka_dist import KafkaDistError, classpath, compiled_classes, java

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ConsumeTransformProduce.java")
MAIN = "ConsumeTransformProduce"
RECORDS = 3000
TIMEOUT_S = 600.0


def prepare() -> str:
    """The compiled classes' directory, built now if the cache lacks this source's build."""
    try:
        return compiled_classes(SOURCE, MAIN)
    except KafkaDistError as exc:
        raise CompatError(str(exc)) from None


def run(bootstrap: str, work_dir: str) -> SuiteResult:
    classes = prepare()
    log = os.path.join(work_dir, "java-eos.log")
    command = [java(), "-Xmx256m", "-cp", f"{classes}{os.pathsep}{classpath()}", MAIN, bootstrap, str(RECORDS)]
    code, seconds = run_logged(command, log_path=log, timeout=TIMEOUT_S)
    outcomes = parse_checks(log)
    if not outcomes:
        raise CompatError(f"{MAIN} exited {code} and printed no CHECK line; see {log}")
    return SuiteResult("java-eos", outcomes, seconds, log)


def parse_checks(path: str) -> list[Outcome]:
    outcomes = []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith("CHECK "):
                continue
            _, name, verdict, *why = line.rstrip("\n").split(" ", 3)
            outcomes.append(Outcome(name, PASSED if verdict == "PASS" else FAILED, " ".join(why)))
    return outcomes
