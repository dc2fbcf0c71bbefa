"""The scoreboard's txlog target: `txlog serve` on a fresh store, started for a run and stopped after it.

The server is the same child process the server's tests use (tests/server/serve_process.py's
ServeProcess: this checkout's code, a free loopback port, its stderr in a file beside the store).
It gets compat.harness.TXLOG_SERVE_CONFIGS, as far as this checkout's server knows those configs;
the notes say which it lacks and whether the server itself misbehaved (died during the run, did
not stop cleanly), since either changes what the suites' failures mean.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from compat.harness import TXLOG_SERVE_CONFIGS, CompatError
from tests.server.serve_process import ServeProcess

STOP_TIMEOUT_S = 60.0


@dataclass
class ServeTarget:
    """A running server: its bootstrap, its stderr log's path, and what a reader of findings must know."""

    server: ServeProcess
    unknown_configs: list[str]
    stop_problems: list[str] = field(default_factory=list)
    stopped: bool = False  # by txlog_serve at the end of the run: an exit after that is ours

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap

    @property
    def log_path(self) -> str:
        return self.server.stderr_path

    def notes(self) -> list[str]:
        """What changes the meaning of the results so far: configs not passed, the server gone."""
        notes = []
        if self.unknown_configs:
            notes.append(
                "txlog serve lacks the broker configs "
                + ", ".join(f"`{key}={TXLOG_SERVE_CONFIGS[key]}`" for key in self.unknown_configs)
                + " that the suites assume of their broker (compat.harness.TXLOG_SERVE_CONFIGS): not passed"
            )
        proc = self.server.proc
        if proc is not None and not self.stopped and proc.poll() is not None:
            log = _tail(self.server.log())
            notes.append(f"txlog serve exited {proc.returncode} during the run; its log ends:\n{log}")
        return notes


def serve_configs() -> tuple[dict[str, str], list[str]]:
    """(the TXLOG_SERVE_CONFIGS this server takes, the keys it does not know)."""
    from txlog.server.broker import DEFAULT_CONFIGS

    known = {key: value for key, value in TXLOG_SERVE_CONFIGS.items() if key in DEFAULT_CONFIGS}
    return known, sorted(set(TXLOG_SERVE_CONFIGS) - set(known))


@contextmanager
def txlog_serve(work_dir: str) -> Iterator[ServeTarget]:
    """Start `txlog serve` on `work_dir`/txlog-store, yield it, stop it with SIGTERM (kill -9 if it hangs).

    A server that dies during the run shows in `notes()`; one that exits non-zero on SIGTERM or
    hangs in `stop_problems` afterwards. Neither raises: the suites' results stand.
    """
    configs, unknown = serve_configs()
    args = [arg for key, value in configs.items() for arg in ("--config", f"{key}={value}")]
    server = ServeProcess(os.path.join(work_dir, "txlog-store"), args=args)
    try:
        server.start()
    except RuntimeError as exc:
        raise CompatError(str(exc)) from None
    target = ServeTarget(server, unknown)
    try:
        yield target
    finally:
        target.stop_problems = _stop(server)
        target.stopped = True


def _stop(server: ServeProcess) -> list[str]:
    assert server.proc is not None
    if server.proc.poll() is not None:
        return [f"txlog serve exited {server.proc.returncode} during the run; its log ends:\n{_tail(server.log())}"]
    try:
        code = server.stop(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        return [f"txlog serve did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM and was killed"]
    if code != 0:
        return [f"txlog serve exited {code} on SIGTERM (a clean stop exits 0); its log ends:\n{_tail(server.log())}"]
    return []


def _tail(log: str, lines: int = 20) -> str:
    """The log's last lines but for the per-connection ones (one per client connection: noise here)."""
    kept = [line for line in log.splitlines() if not line.startswith("connection from ")]
    return "\n".join(kept[-lines:]) or "(only connection lines)"
