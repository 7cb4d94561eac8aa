"""The HTTP server over loopback: verbs, robustness, caps, held binds, health and metrics."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import zlib
import socket
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from extender.adapters.http.server import MAX_ERROR_CHARS, ExtenderServer
from extender.adapters.metrics import Metrics
from extender.core.errors import RailyardError
from extender.core.model import Address, Place
from extender.core.verdicts import FilterVerdict
from extender.service.answers import GangView, Slices
from extender.settings import ServerSettings
from tests.topologies import TRANSLATE

GOLDEN = Path(__file__).parent / "golden"
FILTER_ARGS = (GOLDEN / "filter_args.json").read_bytes()
BIND_ARGS = (GOLDEN / "bind_args.json").read_bytes()


class GateHandler:
    """The handler port: every node passes; bind waits on a gate until the test opens it."""

    def __init__(self):
        self.gate = threading.Event()
        self.arrived = threading.Semaphore(0)
        self.is_ready = False
        self.bind_error: Exception | None = None
        self.busy = False
        """filter_now answers None (the service lock held elsewhere): filter runs on a thread."""
        self.alone = False
        """bind_now answers with a coroutine (a pod bound alone) instead of None."""
        self.threads: list[str] = []
        """The thread each filter verdict, or bind of a pod alone, was made on."""

    def filter(self, pod, node_names):
        self.threads.append(threading.current_thread().name)
        if pod.name == "explode":
            raise KeyError("spec")
        return FilterVerdict(node_names=tuple(node_names))

    def bind_now(self, namespace, name, uid, node):
        """A pod of no gang (``alone``): its Binding awaited on the loop; else held on a thread."""
        if not self.alone:
            return None
        self.threads.append(threading.current_thread().name)

        async def binding():
            if self.bind_error:
                raise self.bind_error
        return binding()

    def filter_now(self, pod, node_names):
        return None if self.busy else self.filter(pod, node_names)

    def prioritize(self, pod, node_names):
        return [(n, 5) for n in node_names]

    def bind(self, namespace, name, uid, node):
        if self.bind_error:
            raise self.bind_error
        self.arrived.release()
        if not self.gate.wait(10):
            raise RailyardError(f"gang {namespace}/{name} timed out at bind")

    def preempt(self, pod, victims):
        return victims

    def ready(self):
        return self.is_ready

    def debug_gangs(self):
        address = Address(pod="ml/llama-0", node="h1", rank=0, slice=0, rails=("0", "1"),
                          domains=(Place("network.topology.nvidia.com/accelerator", "nvlink", "b1/r1/n1"),))
        return [GangView(gang="ml/llama", phase="waiting at bind 1/4", plan={"ml/llama-0": "h1"},
                         deadline_in_seconds=12.5, reason="gang ml/llama: 1 pod, 8 GPUs on 1 node",
                         slices=Slices(size=1, level="network.topology.nvidia.com/accelerator", count=1),
                         ranks=(address,))]


@pytest.fixture
def handler():
    h = GateHandler()
    yield h
    h.gate.set()


def start(handler, **limits):
    metrics = Metrics(CollectorRegistry())
    server = ExtenderServer(handler, metrics, TRANSLATE, settings=ServerSettings(listen="127.0.0.1:0", **limits),
                            ready_checks={"watch-cache": lambda: handler.is_ready})
    server.start()
    return server, metrics


@pytest.fixture
def served(handler):
    server, metrics = start(handler, max_held_binds=2, max_in_flight=4, max_body_bytes=256 << 10)
    yield server, metrics
    server.stop()


def request(server, method, path, body=None, timeout=5):
    conn = http.client.HTTPConnection(*server.address, timeout=timeout)
    conn.request(method, path, body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def post(server, verb, body, **kw):
    status, data = request(server, "POST", f"/scheduler/{verb}", body, **kw)
    return status, json.loads(data)


def test_filter_and_prioritize(served):
    server, _ = served
    status, reply = post(server, "filter", FILTER_ARGS)
    assert status == 200
    assert reply["NodeNames"] == ["gpu-001", "gpu-002", "gpu-003"] and reply["Error"] == ""
    status, reply = post(server, "prioritize", FILTER_ARGS)
    assert (status, reply[0]) == (200, {"Host": "gpu-001", "Score": 5})


def test_filter_is_answered_on_the_loop_unless_the_handler_would_wait(served, handler):
    server, metrics = served
    assert post(server, "filter", FILTER_ARGS)[1]["NodeNames"] == ["gpu-001", "gpu-002", "gpu-003"]
    handler.busy = True
    assert post(server, "filter", FILTER_ARGS)[1]["NodeNames"] == ["gpu-001", "gpu-002", "gpu-003"]
    assert handler.threads == ["http", "verb_0"]  # then a worker, the loop never waiting
    assert metrics.registry.get_sample_value("railyard_verb_duration_seconds_count", {"verb": "filter", "outcome": "ok"}) == 2


def test_a_pod_bound_alone_is_bound_on_the_loop_with_the_binding_error_in_the_reply(served, handler):
    server, metrics = served
    handler.alone = True
    assert post(server, "bind", BIND_ARGS) == (200, {"Error": ""})
    handler.bind_error = RailyardError("binding pod ml/llama-0 to gpu-002 failed: 409 conflict")
    assert post(server, "bind", BIND_ARGS) == (200, {"Error": "binding pod ml/llama-0 to gpu-002 failed: 409 conflict"})
    assert handler.threads == ["http", "http"]
    assert handler.arrived.acquire(blocking=False) is False  # never went to the held path
    assert metrics.registry.get_sample_value("railyard_verb_duration_seconds_count", {"verb": "bind", "outcome": "error"}) == 1


def test_five_thousand_names_pass_the_default_limit(handler):
    server, _ = start(handler)
    try:
        body = json.loads(FILTER_ARGS)
        body["NodeNames"] = [f"gpu-{i:05d}.rack-{i // 32:03d}.example.internal" for i in range(5000)]
        status, reply = post(server, "filter", json.dumps(body))
        assert status == 200 and len(reply["NodeNames"]) == 5000
    finally:
        server.stop()


@pytest.mark.parametrize("body, message", [
    (b"{not json", "bad filter request: body is not valid JSON"),
    (b"", "bad filter request: body is not valid JSON"),
    (b"[]", "bad filter request: ExtenderArgs: expected a JSON object, got an array"),
    (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}',
     "bad filter request: ExtenderArgs.NodeNames[0]: expected a node name string, got an integer"),
])
def test_malformed_filter_is_400_with_error_field(served, body, message):
    status, reply = post(served[0], "filter", body)
    assert status == 400
    assert reply["Error"].startswith(message)
    assert reply["NodeNames"] is None and reply["FailedNodes"] == {}


def test_malformed_bind_is_400_naming_the_field(served):
    status, reply = post(served[0], "bind", b'{"PodName": "p", "PodNamespace": "ml", "Node": "n"}')
    assert (status, reply) == (400, {"Error": "bad bind request: ExtenderBindingArgs.PodUID is missing"})


def test_oversized_body_is_400(served):
    body = json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["x" * 100] * 3000})
    status, reply = post(served[0], "filter", body)
    assert status == 400
    assert reply["Error"] == f"bad filter request: body of {len(body)} bytes is over the {256 << 10}-byte limit"


def test_oversized_chunked_body_is_400(served):
    server, _ = served
    conn = http.client.HTTPConnection(*server.address, timeout=5)
    chunks = (b"x" * 65536 for _ in range(8))
    conn.request("POST", "/scheduler/filter", chunks, {"Content-Type": "application/json"}, encode_chunked=True)
    resp = conn.getresponse()
    reply = json.loads(resp.read())
    assert resp.status == 400 and reply["Error"] == f"bad filter request: body is over the {256 << 10}-byte limit"


def post_encoded(server, verb, body, encoding):
    conn = http.client.HTTPConnection(*server.address, timeout=5)
    conn.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json",
                                                      "Content-Encoding": encoding})
    resp = conn.getresponse()
    reply = json.loads(resp.read())
    conn.close()
    return resp.status, reply


GZIP_ARGS = gzip.compress(FILTER_ARGS)


@pytest.mark.parametrize("body, encoding, message", [
    (b"garbage, not gzip", "gzip", "body does not decode as Content-Encoding 'gzip': "
                                   "Error -3 while decompressing data: incorrect header check"),
    (GZIP_ARGS[:30], "gzip", "body ends before its gzip data does (30 bytes sent)"),
    (GZIP_ARGS + b"garbage", "gzip", "body does not decode as Content-Encoding 'gzip': "
                                     "Error -3 while decompressing data: incorrect header check"),
    (b"", "gzip", "body ends before its gzip data does (0 bytes sent)"),
    (b"garbage", "deflate", "body does not decode as Content-Encoding 'deflate': "
                            "Error -3 while decompressing data: incorrect header check"),
    (zlib.compress(FILTER_ARGS) + b"x", "deflate", "body has 1 bytes after its deflate data"),
    (b"garbage", "br", "body has Content-Encoding 'br'; railyard reads gzip, deflate or none"),
    (FILTER_ARGS, "gzip, gzip", "body has Content-Encoding 'gzip, gzip'; railyard reads gzip, deflate or none"),
    (gzip.compress(b" " * (300 << 10)), "gzip", f"body is over the {256 << 10}-byte limit once decompressed (gzip)"),
], ids=["not-gzip", "truncated", "trailing-garbage", "empty", "not-deflate", "after-deflate", "br", "twice", "bomb"])
def test_a_body_its_content_encoding_does_not_decode_is_400(served, caplog, body, encoding, message):
    # A bad gzip body used to be a 500 (aiohttp's decoding error reached the handler as an
    # internal error), with two tracebacks logged.
    caplog.set_level(logging.DEBUG)
    status, reply = post_encoded(served[0], "filter", body, encoding)
    assert (status, reply["Error"]) == (400, f"bad filter request: {message}")
    assert [r for r in caplog.records if r.exc_info] == [] and "Traceback" not in caplog.text


@pytest.mark.parametrize("body, encoding", [
    (GZIP_ARGS, "gzip"), (GZIP_ARGS, "x-gzip"), (GZIP_ARGS, " GZIP "), (zlib.compress(FILTER_ARGS), "deflate"),
    (FILTER_ARGS, "identity"), (gzip.compress(FILTER_ARGS[:100]) + gzip.compress(FILTER_ARGS[100:]), "gzip"),
], ids=["gzip", "x-gzip", "spaced-upper", "deflate", "identity", "two-members"])
def test_gzip_and_deflate_bodies_are_read(served, body, encoding):
    status, reply = post_encoded(served[0], "filter", body, encoding)
    assert status == 200 and reply["NodeNames"] == ["gpu-001", "gpu-002", "gpu-003"]


def test_errors_quoting_huge_input_are_cut(served):
    node = "n" * 200_000
    body = json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNameToMetaVictims": {node: 5}})
    status, reply = post(served[0], "preempt", body)
    assert status == 400 and len(reply["Error"]) == MAX_ERROR_CHARS
    assert reply["Error"].startswith("bad preempt request: ExtenderPreemptionArgs.NodeNameToMetaVictims['nnnn")
    said = reply["Error"].rsplit("... (", 1)[1]
    assert said.endswith(" characters in all)") and int(said.split()[0]) > len(node)
    status, reply = post(served[0], "v" * 5000, FILTER_ARGS)
    assert status == 404 and reply["Error"].startswith(f"unknown extender verb '{'v' * 40}'... (5000 characters);")


def test_unknown_verb_is_404(served):
    status, reply = post(served[0], "reserve", FILTER_ARGS)
    assert status == 404
    assert reply["Error"].startswith("unknown extender verb 'reserve'; railyard serves /scheduler/filter")


def test_handler_crash_is_500_and_the_server_keeps_serving(served):
    server, metrics = served
    body = json.loads(FILTER_ARGS)
    body["Pod"]["metadata"]["name"] = "explode"
    status, reply = post(server, "filter", json.dumps(body))
    assert status == 500 and reply["Error"] == "railyard internal error in filter: KeyError: 'spec'"
    assert post(server, "filter", FILTER_ARGS)[0] == 200
    text = metrics.exposition()[0].decode()
    assert 'railyard_verb_duration_seconds_count{outcome="internal",verb="filter"} 1.0' in text


def test_bind_error_goes_in_the_error_field(served, handler):
    handler.bind_error = RailyardError("gang ml/llama timed out at bind: 3 of 4 members arrived within 300 s")
    status, reply = post(served[0], "bind", BIND_ARGS)
    assert (status, reply) == (200, json.loads((GOLDEN / "bind_error.json").read_text()))


def test_held_binds_do_not_block_filter_and_the_cap_answers_at_once(served, handler):
    server, metrics = served
    results = []
    threads = [threading.Thread(target=lambda: results.append(post(server, "bind", BIND_ARGS, timeout=20)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for _ in threads:
        assert handler.arrived.acquire(timeout=5)
    # Both held: filter still answers, and a third bind is refused at once.
    t0 = time.monotonic()
    assert post(server, "filter", FILTER_ARGS)[0] == 200
    status, reply = post(server, "bind", BIND_ARGS)
    assert time.monotonic() - t0 < 1
    assert status == 503
    assert reply["Error"] == "railyard busy: 2 bind calls held, the cap is 2; the scheduler will retry the pod"
    assert "railyard_held_binds 2.0" in metrics.exposition()[0].decode()
    handler.gate.set()
    for t in threads:
        t.join(10)
    assert results == [(200, {"Error": ""})] * 2
    assert "railyard_held_binds 0.0" in metrics.exposition()[0].decode()


def test_in_flight_cap_answers_at_once(handler):
    server, _ = start(handler, max_in_flight=1)
    slow = socket.create_connection(server.address)
    try:
        # A request whose body never finishes keeps its in-flight slot.
        slow.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        deadline = time.monotonic() + 5
        while True:
            status, reply = post(server, "prioritize", FILTER_ARGS)
            if status == 503 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert status == 503
        assert reply["Error"] == "railyard busy: 1 filter/prioritize/preempt calls in flight, the cap is 1"
    finally:
        slow.close()
        server.stop()


def test_readyz_follows_the_handler_and_checks(served, handler):
    server, _ = served
    status, text = request(server, "GET", "/readyz")
    assert status == 503 and b"[-]handler not ready" in text and b"[-]watch-cache not ready" in text
    handler.is_ready = True
    assert request(server, "GET", "/readyz") == (200, b"[+]handler ok\n[+]watch-cache ok\nready\n")
    assert request(server, "GET", "/healthz") == (200, b"ok\n")


def test_metrics_and_debug_gangs(served):
    server, _ = served
    post(server, "filter", FILTER_ARGS)
    status, text = request(server, "GET", "/metrics")
    assert status == 200
    assert b'railyard_verb_duration_seconds_bucket{le="5e-05",outcome="ok",verb="filter"}' in text
    status, body = request(server, "GET", "/debug/gangs")
    (gang,) = json.loads(body)
    assert status == 200 and gang == {
        "gang": "ml/llama", "phase": "waiting at bind 1/4", "plan": {"ml/llama-0": "h1"}, "deadline_in_seconds": 12.5,
        "reason": "gang ml/llama: 1 pod, 8 GPUs on 1 node",
        "slices": {"size": 1, "level": "network.topology.nvidia.com/accelerator", "count": 1},
        "ranks": [{"rank": 0, "slice": 0, "pod": "ml/llama-0", "node": "h1",
                   "domains": [{"level": "network.topology.nvidia.com/accelerator", "name": "nvlink",
                                "domain": "b1/r1/n1"}],
                   "rails": ["0", "1"]}], "origin": ""}
    # The keys in the order /debug/gangs has always sent them.
    assert list(gang) == ["gang", "phase", "plan", "deadline_in_seconds", "reason", "slices", "ranks", "origin"]
    assert list(gang["ranks"][0]) == ["rank", "slice", "pod", "node", "domains", "rails"]


def test_prefix_is_configurable(handler):
    server = ExtenderServer(handler, Metrics(CollectorRegistry()), TRANSLATE,
                            settings=ServerSettings(listen="127.0.0.1:0", prefix="/railyard/v1/"))
    server.start()
    try:
        assert request(server, "POST", "/railyard/v1/filter", FILTER_ARGS)[0] == 200
        assert request(server, "POST", "/scheduler/filter", FILTER_ARGS)[0] == 404
    finally:
        server.stop()


def test_arbitrary_bodies_never_crash_the_server(handler):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    server, metrics = start(handler, max_body_bytes=64 << 10)
    conn = http.client.HTTPConnection(*server.address, timeout=5)

    @settings(max_examples=150, deadline=None)
    @given(verb=st.sampled_from(["filter", "prioritize", "bind", "preempt"]),
           body=st.binary(max_size=300) | st.builds(lambda v: json.dumps(v).encode(), st.recursive(
               st.none() | st.booleans() | st.integers() | st.text(max_size=8),
               lambda c: st.lists(c, max_size=3) | st.dictionaries(
                   st.sampled_from(["Pod", "NodeNames", "Nodes", "PodName", "PodNamespace", "PodUID", "Node",
                                    "NodeNameToMetaVictims", "metadata", "name", "Pods", "UID"]), c, max_size=4),
               max_leaves=12)))
    def check(verb, body):
        conn.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        reply = json.loads(resp.read())
        assert resp.status in (200, 400), reply
        if resp.status == 400:
            assert reply["Error"].startswith(f"bad {verb} request: ")

    handler.gate.set()  # binds that decode pass straight through
    try:
        check()
        assert request(server, "GET", "/healthz") == (200, b"ok\n")
        text = metrics.exposition()[0].decode()
        assert 'outcome="internal"' not in text
    finally:
        conn.close()
        server.stop()


def test_https_when_given_a_certificate(handler, tmp_path):
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "railyard")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = ExtenderServer(handler, Metrics(CollectorRegistry()), TRANSLATE,
                            settings=ServerSettings(listen="127.0.0.1:0"), ssl_context=server_ctx)
    server.start()
    try:
        client_ctx = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        conn = http.client.HTTPSConnection("localhost", server.address[1], context=client_ctx, timeout=5)
        conn.request("POST", "/scheduler/filter", FILTER_ARGS)
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["Error"] == ""
    finally:
        server.stop()


def test_a_bind_whose_caller_gave_up_still_finishes_and_frees_its_slot(served, handler):
    # kube-scheduler closes the connection when its httpTimeout passes; the held call must
    # still run to its end (the service decides), then free its slot.
    server, metrics = served
    s = socket.create_connection(server.address)
    s.sendall(b"POST /scheduler/bind HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
              % (len(BIND_ARGS), BIND_ARGS))
    assert handler.arrived.acquire(timeout=5)
    s.close()
    time.sleep(0.1)
    assert "railyard_held_binds 1.0" in metrics.exposition()[0].decode()
    handler.gate.set()
    deadline = time.monotonic() + 5
    while "railyard_held_binds 0.0" not in metrics.exposition()[0].decode():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert post(server, "filter", FILTER_ARGS)[0] == 200
