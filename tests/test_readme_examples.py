"""README's shell tour runs as written: in order, in an empty directory, with the output it shows.

A newcomer follows README literally (issue 23 found its examples failing after `topics delete
orders`), so the tour is executed here. The convention, for whoever edits README.md:

* a fenced block marked ```sh is run: all of them, top to bottom, each as one `bash -e -o pipefail`
  script in the same fresh directory (no TXLOG_DATA_DIR, so the default ./txlog-data), with this
  clone's `txlog` first on PATH. Every command must exit 0;
* a ```text block that follows an ```sh block (nothing but blank lines between) is that block's
  expected stdout, compared line by line with runs of blank space read as one space and blank lines
  left out: a line that is just `...` stands for any number of lines, and `...` inside a line for
  any text (timestamps, ids);
* every other block is not run: ```bash for set-up and long or optional commands (pip install,
  the test suite, Spark), ```python, and ```text that shows something else.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
FENCE = re.compile(r"^```(\w*)\s*$")
ELLIPSIS = "..."
BLOCK_TIMEOUT_S = 300  # a bound against a hang, not a speed check


@dataclass
class Example:
    """One ```sh block of README and the stdout shown after it (None: not shown)."""

    line: int
    script: str
    expected: list[str] | None


def _blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(language, index of the opening fence, index of the closing fence) of every fenced block."""
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        blocks.append((opening.group(1), i, end))
        i = end + 1
    return blocks


def examples(text: str) -> list[Example]:
    """The runnable examples of a README's text, each with the output it shows."""
    lines = text.splitlines()
    found: list[Example] = []
    previous: tuple[str, int, int] | None = None
    for language, start, end in _blocks(lines):
        body = lines[start + 1 : end]
        if language == "sh":
            found.append(Example(start + 1, "\n".join(body) + "\n", None))
        elif language == "text" and previous is not None and previous[0] == "sh" and _adjacent(lines, previous, start):
            found[-1].expected = body
        previous = (language, start, end)
    return found


def _adjacent(lines: list[str], previous: tuple[str, int, int], start: int) -> bool:
    """Whether only blank lines lie between the `previous` block's closing fence and line `start`."""
    return not any(line.strip() for line in lines[previous[2] + 1 : start])


def _shown(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip()]


def _normal(line: str) -> str:
    return " ".join(line.split())


def _line_matches(pattern: str, actual: str) -> bool:
    parts = [re.escape(part) for part in _normal(pattern).split(ELLIPSIS)]
    return re.fullmatch(".*".join(parts), _normal(actual)) is not None


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` lines are what `expected` shows (README's `...` conventions above)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if _normal(head) == ELLIPSIS:
        return any(output_matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and _line_matches(head, actual[0]) and output_matches(rest, actual[1:])


def _txlog_on_path(bin_dir: str) -> None:
    """A `txlog` command that runs this clone's CLI, as the installed entry point would."""
    os.makedirs(bin_dir)
    path = os.path.join(bin_dir, "txlog")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m cli.main "$@"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def _env(bin_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TXLOG_DATA_DIR"}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_COLOR"] = "1"
    return env


def test_readme_tour_runs_in_order_in_an_empty_directory(tmp_path):
    with open(README, encoding="utf-8") as f:
        tour = examples(f.read())
    assert len(tour) >= 7 and sum(e.expected is not None for e in tour) >= 6  # the tour is still there
    bin_dir, work = str(tmp_path / "bin"), tmp_path / "work"
    _txlog_on_path(bin_dir)
    work.mkdir()
    for example in tour:
        proc = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", example.script],
            cwd=work,
            env=_env(bin_dir),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
        where = f"README.md line {example.line}:\n{example.script}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        assert proc.returncode == 0, where
        if example.expected is not None:
            assert output_matches(_shown(example.expected), _shown(proc.stdout.splitlines())), where


# ---- the conventions themselves ------------------------------------------------------------------

SAMPLE = """\
Intro.

```sh
echo one
```

```text
one
```

```bash
pip install nothing
```

```sh
echo two
```

Prose between.

```text
not the output of the block above
```
"""


def test_only_sh_blocks_run_and_text_right_after_one_is_its_output():
    found = examples(SAMPLE)
    assert [(e.script, e.expected) for e in found] == [("echo one\n", ["one"]), ("echo two\n", None)]


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        (["a", "b"], ["a", "b"], True),
        (["a", "b"], ["a", "c"], False),
        (["a"], ["a", "b"], False),  # an extra line is a difference
        (["a  b"], ["a\tb"], True),  # blank space is one space
        (["a", "...", "z"], ["a", "m", "n", "z"], True),
        (["a", "...", "z"], ["a"], False),
        (["...", "3"], ["1", "2", "3"], True),
        (["x ... z"], ["x 1795703429509 z"], True),
        (["x ... z"], ["y 1 z"], False),
    ],
)
def test_output_matching(expected, actual, matches):
    assert output_matches(expected, actual) is matches
