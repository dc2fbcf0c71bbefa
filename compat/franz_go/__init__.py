"""franz-go's `pkg/kgo` tests (the Go module's own _test.go files) against a bootstrap.

The module comes from the Go module proxy (`go mod download`, which keeps the _test.go files);
the test binary is built once with `go test -c` and cached with the module, outside the repository.
The tests read the broker from KGO_SEEDS; KGO_TEST_RF=1 because the target has one broker, and
KGO_TEST_RECORDS bounds the ETL tests' record count (500000 by default, minutes on a small machine).
Only the tests that talk to a broker are run (the package's other tests use its in-process fake).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from compat.harness import FAILED, PASSED, SKIPPED, CompatError, Outcome, SuiteResult, cache_root, require, run_logged

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
RECORDS = "50000"
# Tests of pkg/kgo that use the broker at KGO_SEEDS: the two end-to-end ETL chains (a producer,
# then consumer groups chained through topics; with transactions and sendOffsets in TestTxnEtl),
# and the produce / consume / group regressions that finish in seconds.
TESTS = [
    "TestTxnEtl",
    "TestGroupETL",
    "TestClient_Produce",
    "TestClient_ProduceLargeMessages",
    "TestConsumeTopicRetrieval",
    "TestConsumeRegex",
    "TestGroupSimple",
    "TestPing",
    "TestPooling",
    "TestDirectPartitionPurge",
    "TestAddRemovePartitions",
    "TestPauseIssue489",
    "TestPauseIssueOct2023",
    "TestIssue325",
    "TestIssue337",
    "TestIssue434",
    "TestIssue523",
    "TestIssue648",
    "TestIssue769",
    "TestIssue810",
    "TestIssue831",
    "TestIssue865",
]
TIMEOUT_S = 900.0


def go_env() -> dict[str, str]:
    """Go's module and build caches under the scoreboard's cache, so nothing lands in ~/go."""
    root = os.path.join(cache_root(), "go")
    return {
        **os.environ,
        "GOPATH": root,
        "GOMODCACHE": os.path.join(root, "mod"),
        "GOCACHE": os.path.join(root, "build"),
        # keep the machine's own flags (e.g. -buildvcs=false) and let the build resolve test deps
        "GOFLAGS": " ".join(filter(None, [os.environ.get("GOFLAGS", ""), "-mod=mod"])),
    }


def prepare() -> str:
    """The compiled pkg/kgo test binary, downloading the module and building it on first use."""
    home = os.path.join(cache_root(), f"franz-go-{VERSION}")
    binary = os.path.join(home, "kgo.test")
    if os.path.exists(binary):
        return binary
    go = require("go", "franz-go's tests are built with the Go toolchain")
    os.makedirs(home, exist_ok=True)
    download = _go([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], home, "download the module")
    module_dir = json.loads(download)["Dir"]
    with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as work:
        # the module cache is read-only, and `go test -c` resolves the test dependencies into go.sum
        source = os.path.join(work, "src")
        shutil.copytree(module_dir, source)
        for folder, _dirs, files in os.walk(source):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644)
        built = os.path.join(work, "kgo.test")
        _go([go, "test", "-c", "-o", built, "."], os.path.join(source, "pkg", "kgo"), "build the kgo tests")
        os.rename(built, binary)
    return binary


def _go(command: list[str], cwd: str, what: str) -> str:
    result = subprocess.run(command, cwd=cwd, env=go_env(), capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise CompatError(f"could not {what} ({MODULE}@{VERSION}): {result.stderr.strip()}")
    return result.stdout


def run(bootstrap: str, work_dir: str, tests: list[str] | None = None) -> SuiteResult:
    binary = prepare()
    report = os.path.join(work_dir, "franz-go.json")
    env = {
        **go_env(),
        "KGO_SEEDS": bootstrap,
        "KGO_TEST_RF": "1",
        "KGO_TEST_RECORDS": RECORDS,
        "KGO_LOG_LEVEL": "none",
    }
    pattern = "^(" + "|".join(tests or TESTS) + ")$"
    go = require("go", "`go tool test2json` reports franz-go's test results")
    command = [
        go,
        "tool",
        "test2json",
        "-p",
        "kgo",
        binary,
        "-test.v=test2json",
        "-test.run",
        pattern,
        f"-test.timeout={int(TIMEOUT_S) - 30}s",
    ]
    with tempfile.TemporaryDirectory(prefix="kgo.") as cwd:
        code, seconds = run_logged(command, log_path=report, timeout=TIMEOUT_S, env=env, cwd=cwd)
    outcomes = parse_test2json(report)
    if not outcomes:
        raise CompatError(f"franz-go's tests exited {code} and reported no test; see {report}")
    return SuiteResult("franz-go", outcomes, seconds, report)


def parse_test2json(path: str) -> list[Outcome]:
    """One Outcome per top-level test (subtests fold into their parent), from `go tool test2json`."""
    output: dict[str, list[str]] = {}
    outcomes: dict[str, Outcome] = {}
    with open(path, errors="replace") as f:
        for line in f:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a panic's trace or the tool's own message, not an event
            test = event.get("Test")
            if not test or "/" in test:
                if test and event.get("Action") == "output":
                    output.setdefault(test.split("/")[0], []).append(event.get("Output", ""))
                continue
            action = event.get("Action")
            if action == "output":
                output.setdefault(test, []).append(event.get("Output", ""))
            elif action in ("pass", "fail", "skip"):
                status = {"pass": PASSED, "fail": FAILED, "skip": SKIPPED}[action]
                detail = "" if status == PASSED else _failure_lines(output.get(test, []))
                outcomes[test] = Outcome(test, status, detail)
    return list(outcomes.values())


def _failure_lines(lines: list[str]) -> str:
    """The test's own error lines (`file_test.go:N: ...`), else its last output."""
    errors = [line.strip() for line in lines if "_test.go:" in line]
    return " ".join(errors[:5]) if errors else " ".join(line.strip() for line in lines[-5:])
