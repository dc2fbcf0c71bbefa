"""librdkafka's own test suite (tests/ of Debian's source package) against a bootstrap.

The source is Debian's (bookworm: librdkafka 2.0.2), fetched with `apt-get source` through a
private sources list (a deb-src line for the machine's Debian mirror, its own package lists under
the cache) so the machine's apt configuration is left alone; dpkg-source (dpkg-dev) unpacks it and
applies Debian's patches. It is configured without SSL/SASL/curl (not tested here), built once
(the library and tests/test-runner) and cached outside the repository.

The runner selects tests with TESTS (test numbers), reads the bootstrap from a test.conf
(RDKAFKA_TEST_CONF) and runs with -L (only tests that need a broker) and -E (no sockem socket
emulation); results come from its per-test lines (its summary table is not printed when its exit
check fails, so it cannot be relied on).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from compat.harness import FAILED, PASSED, SKIPPED, CompatError, Outcome, SuiteResult, cache_root, require, run_logged

DEBIAN_SUITE = "bookworm"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
APT_SOURCES = [
    "/etc/apt/sources.list",
    *sorted(glob.glob("/etc/apt/sources.list.d/*.list") + glob.glob("/etc/apt/sources.list.d/*.sources")),
]
BROKER_VERSION = "4.4.0"
# transactions (0103), a fetch that only meets aborted data (0129), the idempotent producer (0090),
# consumer lag over aborted transactions with read_committed (0061, C++), and produce / consume /
# offset / group tests that finish in seconds (0026, pause/resume, is left out: it waits ~50 s)
TESTS = [
    "0103",
    "0129",
    "0090",
    "0061",
    "0001",
    "0002",
    "0005",
    "0013",
    "0014",
    "0015",
    "0017",
    "0018",
    "0019",
    "0020",
    "0021",
    "0022",
    "0030",
    "0031",
    "0034",
    "0040",
]
TIMEOUT_S = 900.0
CONFIGURE_FLAGS = ["--disable-ssl", "--disable-gssapi", "--disable-sasl", "--disable-curl"]


def prepare() -> str:
    """The built tests/ directory (holding test-runner), fetching and building on first use."""
    home = os.path.join(cache_root(), f"librdkafka-debian-{DEBIAN_SUITE}")
    built = os.path.join(home, "src")
    if os.path.exists(os.path.join(built, "tests", "test-runner")):
        return os.path.join(built, "tests")
    os.makedirs(home, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as work:
        source = _apt_source(home, work)
        make = require("make", "librdkafka is built with make")
        _step(["./configure", *CONFIGURE_FLAGS], source, "configure librdkafka")
        _step([make, "-j2", "libs"], source, "build librdkafka")
        _step([make, "-j2", "-C", "tests", "build"], source, "build librdkafka's test runner")
        shutil.rmtree(built, ignore_errors=True)
        os.rename(source, built)
    return os.path.join(built, "tests")


def _apt_source(home: str, work: str) -> str:
    """`apt-get source librdkafka` with a private deb-src list; the unpacked tree's path."""
    apt_get = require("apt-get", "librdkafka's source comes from Debian's source package")
    require("dpkg-source", "dpkg-source (package dpkg-dev) unpacks Debian's source package")
    lists = os.path.join(home, "apt-lists")
    os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
    sources = os.path.join(home, "sources.list")
    with open(sources, "w") as f:
        f.write(f"deb-src [signed-by={KEYRING}] {debian_mirror()} {DEBIAN_SUITE} main\n")
    options = [
        "-o", f"Dir::Etc::SourceList={sources}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={lists}",
        "-o", "Debug::NoLocking=1",
    ]  # fmt: skip
    _step([apt_get, *options, "update"], work, "read Debian's source index")
    _step([apt_get, *options, "source", "librdkafka"], work, "fetch librdkafka's Debian source package")
    trees = [path for path in glob.glob(os.path.join(work, "librdkafka-*")) if os.path.isdir(path)]
    if not trees:
        raise CompatError("apt-get source librdkafka unpacked no source tree")
    return trees[0]


def debian_mirror() -> str:
    """The Debian archive the machine's apt already uses (its first `deb` entry whose URI ends in
    /debian), so the sources come from the same mirror as the machine's packages."""
    for path in APT_SOURCES:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        # one-line style: `deb [options] URI suite components`; deb822 style: `URIs: URI ...`
        for match in re.finditer(r"^(?:deb(?:\s+\[[^\]]*\])?|URIs:)\s+(\S+)", text, re.MULTILINE):
            if match[1].rstrip("/").endswith("/debian"):
                return match[1].rstrip("/")
    raise CompatError(f"no Debian archive in {', '.join(APT_SOURCES)}: apt-get source needs one for librdkafka")


def _step(command: list[str], cwd: str, what: str) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise CompatError(f"could not {what}: {(result.stdout + result.stderr)[-3000:]}")


def run(bootstrap: str, work_dir: str, tests: list[str] | None = None) -> SuiteResult:
    """Each test number in its own test-runner process (two at a time): the runner's exit check
    (no librdkafka thread left) then blames the test that leaked, and one failure spoils no other."""
    tests_dir = prepare()
    work_dir = os.path.abspath(work_dir)  # each runner runs in its own directory (fresh_cwd)
    conf = os.path.join(work_dir, "librdkafka-test.conf")
    with open(conf, "w") as f:
        # random topic names: a target that keeps state between runs starts each run afresh
        f.write(f"metadata.broker.list={bootstrap}\ntest.topic.random=true\ntest.timeout.multiplier=3\n")
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda number: _run_one(number, tests_dir, conf, work_dir), tests or TESTS))
    return SuiteResult("librdkafka", [o for outcomes in runs for o in outcomes], time.monotonic() - began, work_dir)


def _run_one(number: str, tests_dir: str, conf: str, work_dir: str) -> list[Outcome]:
    log = os.path.join(work_dir, f"librdkafka-{number}.log")
    env = {
        **os.environ,
        "RDKAFKA_TEST_CONF": conf,
        "TESTS": number,
        "TEST_KAFKA_VERSION": BROKER_VERSION,
        # the runner is linked against the freshly built libraries, not installed ones
        "LD_LIBRARY_PATH": os.pathsep.join(os.path.join(tests_dir, "..", lib) for lib in ("src", "src-cpp")),
    }
    env.pop("CI", None)  # the runner changes its timeouts and output under CI=...
    command = [os.path.join(tests_dir, "test-runner"), "-L", "-E"]
    code, _ = run_logged(command, log_path=log, timeout=TIMEOUT_S, env=env, cwd=fresh_cwd(work_dir, number))
    outcomes = parse_log(log)
    if not outcomes:
        return [Outcome(number, FAILED, f"test-runner exited {code} before starting a test; see {log}")]
    return outcomes


def fresh_cwd(work_dir: str, number: str) -> str:
    """An empty working directory for one test-runner process, under the run's work directory.

    The runner writes into its working directory, and a test can read back what an earlier run left
    there: 0014_reconsume_191's `offset.store.method=file` half keeps its offsets in
    `<topic>-<partition>.offset` there and starts from the offset it finds. Its topic names are not
    unique across runs (librdkafka's first rd_kafka_new reseeds rand() with the milliseconds of the
    current second, leaving about 1,000 names for that topic), so in the shared build directory,
    where earlier runs had left 52 such files (82 by the end), 4 of 30 runs found an earlier topic's
    file, started at its end and waited there until the test timed out (a CI failure of 2026-11-28).
    """
    path = os.path.join(work_dir, f"librdkafka-{number}.cwd")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


ANSI = re.compile(r"\x1b\[[0-9;]*m")
STARTED = re.compile(r"=+ Running test (?P<name>\S+) =+")
PASSED_LINE = re.compile(r"=+ Test (?P<name>\S+) PASSED =+")
FAILED_LINE = re.compile(r'^### Test "(?P<name>[^ "]+)')
SKIPPED_LINE = re.compile(r"^\[(?P<name>\S+)\s*/\s*[0-9.]+s\] WARN: SKIPPING TEST: (?P<why>.*)$")
# tests left out by -L (those needing no broker): not run, and not this suite's business
NOT_SELECTED = "Filtered due to negative test flags"


def parse_log(path: str) -> list[Outcome]:
    """Per-test results from test-runner's output: started, PASSED, `### Test "name ..." failed`, SKIPPING.

    A test that started but neither passed nor failed (a crash, a hang killed) counts as failed;
    so does the runner's own exit check (<MAIN>), under the name `<MAIN>` with the first test's number.
    """
    with open(path, errors="replace") as f:
        lines = [ANSI.sub("", line).rstrip("\n") for line in f]
    started: list[str] = []
    results: dict[str, Outcome] = {}
    for index, line in enumerate(lines):
        if match := STARTED.search(line):
            started.append(match["name"])
        elif match := PASSED_LINE.search(line):
            results.setdefault(match["name"], Outcome(match["name"], PASSED))
        elif match := FAILED_LINE.match(line):
            why = lines[index + 1].strip() if index + 1 < len(lines) else ""
            name = match["name"] if match["name"] != "<MAIN>" else f"<MAIN>[{started[0] if started else '?'}]"
            results[name] = Outcome(name, FAILED, f"{line.strip('# ')} {why}")
        elif (match := SKIPPED_LINE.match(line)) and NOT_SELECTED not in match["why"]:
            results.setdefault(match["name"], Outcome(match["name"], SKIPPED, match["why"]))
    for name in started:
        if name not in results:
            results[name] = Outcome(name, FAILED, "started but did not finish: " + " | ".join(lines[-3:]))
    return list(results.values())
