"""A count of a long step on one stderr line, rewritten in place, at a terminal only: a
build's packages, a cluster's nodes. Elsewhere (a log file, CI) it writes nothing: the
step's own start and end lines, and the build's 30-second heartbeat, say enough there."""

from __future__ import annotations

import time
from typing import Callable, TextIO

INTERVAL = 0.1
"""Seconds between two rewrites of the line."""


class Progress:
    def __init__(self, out: TextIO, what: str, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.out, self.what, self.total, self.clock = out, what, total, clock
        self.live = out.isatty()
        self.done = 0
        self._shown_at: float | None = None
        self._started = clock()

    def step(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if self.live and (self._shown_at is None or now - self._shown_at >= INTERVAL or self.done >= self.total):
            self._shown_at = now
            seconds = int(now - self._started)
            self.out.write(f"\r\033[Krailyard:   {self.what}: {self.done}/{self.total}, {seconds // 60}m{seconds % 60:02d}s")
            self.out.flush()

    def close(self) -> None:
        """End the line (once anything was shown)."""
        if self._shown_at is not None:
            self.out.write("\n")
            self.out.flush()
            self._shown_at = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
