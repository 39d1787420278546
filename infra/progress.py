"""One status line on stderr, redrawn while long work runs: in place on a terminal (twice a second), otherwise a
plain line every `every_s` seconds (logs stay readable). The final state is always printed once at the end."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO


class ProgressLine:
    def __init__(self, render: Callable[[float], str], stream: TextIO | None = None, every_s: float = 10.0):
        """render(elapsed_seconds) -> the line's text."""
        self.render, self.stream = render, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.period = 0.5 if self.tty else every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="progress")
        self._t0 = 0.0

    def _draw(self, final: bool = False) -> None:
        text = self.render(time.monotonic() - self._t0)
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._draw()

    def __enter__(self) -> "ProgressLine":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._draw(final=True)
