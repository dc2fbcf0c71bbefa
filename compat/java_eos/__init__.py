"""A Java kafka-clients 4.4 consume-transform-produce program (ConsumeTransformProduce.java, ours).

It copies records between topics in a consumer group with read_committed, one transaction per
batch carrying the group's offsets (sendOffsetsToTransaction), aborts every third transaction on
purpose, and checks that a read_committed reader sees each input exactly once; once per group
protocol (classic, consumer). Each `CHECK name PASS|FAIL why` line it prints is one test here. It
is compiled with javac against the broker rig's cached kafka-clients jar (tests/kafka_rig), and
the classes are cached, keyed by the source's digest.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile

from compat.harness import FAILED, PASSED, CompatError, Outcome, SuiteResult, cache_root, require, run_logged
from tests.kafka_rig.kafka_dist import classpath, java

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ConsumeTransformProduce.java")
MAIN = "ConsumeTransformProduce"
RECORDS = 3000
TIMEOUT_S = 600.0


def prepare() -> str:
    """The compiled classes' directory, built now if the cache lacks this source's build."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    classes = os.path.join(cache_root(), f"java-eos-{digest}")
    if os.path.exists(os.path.join(classes, f"{MAIN}.class")):
        return classes
    javac = require("javac", "the consume-transform-produce program is compiled with a JDK")
    os.makedirs(cache_root(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".java-eos-") as work:
        built = os.path.join(work, "classes")
        result = subprocess.run(
            [javac, "-d", built, "-cp", classpath(), SOURCE], capture_output=True, text=True, timeout=600
        )
        if result.returncode != 0:
            raise CompatError(f"javac failed on {SOURCE}:\n{result.stderr}")
        os.rename(built, classes)
    return classes


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
