"""Compaction's swap protocol under a real kill -9, and readers beside a cleaner (issue 25).

* A worker process (compaction_crash_worker.py) opens a filled compact topic and runs
  `Store.compact`, SIGKILLing itself just before and just after each step named by
  `storage.log_cleaner.SWAP_STEPS` (its N-th call: the first segment group, and with `--big` the
  second and third too). The store is then opened again, first by a lock-free reader and then by a
  writer (which runs recovery), and must show: nothing lost and nothing duplicated (each view lies
  between the same history cleaned without a crash and the history not cleaned, as Kafka's
  group-by-group swap allows: offsets in order and once, records as written), the log end and
  start unchanged, indexes right (every surviving offset found through the offset index, every
  timestamp lookup equal to the first surviving record at or after it, the store check clean),
  no `.cleaned` / `.swap` / `.deleted` file left after recovery, and the next `compact` completes
  with exactly the uncrashed result.
* A reader process reads the whole partition in a loop while another process writes and cleans
  round after round: no record twice, no key's latest record missing, no error.

`--big` runs more kill points and a larger history.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compaction_crash_worker as w

import storage.log_cleaner as log_cleaner
from storage import Store
from storage.file_check import Severity
from txlog.tools.store_check import check_store

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compaction_crash_worker.py")
POINTS = [(when, step) for step in log_cleaner.SWAP_STEPS for when in ("before", "after")]
RU, RC = "read_uncommitted", "read_committed"


def _run_worker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=w.ROOT)
    return subprocess.run(
        [sys.executable, WORKER, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def _views(root: str) -> dict[str, w.View]:
    with Store.open_for_reading(root) as store:
        log = store.partition(w.TOPIC, 0)
        return {iso: w.view(log, iso) for iso in (RU, RC)}


@pytest.fixture(scope="module")
def histories(tmp_path_factory, request):
    """(uncleaned, cleaned) stores of the same history, and the views of each."""
    big = bool(request.config.getoption("--big"))
    base = tmp_path_factory.mktemp("compaction")
    uncleaned = str(base / "uncleaned")
    w.fill(uncleaned, seed=25, batches=600 if big else 160)
    cleaned = str(base / "cleaned")
    shutil.copytree(uncleaned, cleaned)
    done = _run_worker("compact", cleaned)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    before, after = _views(uncleaned), _views(cleaned)
    assert len(after[RU]) < len(before[RU]), "the history gave the cleaner nothing to remove"
    with Store.open_for_reading(cleaned) as store:
        assert len(store.partition(w.TOPIC, 0).segments) < len(
            Store.open_for_reading(uncleaned).partition(w.TOPIC, 0).segments
        ), "cleaning merged no segments: the crash points would not cover a group"
    return uncleaned, cleaned, before, after


def _between(got: w.View, cleaned: w.View, uncleaned: w.View, what: str) -> None:
    """Kafka swaps segment group by group: any mix of cleaned and uncleaned groups is allowed,
    nothing else. The cleaned view is within the uncleaned one, so: got ⊆ uncleaned, ⊇ cleaned."""
    offsets = [o for o, _, _, _ in got]
    assert offsets == sorted(set(offsets)), f"{what}: a record twice or out of order: {offsets}"
    extra = set(got) - set(uncleaned)
    assert not extra, f"{what}: records never written (or changed): {sorted(extra)[:5]}"
    lost = set(cleaned) - set(got)
    assert not lost, f"{what}: records lost: {sorted(lost)[:5]}"


def _check_indexes(log, ru: w.View) -> None:
    """The offset and time indexes of the cleaned segments agree with what they index."""
    for o, ts, _, _ in ru:
        found = [r.offset for b in log.read(o, max_bytes=1) for r in b.records() if r.offset >= o]
        assert found and found[0] == o, f"reading at offset {o} gave {found[:3]}"
        want = min(x for x, t, _, _ in ru if t >= ts)
        assert log.offset_for_timestamp(ts) == want, f"timestamp {ts}: offset {log.offset_for_timestamp(ts)}"
    assert log.offset_for_timestamp(max(t for _, t, _, _ in ru) + 1000) is None


def _errors(store: Store) -> list:
    """The store check's errors, but for the transaction `fill` leaves open on purpose (it bounds the
    cleaning at the LSO): with no coordinator in these tests, the check calls it hanging."""
    findings = check_store(store, w.TOPIC).findings
    return [f for f in findings if f.severity is Severity.ERROR and not f.message.startswith("hanging:")]


def _check_recovered(root: str, histories) -> None:
    uncleaned_root, _, before, after = histories
    with Store.open_for_reading(uncleaned_root) as store:
        end = store.partition(w.TOPIC, 0).log_end_offset
    # A reader that takes no lock, before any writer recovers the crash.
    for iso, got in _views(root).items():
        _between(got, after[iso], before[iso], f"lock-free reader of the crashed store, {iso}")
    with Store.open(root) as store:
        assert w.leftovers(root) == [], f"recovery left {w.leftovers(root)}"
        log = store.partition(w.TOPIC, 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, end)
        views = {iso: w.view(log, iso) for iso in (RU, RC)}
        for iso, got in views.items():
            _between(got, after[iso], before[iso], f"after recovery, {iso}")
        _check_indexes(log, views[RU])
        assert _errors(store) == []
        store.compact(w.TOPIC)
        assert w.leftovers(root) == []
        log = store.partition(w.TOPIC, 0)
        assert {iso: w.view(log, iso) for iso in (RU, RC)} == after, "the next compact did not finish the job"
        _check_indexes(log, after[RU])
        assert _errors(store) == []
    assert _views(root) == after  # and so it stays after a reopen


def _kill_points(big: bool) -> list[tuple[str, str, int]]:
    return [(when, step, nth) for when, step in POINTS for nth in ((1, 2, 3) if big else (1,))]


def test_swap_steps_are_named():
    """The contract the crash points rely on: SWAP_STEPS names module-level functions of the cleaner."""
    assert len(log_cleaner.SWAP_STEPS) >= 2
    for name in log_cleaner.SWAP_STEPS:
        assert callable(getattr(log_cleaner, name)), name


def test_kill_at_each_swap_step(histories, tmp_path, big):
    uncleaned = histories[0]
    killed = []
    for when, step, nth in _kill_points(big):
        root = str(tmp_path / f"{when}-{step}-{nth}")
        shutil.copytree(uncleaned, root)
        result = _run_worker("compact", root, "--kill", when, "--step", step, "--nth", str(nth))
        where = f"{when}:{step}:{nth}"
        if f"KILL {where}" in result.stdout:
            assert result.returncode == -9, result.stdout + result.stderr
            killed.append(where)
        else:
            assert result.returncode == 0 and "DONE" in result.stdout, result.stdout + result.stderr
            assert nth > 1, f"compact never called {step}: SWAP_STEPS does not name what the swap runs"
        try:
            _check_recovered(root, histories)
        except AssertionError as exc:
            raise AssertionError(f"killed at {where}: {exc}") from exc
        shutil.rmtree(root, ignore_errors=True)
    assert len(killed) >= len(POINTS)


def test_reader_beside_a_cleaning_process(tmp_path, big):
    root = str(tmp_path / "churn")
    stop = str(tmp_path / "stop")
    rounds = 60 if big else 15
    env = dict(os.environ, PYTHONPATH=w.ROOT)
    # The topic exists before the reader opens the store.
    first = _run_worker("churn", root, "--rounds", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    reader = subprocess.Popen(
        [sys.executable, WORKER, "read", root, "--stop", stop], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        cleaner = _run_worker("churn", root, "--rounds", str(rounds))
    finally:
        with open(stop, "w"):
            pass
        out, _ = reader.communicate(timeout=300)
    assert reader.returncode == 0, out
    assert out.startswith("READS"), out
    assert cleaner.returncode == 0, cleaner.stdout + cleaner.stderr
    with Store.open(root) as store:
        got = w.view(store.partition(w.TOPIC, 0), RU)
        assert w.check_churn_view(got, (rounds + 1) * w.KEYS) is None
        assert len(got) < (rounds + 1) * w.KEYS, "nothing was cleaned"
        assert _errors(store) == []
