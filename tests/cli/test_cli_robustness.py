"""No traceback, ever: hostile arguments, stdin, data directories and stores.

Most runs are in-process (tests/cli/cli_helpers.py): there an exception other than SystemExit
fails the run before its output is looked at -- a process would have printed a traceback -- and
`one_error`/`ok` check that the run ended through SystemExit or returned. Signals, a fifo read by
a second process, a read-only mount and a PATH without Java run real `txlog` processes.

Issue 12 items 4-7 and docs/cli-conventions.md §6: every expected failure is one `Error: ...` line
and an exit code from the documented set (0 ok, 1 error, 2 usage, 3 a check found problems, 4
ambiguous commit/abort, 130 interrupted). The property test throws random bytes and option values
at every verb (`sql`, `process` and `demo` aside: they start Spark, a child command or a tour) and
checks that, and that a failed command that never got to write left the store byte for byte as it
was. Its example count is small by default; `--big` runs many more.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.cli_helpers import ROOT, CliRun, Ran, _env, log_bytes, txlog

EXIT_CODES = {0, 1, 2, 3, 4}  # 130 only on a signal, which these runs never send
Arg = str | bytes


def run(
    *args: Arg, data_dir: Arg | None = None, stdin: bytes = b"", timeout: float = 120, env: dict[str, str] | None = None
) -> CliRun:
    """`txlog ARGS` with bytes in and out: arguments may be any bytes, as a shell passes them."""
    return txlog(*args, data_dir=data_dir, input=stdin, timeout=timeout, env=env, text=False)


def _ended_as_the_cli_ends(proc: Ran) -> None:
    """Through SystemExit (typer.Exit, a usage error) or by returning: never an exception escaping the CLI."""
    exception = getattr(proc, "exception", None)  # a real process shows an escaped one as a traceback instead
    assert exception is None or type(exception) is SystemExit, repr(exception)


def one_error(proc: Ran, code: int = 1) -> str:
    """Exit `code`, exactly one `Error: ...` line on stderr, no traceback; returns the message."""
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == code, (proc.returncode, proc.stdout[:300], err)
    assert b"Traceback" not in proc.stderr, err
    _ended_as_the_cli_ends(proc)
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, err
    return lines[0][len("Error: ") :]


def ok(proc: Ran) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err
    _ended_as_the_cli_ends(proc)
    return err


def tree(path: str) -> dict[str, tuple]:
    """Every file under `path` with its size and content hash (lock files: existence only)."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), path)] = ("dir",)
        for f in filenames:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = (os.path.getsize(full), hashlib.sha256(fh.read()).hexdigest())
    return out


def values(topic: str, data_dir: str, isolation: str = "read_committed") -> list[str]:
    proc = run("consume", "-t", topic, "--isolation-level", isolation, "-q", data_dir=data_dir)
    ok(proc)
    return proc.stdout.decode().splitlines()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    """A store with a topic 't' (2 partitions, records), a committed transaction and a group's offsets."""
    root = str(tmp_path_factory.mktemp("robust") / "store")
    ok(run("topics", "create", "t", "--partitions", "2", data_dir=root))
    ok(run("produce", "-t", "t", data_dir=root, stdin=b"a\nb\nc\n"))
    ok(run("produce", "-t", "t", "--transactional-id", "tx", data_dir=root, stdin=b"d\ne\n"))
    ok(run("consume", "-t", "t", "-g", "g1", "-q", data_dir=root))
    return root


@pytest.fixture
def store(template, tmp_path) -> str:
    path = str(tmp_path / "store")
    shutil.copytree(template, path)
    return path


# ---- a missing, mistyped or foreign --data-dir: every verb says "no store at ..." ---------------------------

VERBS = [
    ["topics", "list"],
    ["topics", "describe", "t"],
    ["topics", "alter", "t", "--partitions", "3"],
    ["topics", "delete", "t"],
    ["produce", "-t", "t"],
    ["consume", "-t", "t"],
    ["transactions", "list"],
    ["transactions", "describe", "--transactional-id", "tx"],
    ["groups", "list"],
    ["groups", "describe", "--group", "g1"],
    ["commit", "--transactional-id", "tx"],
    ["abort", "--transactional-id", "tx"],
    ["verify"],
    ["sql", "SELECT 1"],  # the default engine (DuckDB) runs in process
]


@pytest.mark.parametrize("kind", ["missing", "file", "empty-dir", "not-utf8"])
@pytest.mark.parametrize("verb", VERBS, ids=lambda v: "-".join(v[:2]))
def test_every_verb_says_no_store_instead_of_an_empty_answer(tmp_path, verb, kind):
    where: Arg = str(tmp_path / "nothing-here")
    if kind == "file":
        with open(where, "w") as f:
            f.write("not a store\n")
    elif kind == "empty-dir":
        os.mkdir(where)
    elif kind == "not-utf8":
        where = os.fsencode(str(tmp_path)) + b"/st\xffre"
    before = tree(str(tmp_path))
    message = one_error(run(*verb, data_dir=where, stdin=b"x\n"))
    assert message.startswith("no store at "), message
    assert "--data-dir" in message
    assert tree(str(tmp_path)) == before  # nothing created, not even an empty store


def test_a_store_path_that_is_a_file_is_named_as_such(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    assert "is a file" in one_error(run("topics", "list", data_dir=str(path)))
    assert "not a directory" in one_error(run("topics", "create", "t", data_dir=str(path)))


# ---- arguments and stdin that are not UTF-8 ----------------------------------------------------------------


def test_byte_options_take_the_bytes_typed(store):
    """kcat's -k, -H values and -K take raw bytes: what the shell passed is what the record holds."""
    ok(run("produce", "-t", "t", "-p", "0", "-k", b"k\xff", "-H", b"h=\xfe\x01", data_dir=store, stdin=b"v\n"))
    ok(run("produce", "-t", "t", "-p", "1", "-K", b"\xff", data_dir=store, stdin=b"key\xffval\n"))
    proc = run("consume", "-t", "t", "-p", "0", "-o", "-1", "-f", "%k|%s|%h\n", "-q", data_dir=store)
    ok(proc)
    assert proc.stdout.startswith(b"k\xff|v|h=\xfe\x01"), proc.stdout
    proc = run("consume", "-t", "t", "-p", "1", "-o", "-1", "-f", "%k|%s\n", "-q", data_dir=store)
    ok(proc)
    assert proc.stdout == b"key|val\n", proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["produce", "-t", b"t\xff"],
        ["consume", "-t", b"\xff"],
        ["topics", "create", b"\xfft"],
        ["consume", "-t", "t", "-g", b"g\xff"],
        ["transactions", "describe", "--transactional-id", b"\xff"],
        ["produce", "-t", "t", "-H", b"\xff=1"],
        ["produce", "-t", "t", "--transactional-id", b"\xfe"],
        ["topics", "describe", b"\xff"],
        ["inspect", "--files", b"/tmp/\xff.log"],
        ["produce", "-t", "t", b"/no/\xff"],
    ],
)
def test_names_that_are_not_utf8_are_one_error_line(store, args):
    before = tree(store)
    proc = run(*args, data_dir=store, stdin=b"x\n")
    assert proc.returncode in (1, 2)
    message = one_error(proc, proc.returncode)
    assert "\\udc" not in message  # shown as the bytes typed (\xff), not Python's surrogate escapes
    assert tree(store) == before


def test_stdin_that_is_not_utf8_is_written_as_bytes(store):
    ok(run("produce", "-t", "t", "-p", "0", data_dir=store, stdin=b"\xff\xfe\x00\n"))
    ok(run("produce", "-t", "t", "-p", "0", data_dir=store, stdin=b""))  # empty input: 0 records, exit 0


# ---- produce stops at the line it cannot write (item 5) -------------------------------------------------------

BIG = b"x" * 1_100_000  # above the default max.message.bytes (1048588)
HUGE = "<a non-UTF-8 line, a 1.1 MB line, a short line>"  # the property's name for that stdin, short to print


def test_an_oversized_line_stops_produce_with_exact_counts(store):
    before = values("t", store)
    proc = run("produce", "-t", "t", "-p", "1", data_dir=store, stdin=b"l1\nl2\n" + BIG + b"\nl4\n" + BIG + b"\nl6\n")
    message = one_error(proc)
    assert message.startswith("line 3: "), message
    assert "the 2 records before it were written, nothing after it" in message
    assert "txlog topics alter t --config max.message.bytes=" in message
    assert values("t", store) == before + ["l1", "l2"]  # l4 and l6 were not written


def test_the_suggested_limit_is_enough(store):
    message = one_error(run("produce", "-t", "t", data_dir=store, stdin=BIG + b"\n"))
    assert "nothing was written" in message
    limit = message.rsplit("max.message.bytes=", 1)[1].rstrip("'")
    ok(run("topics", "alter", "t", "--config", f"max.message.bytes={limit}", data_dir=store))
    ok(run("produce", "-t", "t", data_dir=store, stdin=BIG + b"\n"))


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transaction"])
def test_ignore_error_skips_each_bad_line_with_one_stderr_line(store, transactional):
    before = values("t", store)
    extra = ["--transactional-id", "skipper"] if transactional else []
    proc = run(
        "produce",
        "-t",
        "t",
        "-p",
        "1",
        "--property",
        "ignore.error=true",
        "--property",
        "parse.headers=true",
        *extra,
        data_dir=store,
        stdin=b"\tl1\n" + BIG + b"\n:\tbad-header\n\tl4\n" + b"\t" + BIG + b"\n",
    )
    err = ok(proc)
    skipped = [line for line in err.splitlines() if line.startswith("Skipped line ")]
    assert [s.split(":")[0] for s in skipped] == ["Skipped line 2", "Skipped line 3", "Skipped line 5"], err
    assert "Produced 2 records" in err and "Skipped 3 lines" in err
    assert values("t", store) == before + ["l1", "l4"]


def test_an_oversized_line_in_a_transaction_aborts_it_and_nothing_is_visible(store):
    before = values("t", store)
    message = one_error(
        run("produce", "-t", "t", "--transactional-id", "big", data_dir=store, stdin=b"l1\nl2\n" + BIG + b"\nl4\n")
    )
    assert message.startswith("line 3: ")
    assert "transaction 'big' aborted: nothing from this input is visible" in message
    assert values("t", store) == before


def test_a_compressed_record_that_fits_is_not_refused(store):
    ok(run("produce", "-t", "t", "-z", "gzip", data_dir=store, stdin=BIG + b"\n"))


# ---- interrupted and fenced transactional produce (items 6, 7) ------------------------------------------------


def test_interrupted_transactional_produce_reports_exactly_what_it_aborted(store, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"".join(b"%d\n" % i for i in range(3_000_000)))
    before = len(values("t", store, "read_uncommitted"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "--data-dir",
            store,
            "produce",
            "-t",
            "t",
            "--transactional-id",
            "slow",
            str(lines),
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # interrupt once the transaction has written something (never after a fixed time: on a slow
    # machine the signal could come before the command is ready for it)
    logs_before = log_bytes(store, "t")
    deadline = time.monotonic() + 120
    while log_bytes(store, "t") == logs_before and proc.poll() is None:
        assert time.monotonic() < deadline, "produce wrote nothing in 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    text = err.decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text
    aborted = len(values("t", store, "read_uncommitted")) - before
    if aborted:
        assert f"the {aborted} records it wrote to t stay in the log as aborted records" in text, (aborted, text)
    else:
        assert "nothing from this input is visible" in text
    assert len(values("t", store)) == len(values("t", store, "read_uncommitted")) - aborted


def test_a_fenced_producer_says_a_newer_instance_took_over(store, tmp_path):
    fifo = str(tmp_path / "in")
    os.mkfifo(fifo)
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "--data-dir",
            store,
            "produce",
            "-t",
            "t",
            "--transactional-id",
            "dup",
            fifo,
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with open(fifo, "wb", buffering=0) as feed:
        feed.write(b"old-1\n")
        time.sleep(2)  # the first instance has begun its transaction and written old-1
        ok(run("produce", "-t", "t", "--transactional-id", "dup", data_dir=store, stdin=b"new-1\n"))
        feed.write(b"old-2\n")
    _, err = first.communicate(timeout=60)
    message = one_error(subprocess.CompletedProcess(first.args, first.returncode, b"", err))
    assert "fenced by a newer instance" in message and "aborted" in message, message
    assert "epoch" not in message
    assert "old-1" not in values("t", store) and "new-1" in values("t", store)


# ---- a read-only store, a missing Java --------------------------------------------------------------------------


def _on_a_read_only_mount(store: str, tmp_path, commands: list[list[str]]) -> list[tuple[int, str]]:
    """Run each `txlog` command against `store` seen through a read-only bind mount (a private mount
    namespace: `unshare -m`, root only), so that even root cannot write it; (exit code, stderr) each."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a read-only mount")
    mount = tmp_path / "ro"
    mount.mkdir()
    script = [f"mount --bind {store} {mount} && mount -o remount,bind,ro {mount} || exit 99"]
    for i, cmd in enumerate(commands):
        args = " ".join(f"'{a}'" for a in cmd)
        script.append(
            f"{sys.executable} -m cli.main --data-dir {mount} {args} </dev/null >/dev/null "
            f"2>{tmp_path}/err{i}; echo $? >{tmp_path}/rc{i}"
        )
    proc = subprocess.run(
        ["unshare", "-m", "bash", "-c", "\n".join(script)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    if proc.returncode == 99:
        pytest.skip(f"no read-only bind mount here: {proc.stderr.decode(errors='replace')}")
    return [(int((tmp_path / f"rc{i}").read_text()), (tmp_path / f"err{i}").read_text()) for i in range(len(commands))]


def test_a_read_only_store_names_what_still_works(store, tmp_path):
    before = tree(store)
    (produce_rc, produce_err), (list_rc, list_err), (ro_rc, _), (consume_rc, _) = _on_a_read_only_mount(
        store,
        tmp_path,
        [
            ["produce", "-t", "t"],
            ["transactions", "list"],
            ["transactions", "list", "--no-sweep"],
            ["consume", "-t", "t", "-q"],
        ],
    )
    for rc, err in ((produce_rc, produce_err), (list_rc, list_err)):
        assert rc == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
        assert "not writable" in err and "--no-sweep" in err, err
    assert (ro_rc, consume_rc) == (0, 0)
    assert tree(store) == before


def test_sql_without_java_says_which_java_to_install(store, tmp_path):
    bin_dir = tmp_path / "bin"  # everything of /usr/bin and /bin but java
    bin_dir.mkdir()
    for d in ("/usr/bin", "/bin"):
        for name in os.listdir(d):
            if name != "java" and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(d, name))
    path = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable)])
    env = {k: v for k, v in _env({"PATH": path}).items() if k != "JAVA_HOME"}

    def sql(engine: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "cli.main", "--data-dir", store, "sql", "--engine", engine, "SELECT 1 AS one"]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)

    proc = sql("spark")
    message = one_error(proc)
    assert "Java 17 or 21" in message and "install" in message
    assert proc.stderr.decode().count("\n") == 1  # no "Starting Spark" first: Spark never starts
    embedded = sql("duckdb")  # the embedded engine needs no Java
    assert embedded.returncode == 0 and embedded.stdout.decode().split() == ["one", "-----", "1"], embedded


# ---- the property: random bytes and option values at every verb ---------------------------------------------

TEXT = st.one_of(
    st.sampled_from(
        [
            "t",
            "tx",
            "g1",
            "0",
            "-1",
            "1",
            "earliest",
            "latest",
            "",
            "-",
            "x=y",
            "__consumer_offsets",
            "none",
            "gzip",
            "all",
            "json",
            "table",
            "csv",
            "jsonl",
            "hex",
            "base64",
            "99999999999",
        ]
    ),
    st.binary(max_size=12).map(lambda b: b.replace(b"\0", b"")),  # argv cannot hold NUL
    st.text(max_size=12).map(lambda t: t.replace("\0", "")),
)
OPTIONS = {
    "produce": [
        "-t",
        "-p",
        "--property",
        "-K",
        "-k",
        "-H",
        "-Z",
        "--value-format",
        "-z",
        "--acks",
        "--transactional-id",
        "--no-commit",
        "--transaction-timeout-ms",
        "--no-idempotence",
    ],
    "consume": [
        "-t",
        "-p",
        "--offset",
        "-c",
        "--from-beginning",
        "--isolation-level",
        "--property",
        "-f",
        "--timeout-ms",
        "--output",
    ],
    "topics list": ["--exclude-internal", "--output"],
    "topics describe": ["--output"],
    "topics create": ["--partitions", "--config", "--if-not-exists"],
    "topics alter": ["--partitions", "--config", "--delete-config"],
    "topics delete": ["--if-exists"],
    "transactions list": ["--state", "--no-sweep", "--output"],
    "transactions describe": ["--transactional-id", "--no-sweep"],
    "transactions find-hanging": ["--no-sweep"],
    "groups list": ["--state", "--output"],
    "groups describe": ["--group", "--all-groups", "--members", "--state"],
    "groups reset-offsets": ["--group", "--topic", "--to-earliest", "--to-offset", "--shift-by", "--execute"],
    "groups delete-offsets": ["--group", "--topic"],
    "commit": ["--transactional-id"],
    "abort": ["--transactional-id"],
    "inspect": ["--files", "--print-data-log", "--deep-iteration", "--max-bytes"],
    "verify": ["--topic", "--output"],
}
# Verbs that only read (with these options): whatever their exit code, the store must not change.
READ_ONLY = {"consume", "topics list", "topics describe", "groups list", "groups describe", "inspect", "verify"}
FLAGS = {
    "-Z",
    "--no-commit",
    "--no-idempotence",
    "--from-beginning",
    "--exclude-internal",
    "--if-not-exists",
    "--if-exists",
    "--no-sweep",
    "--all-groups",
    "--members",
    "--state",
    "--to-earliest",
    "--execute",
    "--print-data-log",
    "--deep-iteration",
}


@st.composite
def invocations(draw) -> tuple[str, list[Arg], bytes | str, str]:
    verb = draw(st.sampled_from(sorted(OPTIONS)))
    args: list[Arg] = verb.split()
    if verb in ("topics describe", "topics create", "topics alter", "topics delete"):
        args.append(draw(TEXT))
    for option in draw(st.lists(st.sampled_from(OPTIONS[verb]), max_size=4)):
        args.append(option)
        if option not in FLAGS or option == "--state" and verb == "transactions list":
            args.append(draw(TEXT))
    if draw(st.booleans()):
        args.insert(
            0 if draw(st.booleans()) else len(args),
            draw(st.binary(min_size=1, max_size=8).map(lambda b: b.replace(b"\0", b"\xff"))),
        )
    stdin = draw(st.one_of(st.binary(max_size=64), st.just(b""), st.just(HUGE)))  # HUGE: named, not printed
    data_dir = draw(st.sampled_from(["store", "store", "store", "missing", "file"]))
    return verb, args, stdin, data_dir


def _max_examples() -> int:
    return 300 if "--big" in sys.argv else 12


@settings(
    max_examples=_max_examples(),
    deadline=None,
    derandomize="--big" not in sys.argv,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(invocations())
def test_no_input_makes_a_traceback_or_an_undocumented_exit_code(template, case):
    verb, args, stdin, kind = case
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        shutil.copytree(template, store)
        where = {"store": store, "missing": os.path.join(tmp, "missing"), "file": os.path.join(tmp, "f")}[kind]
        if kind == "file":
            with open(where, "w") as f:
                f.write("x")
        before = tree(store)
        proc = run(*args, data_dir=where, stdin=b"\xff\xff\n" + BIG + b"\nz\n" if stdin == HUGE else stdin, timeout=60)
        err = proc.stderr.decode("utf-8", "replace")
        assert b"Traceback" not in proc.stderr, (args, err)
        _ended_as_the_cli_ends(proc)
        assert proc.returncode in EXIT_CODES, (args, proc.returncode, err)
        if proc.returncode != 0:
            assert err.strip(), (args, "failed without saying why")
        failed_before_writing = proc.returncode == 2 or kind != "store" or verb in READ_ONLY
        if failed_before_writing:
            assert tree(store) == before, (args, proc.returncode, err)
