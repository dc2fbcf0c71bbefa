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
