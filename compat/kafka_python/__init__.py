"""kafka-python's integration tests (test/integration of its PyPI source release) against a bootstrap.

The sdist carries test/integration but neither test/__init__.py nor test/service.py; without the
first, `import test` finds the standard library's test package, without the second the fixtures
cannot be imported. The scoreboard adds both (sdist_service.py beside this file) and nothing else.
The fixtures use an external broker when KAFKA_URI is set; KAFKA_VERSION gates version-specific
tests and the clients' api_version, and KAFKA_ROOT must name a directory (never used externally).
The suite runs in its own virtualenv (cached) with the sdist's testing extra, pinned below, so it
tests the released code and not the project's installed kafka-python.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

from compat.harness import FAILED, PASSED, SKIPPED, CompatError, Outcome, SuiteResult, cache_root, run_logged

VERSION = "3.0.12"
# the sdist's `testing` extra (pytest, pytest-mock, pytest-timeout) and its codecs, pinned
REQUIREMENTS = [
    "pytest==9.2.0",
    "pytest-mock==3.17.0",
    "pytest-timeout==2.4.0",
    "lz4==4.4.5",
    "zstandard==0.25.0",
    "python-snappy==0.7.3",
]
KAFKA_VERSION = "4.4.0"
TIMEOUT_S = 1500.0


def prepare() -> tuple[str, str]:
    """(unpacked sdist, virtualenv python), downloading and installing on first use."""
    home = os.path.join(cache_root(), f"kafka-python-{VERSION}")
    source = os.path.join(home, "src")
    if not os.path.isdir(os.path.join(source, "test", "integration")):
        _unpack_sdist(home, source)
    python = os.path.join(home, "venv", "bin", "python")
    if not os.path.exists(os.path.join(home, "venv", ".complete")):
        _make_venv(os.path.join(home, "venv"))
    return source, python


def _unpack_sdist(home: str, source: str) -> None:
    os.makedirs(home, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".sdist-") as work:
        _check(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"kafka-python=={VERSION}",
                "-d",
                work,
            ],
            "download kafka-python's sdist",
        )
        archive = glob.glob(os.path.join(work, "kafka_python-*.tar.gz"))
        if not archive:
            raise CompatError(f"pip gave no kafka-python {VERSION} sdist")
        with tarfile.open(archive[0]) as tar:
            tar.extractall(work, filter="data")
        unpacked = os.path.join(work, f"kafka_python-{VERSION}")
        if not os.path.isdir(os.path.join(unpacked, "test", "integration")):
            raise CompatError(f"kafka-python {VERSION}'s sdist has no test/integration")
        open(os.path.join(unpacked, "test", "__init__.py"), "w").close()
        shutil.copy(
            os.path.join(os.path.dirname(__file__), "sdist_service.py"), os.path.join(unpacked, "test", "service.py")
        )
        shutil.rmtree(source, ignore_errors=True)
        os.rename(unpacked, source)


def _make_venv(venv: str) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    _check([sys.executable, "-m", "venv", venv], "create the suite's virtualenv")
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _check([*pip, *REQUIREMENTS], "install the suite's test requirements")
    open(os.path.join(venv, ".complete"), "w").close()


def _check(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise CompatError(f"could not {what}: {result.stdout}{result.stderr}".strip())


def run(bootstrap: str, work_dir: str, select: list[str] | None = None) -> SuiteResult:
    """Run test/integration (or the `select`ed node ids under it) against `bootstrap`."""
    source, python = prepare()
    junit = os.path.join(work_dir, "kafka-python.junit.xml")
    log = os.path.join(work_dir, "kafka-python.log")
    env = {
        **os.environ,
        "KAFKA_URI": f"PLAINTEXT://{bootstrap}",
        "KAFKA_VERSION": KAFKA_VERSION,
        "KAFKA_ROOT": source,
        "PYTHONPATH": source,
    }
    targets = [f"test/integration/{node}" for node in select] if select else ["test/integration"]
    # The sdist's own addopts give each test 300 s and kill the whole run (thread method) on a hang,
    # losing the report; a signal fails just that test, and 120 s is ample for any of them here.
    command = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "log_level=WARNING",
        "--timeout=120",
        "--timeout-method=signal",
        f"--junitxml={junit}",
        *targets,
    ]
    code, seconds = run_logged(command, log_path=log, timeout=TIMEOUT_S, env=env, cwd=source)
    if not os.path.exists(junit):
        raise CompatError(f"kafka-python's pytest exited {code} without a report; see {log}")
    return SuiteResult("kafka-python", parse_junit(junit), seconds, log)


def parse_junit(path: str) -> list[Outcome]:
    """One Outcome per <testcase>: `module.Class::name` as the allow-list names it."""
    outcomes = []
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname', '').removeprefix('test.integration.')}::{case.get('name')}"
        status, detail = PASSED, ""
        for tag, meaning in (("failure", FAILED), ("error", FAILED), ("skipped", SKIPPED)):
            element = case.find(tag)
            if element is not None:
                status, detail = meaning, element.get("message") or (element.text or "")
                break
        outcomes.append(Outcome(test, status, detail))
    return outcomes
