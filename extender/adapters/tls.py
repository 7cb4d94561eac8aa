"""TLS certificate files re-read when they change (cert-manager rotates Secrets in place), for
the HTTPS server's SSLContext (``app.py``, polled on a thread) and the gRPC server's
certificate configuration (``grpc/server.py``, asked at each handshake).
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import Callable, Sequence

from extender.adapters.periodic import Every

log = logging.getLogger("railyard")


class CertificateReloader(Every):
    """Calls ``load`` again when any of the files changed since the last load; new handshakes
    then get the new pair. A failed read (a half-written rotation) keeps the previous pair and
    is tried again next time."""

    def __init__(self, paths: Sequence[str], load: Callable[[], object], interval: float = 10.0) -> None:
        self.paths = [p for p in paths if p]
        self.load = load
        self._stamp = self._mtimes()
        super().__init__(interval, self.check, "tls-reload")

    def _mtimes(self) -> tuple[int, ...]:
        return tuple(os.stat(p).st_mtime_ns for p in self.paths)

    def check(self) -> bool:
        """Reload if the files changed; True when a new pair was loaded."""
        try:
            stamp = self._mtimes()
            if stamp == self._stamp:
                return False
            self.load()
        except (OSError, ssl.SSLError) as exc:
            log.warning("TLS certificate %s not reloaded: %s", self.paths[0], exc)
            return False
        self._stamp = stamp
        log.info("TLS certificate %s reloaded", self.paths[0])
        return True
