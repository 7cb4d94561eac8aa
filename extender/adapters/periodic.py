"""A call repeated on a daemon thread: the certificate reloader (``tls.py``) and the service's
ticker (``app.py``) share it."""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger("railyard")


class Every:
    """Calls ``action`` every ``interval`` seconds on a daemon thread until stopped; an exception
    is logged and the next call still comes."""

    def __init__(self, interval: float, action: Callable[[], object], name: str) -> None:
        self.interval, self.action = interval, action
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.action()
            except Exception:
                log.exception("%s failed", self._thread.name)
