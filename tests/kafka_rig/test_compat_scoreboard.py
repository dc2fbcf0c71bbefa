"""The compatibility scoreboard (compat/, issue 21 item 4) against the baseline: a real Kafka 4.4 broker.

Each suite is one test: it fails when a test of the client's own suite fails that the suite's
allow-list does not name. The table is printed at the end of the module, as compat/README.md shows
it. The broker is this module's own, not the session's: the client suites expect the settings of
their own fixture brokers (compat.harness.BASELINE_BROKER_PROPS: topics created on first use, short
group session timeouts), which the rig's session broker deliberately lacks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from compat.__main__ import run_suites, runners
from compat.harness import (
    BASELINE_BROKER_PROPS,
    FAILED,
    PASSED,
    CompatError,
    Outcome,
    SuiteResult,
    Verdict,
    load_allowlist,
    table,
)
from tests.kafka_rig.broker import KafkaBroker

_verdicts: list[Verdict] = []


@pytest.fixture(scope="module")
def baseline_broker(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(str(tmp_path_factory.mktemp("compat-broker")), BASELINE_BROKER_PROPS).start()
    yield broker
    broker.stop()
    if _verdicts:
        # past pytest's capture, so CI's log shows the whole table once
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print("\ncompatibility scoreboard against Apache Kafka 4.4.0:\n" + table(_verdicts))


@pytest.mark.parametrize("suite", list(runners()))
def test_suite_passes_against_the_real_broker_but_for_its_allow_list(
    suite: str, baseline_broker: KafkaBroker, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    (verdict,) = run_suites([suite], baseline_broker.bootstrap, str(tmp_path), str(tmp_path), "the baseline broker")
    _verdicts.append(verdict)
    with capsys.disabled():
        print(f"\n{table([verdict])}")
    assert verdict.run > 0, f"{suite} ran no test; see {verdict.result.log_path}"
    assert not verdict.unexpected, "\n".join(f"{o.test}: {o.detail[:500]}" for o in verdict.unexpected)


def test_a_failure_the_allow_list_lacks_is_unexpected_and_an_allowed_one_is_not() -> None:
    result = SuiteResult("s", [Outcome("a", FAILED, "boom"), Outcome("b", FAILED, "known"), Outcome("c", PASSED)])
    verdict = Verdict(result, {"b": "needs SSL", "c": "was flaky"})
    assert [o.test for o in verdict.unexpected] == ["a"]
    assert [o.test for o in verdict.allowed] == ["b"]
    assert verdict.stale == ["c"]
    assert "| s     | 3         | 1      | 2      | 1 " in table([verdict])


def test_an_allow_list_entry_without_a_reason_is_refused(tmp_path) -> None:
    path = tmp_path / "allowlist"
    for bad in ("bad::test", "bad::test |", "| a reason for no test"):
        path.write_text(f"# comment\ngood::test | needs two brokers\n{bad}\n")
        with pytest.raises(CompatError, match=r"allowlist:3"):
            load_allowlist(str(path))
    path.write_text("good::test | needs two brokers\n")
    assert load_allowlist(str(path)) == {"good::test": "needs two brokers"}


def test_every_shipped_allow_list_gives_reasons() -> None:
    from compat.harness import TARGET_KINDS, allowlist_name, suite_dir

    for folder, _ in runners().values():
        for kind in TARGET_KINDS:
            path = f"{suite_dir(folder)}/{allowlist_name(kind)}"
            assert os.path.exists(path), f"{path}: every suite has an allow-list per target, if only its header"
            load_allowlist(path)


def test_each_target_kind_is_judged_by_its_own_allow_list_and_notes_reach_the_findings() -> None:
    from compat.harness import BASELINE, TXLOG, findings, judge

    # librdkafka's 0103 needs replication factor 3: allowed at the one-broker baseline, not for txlog
    result = SuiteResult("librdkafka", [Outcome("0103_transactions", FAILED, "INVALID_REPLICATION_FACTOR")])
    assert judge(result, "librdkafka", BASELINE).unexpected == []
    txlog = judge(result, "librdkafka", TXLOG)
    assert [o.test for o in txlog.unexpected] == ["0103_transactions"]
    text = findings(txlog, "127.0.0.1:1", "txlog serve", ["txlog serve exited -9 during the run;\nlast line"])
    assert "## About the target\n\n- txlog serve exited -9 during the run;\n    last line" in text
    assert "## Failures not in the allow-list" in text
    assert "(0 allowed by `allowlist.txlog`)" in text
