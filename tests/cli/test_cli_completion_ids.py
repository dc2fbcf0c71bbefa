"""Shell completion of consumer group ids and transactional ids, through typer's real completion
protocol in a `txlog` subprocess (see test_cli.py's topic-name completion)."""

from __future__ import annotations

import pytest

import txlog as api
from tests.cli.cli_helpers import _complete, tree


@pytest.fixture
def store(tmp_path) -> str:
    """Groups billing, audit, bizops; transactional ids loader-1 (committed), loader-2 (open), other."""
    path = str(tmp_path / "ids")
    with api.Admin(path) as admin:
        admin.create_topic("t", 1)
        for tid, commit in (("loader-1", True), ("loader-2", False), ("other", True)):
            p = api.Producer(admin.store, transactional_id=tid)
            p.init_transactions()
            p.begin_transaction()
            p.send("t", b"x")
            if commit:
                p.commit_transaction()
                p.close()
            else:
                p.flush()  # left open: still listed
        for group in ("billing", "audit", "bizops"):
            admin.alter_consumer_group_offsets(group, {api.TopicPartition("t", 0): 0})
    return path


def completions(words: str) -> list[str]:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    proc = _complete(words, cword)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return sorted(proc.stdout.split())


@pytest.mark.parametrize(
    "verb",
    [
        "groups describe --group",
        "groups reset-offsets --group",
        "groups delete-offsets -g",
        "consume -t t -g",
        "process --input t --output t -g",
    ],
)
def test_group_ids_complete_where_a_verb_takes_one(store, verb):
    assert completions(f"txlog --data-dir {store} {verb} b") == ["billing", "bizops"]
    assert completions(f"txlog --data-dir {store} {verb} ") == ["audit", "billing", "bizops"]


@pytest.mark.parametrize(
    "verb",
    [
        "transactions describe",
        "commit",
        "abort",
        "produce -t t",
        "process --input t --output t -g g",
    ],
)
def test_transactional_ids_complete_where_a_verb_takes_one(store, verb):
    assert completions(f"txlog --data-dir {store} {verb} --transactional-id lo") == ["loader-1", "loader-2"]


def test_data_dir_after_the_verb_is_used_and_nothing_is_written(store):
    before = tree(store)
    assert completions(f"txlog groups describe --data-dir {store} --group a") == ["audit"]
    assert completions(f"txlog commit --data-dir {store} --transactional-id o") == ["other"]
    assert tree(store) == before  # completion reads read-only: no sweep, no lock files


def test_no_store_completes_nothing(tmp_path):
    assert completions(f"txlog --data-dir {tmp_path / 'none'} groups describe --group ") == []
    assert completions(f"txlog --data-dir {tmp_path / 'none'} commit --transactional-id ") == []
