"""What `txlog --help` and `txlog VERB --help` import: only what the help needs.

Help is what a new user runs first, and every run pays the start-up (issue 23: `txlog --help`
had grown from 0.17 s to over 0.3 s). Two rules keep it cheap, checked here in a fresh
interpreter through `sys.modules` (no timing: tests pass on a loaded machine):

* no heavy module is imported for help: not `storage` (and so not the native codec), `txlog`,
  Spark, Arrow or the codecs; their imports belong inside the commands that use them;
* the verbs are imported lazily (cli/main.py `VERBS`): `txlog --help` imports no verb's module,
  and `txlog VERB --help` only the module of that verb (and what it imports itself).
"""

from __future__ import annotations

import json

import pytest

from tests.cli.cli_helpers import assert_ok, make_store, python, txlog

# Top-level packages no help may import.
HEAVY = frozenset(
    {
        "storage",
        "txlog",
        "pyspark",
        "py4j",
        "pyarrow",
        "duckdb",
        "pandas",
        "numpy",
        "crc32c",
        "cramjam",
        "rich",
        "confluent_kafka",
    }
)

# Every verb's module and the cli modules they own; a verb's help may import only its own.
VERB_MODULES = frozenset(
    {
        "cli.produce",
        "cli.consume",
        "cli.transactions",
        "cli.demo",
        "cli.demo_exactly_once",
        "cli.inspect",
        "cli.dump_log",
        "cli.verify",
        "cli.process",
        "cli.sql",
        "cli.sql_engine",
        "cli.sql_shell",
        "cli.sql_duckdb",  # an engine: imported when sql runs, never by its help
        "cli.sql_spark",
        "cli.topics",
        "cli.groups",
        "cli.serve",
        "cli.mirror",
        "cli.export",
    }
)

# verb (as typed) -> the verb modules its help may import: its own, and those its module imports.
OWN_MODULES = {
    "produce": {"cli.produce"},
    "consume": {"cli.consume"},
    "commit": {"cli.transactions"},
    "abort": {"cli.transactions"},
    "demo": {"cli.demo", "cli.demo_exactly_once"},
    "inspect": {"cli.inspect"},
    "verify": {"cli.verify"},
    "process": {"cli.process"},
    # sql shares consume's --isolation-level choice; its engines are imported when it runs
    "sql": {"cli.sql", "cli.sql_engine", "cli.sql_shell", "cli.consume"},
    "topics": {"cli.topics"},
    "topics create": {"cli.topics"},
    "transactions": {"cli.transactions"},
    "transactions list": {"cli.transactions"},
    "groups": {"cli.groups"},
    "groups describe": {"cli.groups"},
    "serve": {"cli.serve"},
    "export": {"cli.export"},
    "mirror": {"cli.mirror"},
}


def _modules_after(argv: list[str]) -> set[str]:
    """The modules loaded once `txlog ARGV` (a help) has run in a fresh interpreter (it must exit 0)."""
    modules, stdout = _modules_after_run(argv)
    assert "Usage: txlog" in stdout, stdout
    return modules


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_root_help_imports_no_verb_and_nothing_heavy():
    modules = _modules_after(["--help"])
    assert _heavy(modules) == set()
    assert modules & VERB_MODULES == set()
    assert "pydantic" not in modules  # typer converts option values with it; help converts none


@pytest.mark.parametrize("verb", sorted(OWN_MODULES))
def test_verb_help_imports_only_that_verb_and_nothing_heavy(verb):
    modules = _modules_after([*verb.split(), "--help"])
    assert _heavy(modules) == set()
    assert modules & VERB_MODULES == OWN_MODULES[verb]


def test_every_verb_is_checked():
    from cli.main import VERBS

    assert set(VERBS) <= set(OWN_MODULES)


# What a run of a verb must not import: typer converts option values with pydantic (cli/param_values.py
# keeps it out), and no verb that reads records needs Spark, Arrow, DuckDB or a Kafka client library.
RUN_HEAVY = frozenset(
    {"pydantic", "pydantic_core", "pyspark", "py4j", "pyarrow", "duckdb", "pandas", "rich", "kafka", "confluent_kafka"}
)


def _modules_after_run(argv: list[str]) -> tuple[set[str], str]:
    """The modules loaded once `txlog ARGV` has run to the end in a fresh interpreter, and its stdout."""
    code = (
        "import json, sys\n"
        f"sys.argv = ['txlog', *{argv!r}]\n"
        "import cli.main\n"
        "try:\n"
        "    cli.main.app(prog_name='txlog')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "print('MODULES', json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("MODULES ")]
    return set(json.loads(line.removeprefix("MODULES "))), proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "-t", "t", "-c", "2"],
        ["consume", "-t", "t", "-c", "2", "--value-format", "hex", "--isolation-level", "read_uncommitted"],
        ["consume", "-t", "t", "--group", "g", "-c", "1"],
        ["topics", "describe", "t", "-o", "json"],
    ],
)
def test_a_verb_run_imports_no_heavy_module(tmp_path, args):
    """A whole run (options converted, the store opened, records printed) stays clear of RUN_HEAVY."""
    store = tmp_path / "store"
    make_store(store, t=1)
    produced = txlog("produce", "-t", "t", data_dir=store, input="one\ntwo\n")
    assert_ok(produced)
    modules, out = _modules_after_run(["--data-dir", str(store), *args])
    assert {m for m in modules if m.split(".")[0] in RUN_HEAVY} == set()
    if args[0] == "consume":
        assert out.splitlines()[0] in ("one", "6f6e65"), out  # it did read the records


# What a plain read must not import: the coordinators and the record schemas under them serve
# groups and transactions (txlog/transport.py makes a coordinator on first use), as does a group
# member's side of the Consumer (its membership and session file); the extents of readers that
# plan their reads; and the crc32c package (storage has the native CRC; the package's import alone
# costs ~10 ms).
READER_NEEDS_NONE_OF = (
    "txlog.coordinator",
    "txlog.schemas",
    "txlog.clients.membership",
    "txlog.member_session",
    "storage.extent",
    "crc32c",
)


def _reader_extras(modules: set[str]) -> set[str]:
    """The modules of `modules` inside a package of READER_NEEDS_NONE_OF."""
    return {m for m in modules for p in READER_NEEDS_NONE_OF if m == p or m.startswith(p + ".")}


@pytest.mark.parametrize(
    "args",
    [
        ["consume", "-t", "t", "-c", "2"],
        ["consume", "-t", "t", "--isolation-level", "read_uncommitted", "--output", "jsonl"],
        ["consume", "-t", "t", "-p", "0", "-o", "-1"],
    ],
)
def test_consume_without_a_group_imports_no_coordinator(tmp_path, args):
    """consume without --group reads as a plain consumer: no coordinator, schema or crc32c package is loaded."""
    store = tmp_path / "store"
    make_store(store, t=1)
    assert_ok(txlog("produce", "-t", "t", data_dir=store, input="one\ntwo\n"))
    modules, out = _modules_after_run(["--data-dir", str(store), *args])
    assert out.strip(), out  # it did print records
    assert _reader_extras(modules) == set()


def test_consume_with_a_group_does_import_the_group_coordinator(tmp_path):
    """The other side of the check above: a group member does load its coordinator (the check can see it)."""
    store = tmp_path / "store"
    make_store(store, t=1)
    assert_ok(txlog("produce", "-t", "t", data_dir=store, input="one\n"))
    modules, _ = _modules_after_run(["--data-dir", str(store), "consume", "-t", "t", "--group", "g", "-c", "1"])
    assert "txlog.coordinator.group_coordinator" in modules and "txlog.clients.membership" in modules


def test_a_run_of_the_script_ends_with_its_objects_frozen_and_its_output_whole(tmp_path):
    """The script's app freezes what exists when the command ends (cli/main.py `TxlogApp`), so the
    interpreter's exit does not walk it all in a last full collection; atexit handlers still run
    after it, and the output is all there."""
    store = tmp_path / "store"
    make_store(store, t=1)
    assert_ok(txlog("produce", "-t", "t", data_dir=store, input="one\ntwo\n"))
    code = (
        "import atexit, gc, sys\n"
        f"sys.argv = ['txlog', '--data-dir', {str(store)!r}, 'consume', '-t', 't']\n"
        "import cli.main\n"
        "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), file=sys.stderr))\n"
        "cli.main.app(prog_name='txlog')\n"
    )
    proc = python(code)
    assert proc.returncode == 0 and proc.stdout == "one\ntwo\n", proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("FROZEN ")]
    assert int(line.split()[1]) > 1000, line  # the modules' objects, at least
