"""The gRPC API over loopback: a real grpc server on 127.0.0.1, the real TopologyExtender, an
in-memory Binder (the only double), and the generated client stub."""

from __future__ import annotations

import threading
import time
from typing import Iterator

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from extender.adapters.grpc.server import GrpcServer, TlsFiles
from extender.api.v1 import extender_pb2 as pb
from extender.api.v1 import extender_pb2_grpc as pb_grpc
from extender.localcluster import pki as pki_mod
from tests.service.test_live import NODES, create, extender, wait_until
from tests.topologies import TRANSLATE, gang, pod


class Served:
    def __init__(self, fail: frozenset[str] = frozenset(), **server_args) -> None:
        self.ext, self.binder, self.clock = extender(fail=fail)
        self.server = GrpcServer(self.ext, TRANSLATE, listen="127.0.0.1:0", **server_args)
        host, port = self.server.start()
        self.target = f"{host}:{port}"
        self.channel = grpc.insecure_channel(self.target)
        self.stub = pb_grpc.ExtenderStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.server.stop(grace=0)


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def js(p: dict) -> bytes:
    return orjson.dumps(p)


def steer(s: Served, pods: list[dict]) -> dict[str, str]:
    create(s.ext, pods)
    out = {}
    for p in pods:
        reply = s.stub.Filter(pb.FilterRequest(pod=js(p), node_names=NODES))
        assert len(reply.node_names) == 1, reply
        out[p["metadata"]["name"]] = reply.node_names[0]
    return out


def bind_request(p: dict, node: str) -> pb.BindRequest:
    return pb.BindRequest(pod_name=p["metadata"]["name"], pod_namespace="ml",
                          pod_uid=p["metadata"]["uid"], node=node)


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_filter_steers_a_gang_member_with_reasons_for_the_other_nodes(served):
    pods = gang("g", 2, 8)
    create(served.ext, pods)
    reply = served.stub.Filter(pb.FilterRequest(pod=js(pods[0]), node_names=NODES))
    assert list(reply.node_names) == ["h1"]
    assert reply.failed_nodes["h5"] == ("gang ml/g reserved node h1 for ml/g-0 (planned within "
                                        "network.topology.nvidia.com/accelerator b1/r1/n1)")
    assert dict(reply.failed_and_unresolvable_nodes) == {}


def test_prioritize_scores_the_planned_node_highest(served):
    pods = gang("g", 2, 8)
    steer(served, pods)
    reply = served.stub.Prioritize(pb.PrioritizeRequest(pod=js(pods[1]), node_names=NODES))
    assert {p.host: p.score for p in reply.priorities} == {"h2": 10}  # hosts not listed score 0


def test_bind_holds_the_gang_then_binds_every_member(served):
    pods = gang("g", 2, 8)
    plan = steer(served, pods)
    first = served.stub.Bind.future(bind_request(pods[0], plan["g-0"]))
    wait_until(lambda: served.ext.debug_gangs()[0].phase.startswith("waiting"))
    assert served.binder.bound == []
    served.stub.Bind(bind_request(pods[1], plan["g-1"]))
    first.result(timeout=5)
    assert sorted(served.binder.bound) == [("ml/g-0", "h1"), ("ml/g-1", "h2")]


def test_errors_map_to_status_codes(served):
    pods = gang("g", 2, 8, annotations={"railyard.io/timeout-seconds": "30"})
    plan = steer(served, pods)
    # A member sent to another node than planned: refused.
    code, details = code_of(lambda: served.stub.Bind(bind_request(pods[0], "h5")))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details == "pod ml/g-0 was sent to bind on h5 but gang ml/g planned h1"
    # Unreadable requests.
    code, details = code_of(lambda: served.stub.Filter(pb.FilterRequest(pod=b"{nope", node_names=NODES)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("pod is not JSON")
    code, details = code_of(lambda: served.stub.Bind(pb.BindRequest(pod_name="x", node="h1")))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "pod_namespace must not be empty")
    # The gang's deadline passes while one member is held: ABORTED, the caller retries.
    held = served.stub.Bind.future(bind_request(pods[0], plan["g-0"]))
    wait_until(lambda: served.ext.debug_gangs()[0].phase.startswith("waiting"))
    served.clock.now += 31
    with pytest.raises(grpc.RpcError) as info:
        held.result(timeout=5)
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert info.value.details().startswith("gang ml/g timed out at bind: 1/2 GPU members arrived within 30s")


def test_a_binding_the_api_server_refuses_is_unavailable():
    s = Served(fail=frozenset({"ml/solo"}))
    try:
        p = pod("solo", 8)
        create(s.ext, [p])
        node = s.stub.Filter(pb.FilterRequest(pod=js(p), node_names=NODES)).node_names[0]
        code, details = code_of(lambda: s.stub.Bind(bind_request(p, node)))
        assert code == grpc.StatusCode.UNAVAILABLE
        assert details.startswith("binding ml/solo to ") and "precondition failed" in details
    finally:
        s.close()


def test_preempt_keeps_nodes_whose_victims_break_no_gang(served):
    lone = pod("lone", 8, node="h5")
    lone["metadata"]["uid"] = "u-lone"
    served.ext.pod_upserted(lone)
    reply = served.stub.Preempt(pb.PreemptRequest(pod=js(pod("p", 8)), node_name_to_victims={
        "h5": pb.Victims(pod_uids=["u-lone"], num_pdb_violations=1)}))
    assert {n: (list(v.pod_uids), v.num_pdb_violations) for n, v in reply.node_name_to_victims.items()} == {
        "h5": (["u-lone"], 1)}


def test_plan_gang_answers_without_reserving(served):
    reply = served.stub.PlanGang(pb.PlanGangRequest(pods=[js(p) for p in gang("g", 2, 8)]))
    (plan,) = reply.gangs
    assert (plan.gang, plan.feasible, dict(plan.placement)) == ("ml/g", True, {"ml/g-0": "h1", "ml/g-1": "h2"})
    assert plan.level == "network.topology.nvidia.com/accelerator" and list(plan.domain) == ["b1", "r1", "n1"]
    assert served.ext.ctx.state.reservations() == {}
    assert plan.origin == ""  # no workload, no declared size
    (sized,) = served.stub.PlanGang(pb.PlanGangRequest(
        pods=[js(p) for p in gang("g", 2, 8, annotations={"railyard.io/min-member": "2"})])).gangs
    assert sized.origin == "size 2 from railyard.io/min-member"  # as ExplainPod and /debug/gangs say it
    code, _ = code_of(lambda: served.stub.PlanGang(pb.PlanGangRequest()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_plan_gang_gives_each_members_address_and_the_slices(served):
    pods = gang("s", 4, 4, annotations={"railyard.io/slice-size": "2", "railyard.io/slice-required-topology": "node"})
    (plan,) = served.stub.PlanGang(pb.PlanGangRequest(pods=[js(p) for p in pods])).gangs
    assert (plan.slices.size, plan.slices.level, plan.slices.count) == (2, "kubernetes.io/hostname", 2)
    assert [(r.rank, r.slice, r.pod, r.node) for r in plan.ranks] == [
        (0, 0, "ml/s-0", "h1"), (1, 0, "ml/s-1", "h1"), (2, 1, "ml/s-2", "h2"), (3, 1, "ml/s-3", "h2")]
    assert [(d.level, d.name, d.domain) for d in plan.ranks[2].domains] == [
        ("network.topology.nvidia.com/spine", "spine", "b1"), ("network.topology.nvidia.com/leaf", "leaf", "b1/r1"),
        ("network.topology.nvidia.com/accelerator", "nvlink", "b1/r1/n1")]
    (unsliced,) = served.stub.PlanGang(pb.PlanGangRequest(pods=[js(p) for p in gang("g", 2, 8)])).gangs
    assert not unsliced.HasField("slices") and not unsliced.ranks[0].HasField("slice")
    assert unsliced.ranks[0].HasField("rank") and unsliced.ranks[0].rank == 0


def test_explain_pod_for_a_waiting_gang_and_an_unknown_pod(served):
    pods = gang("g", 2, 8, annotations={"railyard.io/required-topology": "nvlink"})
    plan = steer(served, pods)
    held = served.stub.Bind.future(bind_request(pods[0], plan["g-0"]))
    wait_until(lambda: served.ext.debug_gangs()[0].phase.startswith("waiting"))
    got = served.stub.ExplainPod(pb.ExplainPodRequest(namespace="ml", name="g-1"))
    assert (got.gang, got.phase, got.at_bind, got.quorum, got.pods) == ("ml/g", "waiting", 1, 2, 2)
    assert dict(got.plan) == {"ml/g-0": "h1", "ml/g-1": "h2"}
    assert [(list(f.domain), f.available_gpus, f.fits) for f in got.fit] == [
        (["b1", "r1", "n1"], 16, 2), (["b1", "r1", "n2"], 10, 1), (["b1", "r2", "n3"], 8, 1)]
    assert [(r.rank, r.pod, r.node, r.domains[-1].domain) for r in got.ranks] == [
        (0, "ml/g-0", "h1", "b1/r1/n1"), (1, "ml/g-1", "h2", "b1/r1/n1")]
    assert not got.HasField("slices") and all(f.slices == 0 for f in got.fit)
    code, details = code_of(lambda: served.stub.ExplainPod(pb.ExplainPodRequest(namespace="ml", name="ghost")))
    assert code == grpc.StatusCode.NOT_FOUND and details.startswith("pod ml/ghost is unknown to railyard")
    served.stub.Bind(bind_request(pods[1], plan["g-1"]))
    held.result(timeout=5)


def test_watch_gangs_lists_then_streams_changes(served):
    steer(served, gang("a", 1, 8))
    stream = served.stub.WatchGangs(pb.WatchGangsRequest(namespace="ml"), timeout=10)
    first = next(stream)
    assert (first.gang, first.phase, first.previous) == ("ml/a", "planned", "")
    pods = gang("g", 2, 8, annotations={"railyard.io/min-member": "2"})
    create(served.ext, pods)
    served.stub.Filter(pb.FilterRequest(pod=js(pods[0]), node_names=NODES))
    got = [next(stream) for _ in range(2)]
    assert [e.origin for e in got] == ["size 2 from railyard.io/min-member"] * 2
    assert [(e.gang, e.previous, e.event, e.phase) for e in got] == [
        ("ml/g", "", "", "pending"), ("ml/g", "pending", "planned", "planned")]
    assert got[1].reason.startswith("gang ml/g: 2 pods, 16 GPUs on 2 nodes")
    stream.cancel()
    wait_until(lambda: not served.ext.ctx.watchers)  # the stream unsubscribed when its client left


def test_health_follows_readiness_and_reflection_lists_the_services():
    ready = threading.Event()
    s = Served(ready=ready.is_set)
    try:
        check = health_pb2_grpc.HealthStub(s.channel).Check
        assert check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.NOT_SERVING
        ready.set()
        wait_until(lambda: check(health_pb2.HealthCheckRequest(service="extender.api.v1.Extender")).status
                   == health_pb2.HealthCheckResponse.SERVING, timeout=5)
        replies = reflection_pb2_grpc.ServerReflectionStub(s.channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {svc.name for svc in next(replies).list_services_response.service}
        assert {"extender.api.v1.Extender", "grpc.health.v1.Health"} <= names
    finally:
        s.close()


def test_calls_beyond_max_workers_are_refused_at_once():
    s = Served(max_workers=1)
    try:
        pods = gang("g", 2, 8)
        plan = steer(s, pods)
        held = s.stub.Bind.future(bind_request(pods[0], plan["g-0"]))
        wait_until(lambda: s.ext.debug_gangs()[0].phase.startswith("waiting"))
        code, _ = code_of(lambda: s.stub.ExplainPod(pb.ExplainPodRequest(namespace="ml", name="g-1")))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        held.cancel()
        s.clock.now += 120
    finally:
        s.close()


# -- TLS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> pki_mod.Pki:
    """A CA, a serving cert for localhost/127.0.0.1 and a client cert (the local cluster's PKI)."""
    return pki_mod.generate(tmp_path_factory.mktemp("pki"))


def _explain_over(target: str, creds: grpc.ChannelCredentials) -> str:
    with grpc.secure_channel(target, creds, options=[("grpc.ssl_target_name_override", "localhost")]) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(
            stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)


def test_tls_serves_clients_that_trust_the_ca(certs):
    s = Served(tls=TlsFiles(str(certs.apiserver_cert), str(certs.apiserver_key)))
    try:
        trust = grpc.ssl_channel_credentials(root_certificates=certs.ca_cert.read_bytes())
        assert _explain_over(s.target, trust) == "SERVING"
        with pytest.raises(grpc.RpcError):  # plaintext is not served
            health_pb2_grpc.HealthStub(s.channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    finally:
        s.close()


def test_mtls_requires_a_client_certificate_from_the_ca(certs):
    s = Served(tls=TlsFiles(str(certs.apiserver_cert), str(certs.apiserver_key), str(certs.ca_cert)))
    try:
        ca = certs.ca_cert.read_bytes()
        with_cert = grpc.ssl_channel_credentials(ca, certs.admin_key.read_bytes(), certs.admin_cert.read_bytes())
        assert _explain_over(s.target, with_cert) == "SERVING"
        with pytest.raises(grpc.RpcError) as info:
            _explain_over(s.target, grpc.ssl_channel_credentials(ca))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        s.close()


def test_a_rotated_certificate_is_served_without_restart(tmp_path, certs):
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(certs.apiserver_cert.read_bytes())
    key.write_bytes(certs.apiserver_key.read_bytes())
    s = Served(tls=TlsFiles(str(cert), str(key)))
    try:
        trust_old = grpc.ssl_channel_credentials(certs.ca_cert.read_bytes())
        assert _explain_over(s.target, trust_old) == "SERVING"
        other = pki_mod.generate(tmp_path / "other")
        time.sleep(0.01)
        cert.write_bytes(other.apiserver_cert.read_bytes())
        key.write_bytes(other.apiserver_key.read_bytes())
        assert _explain_over(s.target, grpc.ssl_channel_credentials(other.ca_cert.read_bytes())) == "SERVING"
        with pytest.raises(grpc.RpcError):
            _explain_over(s.target, trust_old)
    finally:
        s.close()
