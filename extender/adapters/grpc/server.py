"""The gRPC server: the Extender service, grpc.health.v1 and reflection, plaintext, TLS or mTLS.

Health follows readiness: the overall service ("") and ``extender.api.v1.Extender`` say
NOT_SERVING until the watch cache has synced, then SERVING, and NOT_SERVING again while
stopping. With TLS, certificate and key (and the client CA for mTLS) are re-read when a file
changes, at the next handshake, so cert-manager rotations need no restart.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from extender.adapters.grpc.errors import ErrorInterceptor
from extender.adapters.grpc.servicer import ExtenderServicer, Handler
from extender.adapters.kubeobjects import Translator
from extender.adapters.tls import CertificateReloader
from extender.api.v1 import extender_pb2 as pb
from extender.api.v1 import extender_pb2_grpc as pb_grpc
from extender.settings import listen_address

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Extender"].full_name
READY_POLL_SECONDS = 1.0
MAX_MESSAGE_BYTES = 8 << 20
"""Largest request message accepted, as the HTTP server's ``max_body_bytes``; a larger one is
refused by gRPC itself with RESOURCE_EXHAUSTED before any railyard code runs."""


@dataclass(frozen=True)
class TlsFiles:
    cert_file: str
    key_file: str
    client_ca_file: str = ""
    """Set: clients must present a certificate signed by this CA (mTLS)."""


class Certificates:
    """The current certificate files as gRPC's configuration; re-read at a handshake when a
    file changed (``adapters/tls.py``)."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.reloader = CertificateReloader((files.cert_file, files.key_file, files.client_ca_file), self._load)
        self.config = self._read()

    def _read(self) -> grpc.ServerCertificateConfiguration:
        f = self.files
        ca = Path(f.client_ca_file).read_bytes() if f.client_ca_file else None
        pair = (Path(f.key_file).read_bytes(), Path(f.cert_file).read_bytes())
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=ca)

    def _load(self) -> None:
        self.config = self._read()

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """The new configuration when a file changed, else None (keep serving the current one)."""
        return self.config if self.reloader.check() else None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.config, self.fetch, require_client_authentication=bool(self.files.client_ca_file))


class GrpcServer:
    def __init__(self, handler: Handler, translator: Translator, *, listen: str = "127.0.0.1:8889",
                 tls: TlsFiles | None = None, max_workers: int = 64, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 ready: Callable[[], bool] = lambda: True) -> None:
        self.handler = handler
        self.listen = listen
        self.tls = tls
        self.ready = ready
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            interceptors=[ErrorInterceptor()],
            # Past max_workers calls at once, gRPC answers RESOURCE_EXHAUSTED instead of queueing.
            maximum_concurrent_rpcs=max_workers,
            options=[("grpc.max_receive_message_length", max_message_bytes)],
        )
        pb_grpc.add_ExtenderServicer_to_server(ExtenderServicer(handler, translator), self._server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self._server)
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self.port: int | None = None

    def start(self) -> tuple[str, int]:
        """Bind and serve; returns (host, port) actually bound (port 0 picks a free one)."""
        try:
            if self.tls is not None:
                self.port = self._server.add_secure_port(self.listen, Certificates(self.tls).credentials())
            else:
                self.port = self._server.add_insecure_port(self.listen)
        except (RuntimeError, OSError) as exc:
            raise OSError(f"cannot serve gRPC on {self.listen}: {exc}") from exc
        if not self.port:
            raise OSError(f"cannot serve gRPC on {self.listen}: address in use or not resolvable")
        self._set_health()
        self._server.start()
        self._poller = threading.Thread(target=self._poll_ready, name="grpc-health", daemon=True)
        self._poller.start()
        return listen_address(self.listen)[0], self.port

    def stop(self, grace: float = 5.0) -> None:
        self._stop.set()
        self.health.enter_graceful_shutdown()
        self._server.stop(grace).wait(grace + 1)

    def _set_health(self) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if self.ready()
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def _poll_ready(self) -> None:
        while not self._stop.wait(READY_POLL_SECONDS):
            self._set_health()
