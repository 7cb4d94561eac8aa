"""Hypothesis against every gRPC method of the real server (Extender, health, reflection).

Requests are either messages built from the same hostile pods and names as the HTTP fuzzer, or
bytes that may not be the method's message at all, sent without a serializer. Every answer is
a status a client can act on (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ...), never
INTERNAL or UNKNOWN, with details inside gRPC's metadata budget; nothing in the log at ERROR or
with a traceback; a real gang still binds whole afterwards.
"""

from __future__ import annotations

import json
import os

import grpc
import pytest
from grpc_health.v1 import health_pb2
from hypothesis import HealthCheck, given, settings, strategies as st

from extender.adapters.grpc.errors import MAX_DETAILS_BYTES
from extender.api.v1 import extender_pb2 as pb
from tests.fuzz import strategies as fz
from tests.fuzz.live import Live, LogWatch
from tests.adapters.grpc.test_hostile_requests import METHODS

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])
CLEAR = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
         grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE,
         grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED}
"""What a caller may be told. DEADLINE_EXCEEDED is the caller's own timeout (a held Bind, a
WatchGangs or health Watch stream), also allowed."""
WAIT = 0.5
"""Seconds a call may take before the caller gives up; held binds do."""
STREAM_WAIT = 0.1
"""... and a WatchGangs or health Watch stream (they never end by themselves)."""


@pytest.fixture(scope="module")
def live():
    live = Live(grpc_server=True)
    with LogWatch() as watch:
        live.watch = watch
        live.codes = {}
        yield live
    live.close()


def pod_bytes(real: list[str]) -> st.SearchStrategy[bytes]:
    return st.one_of(fz.pod(real).map(lambda p: json.dumps(p).encode()), fz.plausible_pod().map(
        lambda p: json.dumps(p).encode()), st.binary(max_size=40), st.sampled_from([b"", b"null", b"[]", b"{}"]))


def names(real: list[str]) -> st.SearchStrategy[list[str]]:
    return st.one_of(st.just(real), st.lists(fz.names(real), max_size=6))


def message(method: str, real: list[str]) -> st.SearchStrategy[object]:
    """A request message for an Extender method, its fields drawn from the hostile strategies."""
    text = st.one_of(st.sampled_from(["fuzz", "real", "", "g1-0", "x" * 100_000]), st.text(max_size=12))
    victims = st.dictionaries(fz.names(real), st.builds(
        pb.Victims, pod_uids=st.lists(st.text(max_size=8), max_size=3),
        num_pdb_violations=st.integers(-(2**63), 2**63 - 1)), max_size=3)
    return {
        "Filter": st.builds(pb.FilterRequest, pod=pod_bytes(real), node_names=names(real)),
        "Prioritize": st.builds(pb.PrioritizeRequest, pod=pod_bytes(real), node_names=names(real)),
        "Bind": st.builds(pb.BindRequest, pod_name=text, pod_namespace=text, pod_uid=text, node=fz.names(real)),
        "Preempt": st.builds(pb.PreemptRequest, pod=pod_bytes(real), node_name_to_victims=victims),
        "PlanGang": st.builds(pb.PlanGangRequest, pods=st.lists(pod_bytes(real), max_size=4)),
        "ExplainPod": st.builds(pb.ExplainPodRequest, namespace=text, name=text),
        "WatchGangs": st.builds(pb.WatchGangsRequest, namespace=text),
    }[method]


def call(channel: grpc.Channel, path: str, client_streaming: bool, server_streaming: bool, data: bytes):
    if client_streaming and server_streaming:
        return list(channel.stream_stream(path)(iter([data]), timeout=WAIT))
    if server_streaming:
        return list(channel.unary_stream(path)(data, timeout=STREAM_WAIT))
    return channel.unary_unary(path)(data, timeout=WAIT)


def code_of(live: Live, path: str, client_streaming: bool, server_streaming: bool, data: bytes) -> grpc.StatusCode:
    try:
        call(live.channel, path, client_streaming, server_streaming, data)
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    assert code in CLEAR or code == grpc.StatusCode.DEADLINE_EXCEEDED, (path, code, details[:300])
    assert len(details.encode()) <= 3 * MAX_DETAILS_BYTES, (path, len(details))
    live.codes[(path, code.name)] = live.codes.get((path, code.name), 0) + 1
    return code


@pytest.mark.parametrize("path, client_streaming, server_streaming, request_type", METHODS,
                         ids=[m[0] for m in METHODS])
@FUZZ
@given(data=st.data())
def test_every_method_answers_bad_input_with_a_clear_code(live, path, client_streaming, server_streaming,
                                                          request_type, data):
    service, method = path.strip("/").split("/")
    if service == "extender.api.v1.Extender" and data.draw(st.integers(0, 3)):
        raw = data.draw(message(method, live.node_names)).SerializeToString()
    elif service == "grpc.health.v1.Health" and data.draw(st.booleans()):
        raw = health_pb2.HealthCheckRequest(service=data.draw(st.text(max_size=30))).SerializeToString()
    else:
        raw = data.draw(st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\x0a\xff\xff\xff\x0f", b"\xff"])))
    code_of(live, path, client_streaming, server_streaming, raw)


def test_z_after_the_fuzz(live):
    for (path, code), n in sorted(live.codes.items()):
        print(f"{n:5d} {path} {code}")
    assert live.watch.problems() == []
    extender_ok = {p for p, c in live.codes if c == "OK" and p.startswith("/extender.api.v1.Extender/")}
    assert {"/extender.api.v1.Extender/" + m for m in ("Filter", "Prioritize", "Preempt", "PlanGang")} <= extender_ok
    live.forget_the_fuzz()
    live.assert_a_real_gang_binds_whole()
    assert live.watch.problems() == []
