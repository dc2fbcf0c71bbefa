"""Ctrl-C and SIGTERM as a flag: long-running verbs stop between records, never mid-write.

`produce`, `consume` and `process` must finish the record or transaction step they are in
(abort an open transaction, commit what was printed) before exiting 130. A handler that
raised wherever the signal landed could interrupt a flush half-way, so the handlers here
only note the signal; each verb checks the flag at its safe points and may override
`_handle` to act at once where that is safe (e.g. while blocked reading input).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Self

#: What signal.signal installs and returns: a function, SIG_DFL / SIG_IGN, or None (not set from Python).
Handler = Callable[[int, FrameType | None], object] | int | None

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """Installs SIGINT/SIGTERM handlers for the duration of a `with` block."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Handler] = {}

    @property
    def received(self) -> bool:
        return self.signum is not None

    def __bool__(self) -> bool:
        return self.received

    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "?"

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def __enter__(self) -> Self:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
