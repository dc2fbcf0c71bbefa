"""Every path the repository cites (in docs, README, docstrings and comments) resolves in a clone.

A comment saying `see txlog/clients/producer.py` or a doc row naming `tests/crash/test_crash.py`
is only useful while that file exists; a move that forgets one of them fails here. Paths are
recognised by the repository's own top-level folders; a citation that names another project's
file (an example from elsewhere) is listed in FOREIGN with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CITED = re.compile(
    r"(?<![\w/.-])((?:storage|txlog|cli|tests|samples|docs|compat)/[\w/.-]*"
    r"\.(?:py|md|rs|java|pyi|json))\b"
)
TEXT_SUFFIXES = (".py", ".pyi", ".md", ".rs", ".java", ".toml", ".properties")
FOREIGN = {
    "tests/benchmarks/bench_x.py",  # a placeholder name in "run python tests/benchmarks/bench_x.py"
}


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f.endswith(TEXT_SUFFIXES) or f == ".ci/run"]


def citations() -> dict[str, set[str]]:
    """Cited path -> the files citing it."""
    found: dict[str, set[str]] = {}
    for name in _tracked_files():
        path = os.path.join(ROOT, name)
        if not os.path.exists(path):  # deleted in the work tree, not yet in the index
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for match in CITED.finditer(f.read()):
                found.setdefault(match.group(1), set()).add(name)
    return found


def test_every_cited_path_exists():
    missing = {
        cited: sorted(by)
        for cited, by in citations().items()
        if cited not in FOREIGN and not os.path.exists(os.path.join(ROOT, cited))
    }
    assert missing == {}


def test_the_citation_finder_sees_a_path_in_prose():
    assert CITED.findall("see txlog/clients/producer.py and docs/DESIGN.md §10, not foo/txlog/x.py") == [
        "txlog/clients/producer.py",
        "docs/DESIGN.md",
    ]
