"""``railyard serve``'s composition serves gRPC beside HTTP: health turns SERVING once the watch
cache has synced, and the verbs answer from the same service the HTTP face uses."""

from __future__ import annotations

import os
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import grpc
import orjson
from grpc_health.v1 import health_pb2, health_pb2_grpc

from extender import app
from extender.api.v1 import extender_pb2 as pb
from extender.localcluster import pki
from extender.api.v1 import extender_pb2_grpc as pb_grpc
from extender.settings import Settings, from_mapping
from tests.adapters.k8s.fake_apiserver import HANG, FakeApiServer
from tests.test_app import node


def test_serve_wires_grpc_with_health_and_verbs():
    with FakeApiServer() as fake:
        fake.list("/api/v1/nodes", ([node("gpu-1"), node("gpu-2")], "5"))
        fake.list("/api/v1/pods", ([], "5"))
        for path in ("/api/v1/nodes", "/api/v1/pods"):
            fake.watch(path, [HANG])
        settings, problems = from_mapping({"server": {"listen": "127.0.0.1:0"},
                                           "grpc": {"listen": "127.0.0.1:0"}}, Settings())
        assert not problems
        application = app.build(settings, client=fake.client())
        application.start()
        try:
            assert application.grpc is not None
            with grpc.insecure_channel(f"127.0.0.1:{application.grpc.port}") as channel:
                check = health_pb2_grpc.HealthStub(channel).Check
                deadline = time.monotonic() + 10
                while check(health_pb2.HealthCheckRequest()).status != health_pb2.HealthCheckResponse.SERVING:
                    assert time.monotonic() < deadline, "gRPC health never turned SERVING"
                    time.sleep(0.1)
                pod = {"metadata": {"name": "solo", "namespace": "ml", "uid": "u1"},
                       "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                       "status": {"phase": "Pending"}}
                reply = pb_grpc.ExtenderStub(channel).Filter(
                    pb.FilterRequest(pod=orjson.dumps(pod), node_names=["gpu-1", "gpu-2"]))
                assert sorted(reply.node_names) == ["gpu-1", "gpu-2"]
        finally:
            application.stop()


def test_an_empty_grpc_listen_turns_grpc_off():
    settings, _ = from_mapping({"grpc": {"listen": ""}}, Settings())
    assert settings.validate() == []
    with FakeApiServer() as fake:
        assert app.build(settings, client=fake.client()).grpc is None


def test_metrics_listen_serves_metrics_on_a_second_port():
    with FakeApiServer() as fake:
        fake.list("/api/v1/nodes", ([node("gpu-1")], "5"))
        fake.list("/api/v1/pods", ([], "5"))
        for path in ("/api/v1/nodes", "/api/v1/pods"):
            fake.watch(path, [HANG])
        settings, problems = from_mapping({"server": {"listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0"},
                                           "grpc": {"listen": ""}}, Settings())
        assert not problems
        application = app.build(settings, client=fake.client())
        application.start()
        try:
            port = application.metrics_server.server_address[1]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                assert b"railyard_reserved_gpus" in reply.read()
        finally:
            application.stop()


def _serving_cert(port: int, ca: Path) -> bool:
    """Whether the HTTPS endpoint's certificate verifies against ``ca``."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="localhost"):
                return True
    except ssl.SSLError:
        return False


def test_https_certificate_is_reloaded_when_its_files_change(tmp_path):
    first, second = pki.generate(tmp_path / "a"), pki.generate(tmp_path / "b")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(first.apiserver_cert.read_bytes())
    key.write_bytes(first.apiserver_key.read_bytes())
    with FakeApiServer() as fake:
        settings, problems = from_mapping({
            "server": {"listen": "127.0.0.1:0", "tls_cert_file": str(cert), "tls_key_file": str(key)},
            "grpc": {"listen": ""}}, Settings())
        assert not problems
        application = app.build(settings, client=fake.client())
        host, port = application.server.start()
        try:
            assert _serving_cert(port, first.ca_cert) and not _serving_cert(port, second.ca_cert)
            assert application.tls_reloader.check() is False  # nothing changed
            cert.write_bytes(second.apiserver_cert.read_bytes())
            key.write_bytes(second.apiserver_key.read_bytes())
            os.utime(cert, ns=(time.time_ns(), time.time_ns() + 1_000_000))
            assert application.tls_reloader.check() is True
            assert _serving_cert(port, second.ca_cert) and not _serving_cert(port, first.ca_cert)
        finally:
            application.server.stop()
