"""What any client can send: bytes that are no message, huge messages, huge values echoed back.

Over loopback, with the real server, as ``test_servicer.py``; raw bytes go out through
``grpc.Channel`` methods without serializers, so no stub tidies them first.
"""

from __future__ import annotations

import logging
from typing import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from extender.adapters.grpc.errors import MAX_DETAILS_BYTES, bounded_details
from extender.api.v1 import extender_pb2 as pb
from tests.adapters.grpc.test_servicer import Served, code_of


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def every_method() -> list[tuple[str, bool, bool, str]]:
    """(path, client streaming, server streaming, request type) of every method served."""
    services = [pb.DESCRIPTOR.services_by_name["Extender"],
                health_pb2.DESCRIPTOR.services_by_name["Health"],
                reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]]
    return [(f"/{svc.full_name}/{m.name}", m.client_streaming, m.server_streaming, m.input_type.full_name)
            for svc in services for m in svc.methods]


METHODS = every_method()

GARBAGE = {
    "bad-wire-type": b"\xff\xff\xff",
    "truncated-length": b"\x0a\xff\x01",
    "truncated-varint": b"\x08\xff",
}


def raw_call(channel: grpc.Channel, path: str, client_streaming: bool, server_streaming: bool, data: bytes):
    """Send ``data`` as the request (no serializer), read the whole answer as bytes."""
    if client_streaming and server_streaming:
        return list(channel.stream_stream(path)(iter([data]), timeout=5))
    if client_streaming:
        return channel.stream_unary(path)(iter([data]), timeout=5)
    if server_streaming:
        return list(channel.unary_stream(path)(data, timeout=5))
    return channel.unary_unary(path)(data, timeout=5)


def test_every_method_is_listed():
    assert {m[0] for m in METHODS} >= {
        "/extender.api.v1.Extender/Filter", "/extender.api.v1.Extender/WatchGangs",
        "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"}


@pytest.mark.parametrize("path, client_streaming, server_streaming, request_type", METHODS,
                         ids=[m[0] for m in METHODS])
@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_undecodable_bytes_are_invalid_argument_without_a_traceback(served, caplog, path, client_streaming,
                                                                    server_streaming, request_type, garbage):
    caplog.set_level(logging.DEBUG)
    code, details = code_of(lambda: raw_call(served.channel, path, client_streaming, server_streaming, garbage))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(f"request to {path} is not a valid {request_type} message "
                              f"({len(garbage)} bytes): DecodeError: ")
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert "Traceback" not in caplog.text


def test_the_server_keeps_serving_after_garbage(served):
    for _ in range(20):
        with pytest.raises(grpc.RpcError):
            served.channel.unary_unary("/extender.api.v1.Extender/Filter")(b"\xff", timeout=5)
    code, details = code_of(lambda: served.stub.Filter(pb.FilterRequest(pod=b"{nope", node_names=["h1"])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("pod is not JSON")


def test_messages_up_to_8_mib_are_read_and_larger_are_resource_exhausted(served):
    # 5 MiB: over gRPC's 4 MiB default, under railyard's 8 MiB (the HTTP body limit too). The pod
    # is not JSON, so the answer is small and proves the message was read.
    names = ["n" * 1000] * 5000
    code, details = code_of(lambda: served.stub.Filter(pb.FilterRequest(pod=b"{nope", node_names=names)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("pod is not JSON")
    code, details = code_of(lambda: served.stub.Filter(pb.FilterRequest(pod=b"{nope", node_names=names * 2)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "Received message larger than max" in details and "8388608" in details


def test_a_megabyte_pod_name_is_cut_in_the_error(served):
    name = "x" * (1 << 20)
    code, details = code_of(lambda: served.stub.ExplainPod(pb.ExplainPodRequest(namespace="ml", name=name)))
    assert code == grpc.StatusCode.NOT_FOUND  # not RESOURCE_EXHAUSTED about trailing metadata
    assert details.startswith("pod ml/xxxx") and "(1048579 characters in all)" in details
    assert "is unknown to railyard" in details and len(details) < 1000
    # Errors raised beyond the servicer are cut at the interceptor.
    code, details = code_of(lambda: served.stub.Bind(pb.BindRequest(pod_namespace="ml", pod_name=name, node="h1")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert len(details.encode()) <= MAX_DETAILS_BYTES and details.endswith(" characters in all)")


@pytest.mark.parametrize("text", ["a" * 10**6, "é" * 10**6, "%" * 10**6, "\x00" * 10**6, "日本" * 10**5])
def test_details_fit_the_budget_as_sent(text):
    cut = bounded_details(text)
    on_wire = sum(1 if " " <= ch <= "~" and ch != "%" else 3 * len(ch.encode()) for ch in cut)
    assert on_wire <= MAX_DETAILS_BYTES
    assert cut.endswith(f"... ({len(text)} characters in all)")
    assert bounded_details("short é") == "short é"
