"""`txlog serve` as a real child process for tests: started on a free port, stopped or killed like in production."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

STARTUP_TIMEOUT_S = 60.0


class ServeProcess:
    """One `txlog --data-dir DIR serve --listen 127.0.0.1:PORT` child; `bootstrap` is its address.

    The port is 0 at the first start (a free one) and kept across restarts, so clients that
    hold the old address reconnect to the restarted server as they would to a restarted broker.
    """

    def __init__(self, data_dir: str, *, args: Sequence[str] = (), port: int = 0, protocol: str = "PLAINTEXT"):
        self.data_dir = data_dir
        self.args = list(args)
        self.port = port
        self.protocol = protocol  # the first listener's security protocol (SASL_SSL needs its options in args)
        self.proc: subprocess.Popen | None = None
        self.stderr_path = os.path.join(
            os.path.dirname(os.path.abspath(data_dir)), f"serve-{os.getpid()}-{id(self)}.log"
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ServeProcess:
        cmd = [
            sys.executable,
            "-m",
            "cli.main",
            "--data-dir",
            self.data_dir,
            "serve",
            "--listen",
            f"{self.protocol}://{self.bootstrap}",
            *self.args,
        ]
        stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, env=_env())
        stderr.close()
        line = self._first_line()
        if not line.startswith("listening on "):
            self.kill()
            raise RuntimeError(f"txlog serve did not start: {line!r}\n{self.log()}")
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def _first_line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        os.set_blocking(self.proc.stdout.fileno(), False)
        buf = b""
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.read()
            if chunk:
                buf += chunk
                if b"\n" in buf:
                    return buf.split(b"\n", 1)[0].decode()
            elif self.proc.poll() is not None:
                return f"exited {self.proc.returncode}: {buf.decode(errors='replace')}"
            time.sleep(0.02)
        return "timed out"

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown. Returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """kill -9: the crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def restart(self) -> ServeProcess:
        self.kill()
        return self.start()

    def log(self) -> str:
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


def _env() -> dict[str, str]:
    """The child imports this checkout (tests may run from a clone whose editable install points elsewhere)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
