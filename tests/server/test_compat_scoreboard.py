"""The compatibility scoreboard (compat/) against `txlog serve`: issue 22's rule that every test of the
real clients' suites that passes against the real broker passes against txlog, or is listed in the
suite's txlog allow-list (compat/<suite>/allowlist.txlog) with its reason.

The suites run against one `txlog serve` on a fresh store (compat/txlog_serve.py), as they run
against one baseline broker in tests/kafka_rig/test_compat_scoreboard.py; the table is printed at
the end of the module. They take minutes (compat/README.md has the times); TXLOG_COMPAT_SERVE=0
leaves them out of a local run (CI runs them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from compat.__main__ import run_suites, runners
from compat.harness import TXLOG, Verdict, table
from compat.txlog_serve import ServeTarget, txlog_serve

RUN_SUITES = os.environ.get("TXLOG_COMPAT_SERVE") != "0"

_verdicts: list[Verdict] = []


@pytest.fixture(scope="module")
def serve_target(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[ServeTarget]:
    with txlog_serve(str(tmp_path_factory.mktemp("compat-serve"))) as target:
        yield target
    if _verdicts:
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print("\ncompatibility scoreboard against txlog serve:\n" + table(_verdicts))
    assert not target.stop_problems, target.stop_problems


@pytest.mark.skipif(not RUN_SUITES, reason="TXLOG_COMPAT_SERVE=0 leaves the client suites out")
@pytest.mark.parametrize("suite", list(runners()))
def test_suite_passes_against_txlog_serve_but_for_its_allow_list(
    suite: str, serve_target: ServeTarget, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap, out = serve_target.bootstrap, str(tmp_path)
    (verdict,) = run_suites([suite], bootstrap, out, out, "txlog serve", kind=TXLOG, notes=serve_target.notes)
    _verdicts.append(verdict)
    with capsys.disabled():
        print(f"\n{table([verdict])}")
    assert verdict.run > 0, f"{suite} ran no test; see {verdict.result.log_path}"
    assert serve_target.server.proc is not None and serve_target.server.proc.poll() is None, serve_target.notes()
    assert not verdict.unexpected, "\n".join(f"{o.test}: {o.detail[:500]}" for o in verdict.unexpected)


def test_the_txlog_target_serves_a_fresh_store_and_stops_cleanly(tmp_path) -> None:
    with txlog_serve(str(tmp_path)) as target:
        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        assert admin.list_topics(timeout=30).brokers, "the server answered Metadata with no broker"
        assert not any("exited" in note for note in target.notes())
    assert target.stop_problems == []
    assert target.notes() == [] or all("lacks the broker configs" in note for note in target.notes())
    assert os.path.isdir(tmp_path / "txlog-store")


def test_a_server_that_dies_during_the_run_is_in_the_notes(tmp_path) -> None:
    with txlog_serve(str(tmp_path)) as target:
        target.server.kill()
        died = [note for note in target.notes() if "during the run" in note]
    assert died and "exited -9" in died[0]
    assert target.stop_problems and "during the run" in target.stop_problems[0]


FAKE_RUNNER = """#!/bin/sh
# stands in for librdkafka's tests/test-runner: like 0014_reconsume_191's file offset store, it
# reads back a file an earlier run left in its working directory, and fails if it finds one
echo "[<MAIN> / 0.000s] ============ Running test ${TESTS}_fake ============"
if ls ./*.offset >/dev/null 2>&1; then
    echo "### Test \\"${TESTS}_fake\\" failed at fake.c:1: ###"
    echo "found an earlier run's offset file in $(pwd)"
    exit 1
fi
echo 100 > ./topic-0.offset
echo "[${TESTS}_fake / 0.001s] ============ Test ${TESTS}_fake PASSED ============"
"""


def test_each_librdkafka_run_starts_in_an_empty_working_directory(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two suite runs (the baseline's and txlog's, or two CI runs sharing the build cache) must not
    see each other's files: librdkafka's test-runner leaves state in its working directory that a
    later test reads back (compat.librdkafka.fresh_cwd)."""
    import compat.librdkafka as librdkafka

    tests_dir = tmp_path / "build" / "tests"
    tests_dir.mkdir(parents=True)
    runner = tests_dir / "test-runner"
    runner.write_text(FAKE_RUNNER)
    runner.chmod(0o755)
    monkeypatch.setattr(librdkafka, "prepare", lambda: str(tests_dir))
    for run in ("first", "second", "first"):  # the same work directory twice, too
        (tmp_path / run).mkdir(exist_ok=True)
        result = librdkafka.run("127.0.0.1:9", str(tmp_path / run), tests=["0014", "0015"])
        assert [(o.test, o.status) for o in result.outcomes] == [("0014_fake", "passed"), ("0015_fake", "passed")]
    assert os.listdir(tests_dir) == ["test-runner"], "a run wrote into the shared build directory"
