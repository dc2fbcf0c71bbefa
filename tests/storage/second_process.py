"""A second writer of a partition in a real process of its own, for tests of what one process's view
must notice of another's writes (the cross-process looks of docs/DESIGN.md §3)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def in_other_process(root: str, topic: str, code: str) -> None:
    """Run `code` in a fresh process with `log` = partition 0 of `topic` in the store at `root`, open
    for writing (`ControlType` and `AbortedTxn` imported for it).

    `code` may end the process with os._exit (no close, as after kill -9: its flock dies with it).
    """
    program = (
        "import os\nfrom storage import Store\nfrom storage.records import ControlType\n"
        "from storage.transaction_index import AbortedTxn\n"
        f"store = Store.open({root!r})\nlog = store.partition({topic!r}, 0)\n"
        + textwrap.dedent(code)
        + "\nstore.close()\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, "-c", program], check=True, env=env)
