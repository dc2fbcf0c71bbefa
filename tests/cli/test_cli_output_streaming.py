"""Every output format of `consume` and `inspect` is written as it is read: memory stays flat
however long the output (issue 23, item 8: `consume --output json` of 1M records took 2.1 GB).

The formats themselves do not change: the streamed json and table are byte for byte what
json.dumps(..., indent=2) and tabulate print for the whole list.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

import txlog as api
from cli.output import JsonArray, JsonObject, SpilledTable, json_pieces, render_table
from tests.cli.cli_helpers import ROOT, _env

RECORDS = 300_000
# Peak RSS of one command over the records above: about 55 MB streamed, 520-720 MB when a format held
# every row (measured: consume json 572 MB, consume table 520 MB, inspect json 717 MB; streamed 46-54 MB).
RSS_BOUND_MB = 200

_MEASURE = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.stderr.write(done.stderr.decode(errors="replace"))
"""


def _peak_rss_mb(*args: str) -> tuple[int, int]:
    """(exit code, peak RSS in MB) of `txlog ARGS` run as a process of its own."""
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    code, rss = proc.stdout.split()
    assert int(code) == 0, proc.stderr
    return int(code), int(rss)


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("big") / "store")
    with api.Admin(path) as admin:
        admin.create_topic("big", 1)
    with api.Producer(path) as producer:
        producer.produce_many("big", [b"%d" % i for i in range(RECORDS)]).get()
    return path


@pytest.mark.parametrize("output", ["json", "table", "jsonl", "csv", "text"])
def test_consume_output_memory_stays_flat(big_store, output):
    _, rss = _peak_rss_mb("--data-dir", big_store, "consume", "-t", "big", "--output", output)
    assert rss < RSS_BOUND_MB, f"consume --output {output} of {RECORDS} records peaked at {rss} MB"


@pytest.mark.parametrize("output", ["json", "jsonl", "text"])
def test_inspect_output_memory_stays_flat(big_store, output):
    log = f"{big_store}/big-0/00000000000000000000.log"
    _, rss = _peak_rss_mb("inspect", log, "--print-data-log", "--output", output)
    assert rss < RSS_BOUND_MB, f"inspect --print-data-log --output {output} of {RECORDS} records peaked at {rss} MB"


def _lazy(value: object) -> object:
    """`value` with every list and dict made as it is written."""
    if isinstance(value, list):
        return JsonArray(_lazy(item) for item in value)
    if isinstance(value, dict):
        return JsonObject((key, _lazy(item)) for key, item in value.items())
    return value


@pytest.mark.parametrize(
    "value",
    [
        [],
        {},
        [[]],
        {"a": {}},
        [1, {"a": [], "b": {"c": "x\ny\u00e9\u6f22"}, "d": None}],
        {"k": [{"q": [1, [2.5, True]]}]},
    ],
)
def test_streamed_json_is_what_json_dumps_prints(value):
    for ascii_only in (True, False):
        want = json.dumps(value, indent=2, ensure_ascii=ascii_only)
        assert "".join(json_pieces(_lazy(value), ensure_ascii=ascii_only)) == want
        assert "".join(json_pieces(value, ensure_ascii=ascii_only)) == want


def test_spilled_table_is_what_tabulate_prints(monkeypatch):
    """Random cells (wide characters, newlines and carriage returns, escapes, empties) in random
    chunk sizes: the table printed chunk by chunk is the table tabulate prints whole."""
    rng = random.Random(23)
    pieces = [
        "a",
        "bb",
        "\u00e9",
        "\u6f22\u5b57",
        "x\ny",
        "",
        "  sp ",
        "\x1b[31mred\x1b[0m",
        "-",
        "-- -",
        "c\rd",
        "\n",
        "\t",
    ]
    for _ in range(1500):
        cols = rng.randint(1, 5)
        headers = [rng.choice(["Topic", "P", "Value", "CONSUMER-ID"]) + str(i) for i in range(cols)]
        rows = [[rng.choice(pieces) + rng.choice(pieces) for _ in range(cols)] for _ in range(rng.randint(1, 30))]
        monkeypatch.setattr(SpilledTable, "CHUNK", rng.randint(1, 7))
        table = SpilledTable(headers)
        for i in range(0, len(rows), SpilledTable.CHUNK):
            table.add(rows[i : i + SpilledTable.CHUNK])
        assert "".join(table.render()) == render_table(rows, headers) + "\n", (headers, rows)
