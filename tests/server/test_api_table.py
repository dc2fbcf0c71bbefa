"""docs/serve.md §2 lists exactly the APIs the server registers, at the versions it serves.

The table is generated from the registry (`txlog.server.apis`), so after a handler module
registers an API or changes a version range, regenerate it and paste it into §2:

    PYTHONPATH=. python3 -m tests.server.test_api_table
"""

from __future__ import annotations

import os
import re

from txlog.server import wire
from txlog.server.apis import load_handlers

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "serve.md")
HEADER = ("| API | Key | Versions |", "|---|---:|---|")


def markdown_table() -> str:
    """The §2 table: one row per registered API, by key, with its version range."""
    rows = [
        f"| {wire.api_name(a.key)} | {a.key} | {a.min_version}–{a.max_version} |"
        for a in sorted(load_handlers().values(), key=lambda a: a.key)
    ]
    return "\n".join([*HEADER, *rows])


def documented_table() -> str:
    """The table as docs/serve.md §2 has it: the lines from its header to the first non-table line."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## 2\..*?(?=^## 3\.)", text, re.S | re.M)
    assert section is not None, "docs/serve.md has no §2"
    lines = section.group(0).splitlines()
    start = lines.index(HEADER[0])
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return "\n".join(table)


def test_the_documented_api_table_is_the_registry():
    assert documented_table() == markdown_table(), "regenerate with: python3 -m tests.server.test_api_table"


if __name__ == "__main__":
    print(markdown_table())
