"""A hostile burst for memory tests against the real process: ``total`` requests of the kinds the
fuzzers send, over HTTP (every verb), gRPC (every method) and raw sockets, from 8 threads.

The fuzzers draw their bodies with Hypothesis, about 0.1 s a pod (its engine, the 1 MB names):
3,000 would take minutes. A memory test needs volume and the same load on every run, not a search,
so the bodies here are built from a seeded ``random.Random`` out of the fuzzers' own absurd values
(``strategies.ABSURD_NUMBERS``...), in about a second. Every pod is one that never existed, each
with its own name (one in 30 named with a megabyte), half of them in gangs, some carrying 50 KB
node selectors railyard keeps while it remembers the pod.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import socket
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from extender.api.v1 import extender_pb2 as pb
from tests.fuzz.strategies import ABSURD_JSON, ABSURD_NUMBERS, GPU, GROUP, LEVELS
from tests.fuzz.test_grpc_fuzz import call
from tests.adapters.grpc.test_hostile_requests import METHODS

NAMESPACE = "burst"
RAW = [b'POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"Pod": ',
       b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),
       b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
       b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 100_000 + b"\r\n\r\n"]
"""What no client library sends: a body cut short, a TLS hello, a bad chunk, a 100 KB header."""
ANNOTATIONS = ["railyard.io/min-member", "railyard.io/timeout-seconds", "railyard.io/required-topology",
               "kueue.x-k8s.io/pod-group-total-count", "batch.kubernetes.io/job-completion-index"]
VERBS = ["filter"] * 5 + ["prioritize"] * 2 + ["preempt"] * 2 + ["bind"] * 3
"""HTTP verbs, weighted: filter is what makes railyard remember a pod."""


class Burst:
    def __init__(self, seed: int, total: int, nodes: list[str]) -> None:
        self.rng, self.nodes = random.Random(seed), nodes
        self.requests: list[tuple[str, Any, bytes, dict[str, str]]] = []
        """(kind: http | grpc | raw, verb or method, payload, headers)."""
        for i in range(total):
            kind = self.rng.choices(["http", "grpc", "raw"], [6, 3, 1])[0]
            if kind == "http":
                verb = self.rng.choice(VERBS)
                self.requests.append(("http", verb, *self._encoded(self._body(verb, i))))
            elif kind == "grpc":
                method = self.rng.choice(METHODS)
                self.requests.append(("grpc", method, self._message(method[0], i), {}))
            else:
                self.requests.append(("raw", None, self.rng.choice(RAW), {}))

    # -- building ------------------------------------------------------------------------------
    def _quantity(self) -> Any:
        return self.rng.choice(["1", "2", "8", 8]) if self.rng.randrange(3) else \
            self.rng.choice(ABSURD_NUMBERS + ABSURD_JSON)

    def pod(self, i: int) -> dict[str, Any]:
        rng = self.rng
        name = ("p" * 1_000_000 if rng.randrange(30) == 0 else "ghost") + f"-{i}"
        labels = {GROUP: rng.choice(["g1", "g2", "g3", f"gang-{i % 97}"])} if rng.randrange(2) else {}
        annotations = {k: rng.choice(ABSURD_NUMBERS + LEVELS + ["1", "2", "4"]) for k in ANNOTATIONS
                       if rng.randrange(4) == 0}
        spec: dict[str, Any] = {"containers": [
            {"name": f"c{k}", "resources": {"limits": {GPU: self._quantity(), "cpu": self._quantity()}}}
            for k in range(rng.randint(1, 3))]}
        if rng.randrange(4) == 0:
            spec["initContainers"] = [{"name": "init", "restartPolicy": rng.choice(["Always", None]),
                                       "resources": {"requests": {GPU: self._quantity()}}}]
        if rng.randrange(4) == 0:
            spec["overhead"] = {GPU: self._quantity()}
        if rng.randrange(8) == 0:
            spec["nodeSelector"] = {f"key-{k}": f"{i}-" + "v" * 800 for k in range(60)}
        return {"metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{i}", "labels": labels,
                             "annotations": annotations},
                "spec": spec, "status": {"phase": "Pending"}}

    def _names(self) -> Any:
        return self.rng.choice([self.nodes, self.nodes[:2], ["nope", ""], None, "h1", ["x" * 100_000]])

    def _body(self, verb: str, i: int) -> Any:
        rng = self.rng
        if verb in ("filter", "prioritize"):
            return {"Pod": self.pod(i), "NodeNames": self._names()}
        if verb == "preempt":
            victims = {rng.choice(self.nodes + ["nope"]): {"Pods": [{"UID": f"uid-{rng.randrange(i + 1)}"}],
                                                          "NumPDBViolations": rng.choice([0, -1, "x"])}}
            return {"Pod": self.pod(i), "NodeNameToMetaVictims": victims}
        return {"PodName": rng.choice([f"ghost-{rng.randrange(i + 1)}", "", "x" * 100_000]),
                "PodNamespace": NAMESPACE, "PodUID": f"uid-{rng.randrange(i + 1)}",
                "Node": rng.choice(self.nodes + ["nope"])}

    def _encoded(self, value: Any) -> tuple[bytes, dict[str, str]]:
        data = json.dumps(value).encode()
        how = self.rng.choices(["json", "gzip", "deflate", "truncated", "deep", "binary"], [14, 2, 1, 1, 1, 1])[0]
        if how == "gzip":
            return gzip.compress(data, 1), {"Content-Encoding": "gzip"}
        if how == "deflate":
            return zlib.compress(data, 1), {"Content-Encoding": "deflate"}
        if how == "truncated":
            return data[: self.rng.randrange(len(data))], {}
        if how == "deep":
            return b"[" * 100_000 + b"]" * 100_000, {}
        if how == "binary":
            return self.rng.randbytes(64), {}
        return data, {}

    def _message(self, path: str, i: int) -> bytes:
        rng = self.rng
        if rng.randrange(3) == 0:
            return rng.randbytes(rng.randrange(64))
        method = path.rsplit("/", 1)[1]
        pod = json.dumps(self.pod(i)).encode()
        drawn = self._names()
        names = [n for n in drawn if isinstance(n, str)] if isinstance(drawn, list) else []
        message = {
            "Filter": lambda: pb.FilterRequest(pod=pod, node_names=names),
            "Prioritize": lambda: pb.PrioritizeRequest(pod=pod, node_names=names),
            "Preempt": lambda: pb.PreemptRequest(pod=pod, node_name_to_victims={
                rng.choice(self.nodes): pb.Victims(pod_uids=[f"uid-{i}"], num_pdb_violations=0)}),
            "Bind": lambda: pb.BindRequest(pod_name=f"ghost-{rng.randrange(i + 1)}", pod_namespace=NAMESPACE,
                                           pod_uid=f"uid-{i}", node=rng.choice(self.nodes)),
            "PlanGang": lambda: pb.PlanGangRequest(pods=[pod, json.dumps(self.pod(i)).encode()]),
            "ExplainPod": lambda: pb.ExplainPodRequest(namespace=NAMESPACE, name=f"ghost-{rng.randrange(i + 1)}"),
            "WatchGangs": lambda: pb.WatchGangsRequest(namespace=NAMESPACE),
            "Check": lambda: health_pb2.HealthCheckRequest(service=rng.choice(["", "x" * 1000])),
            "Watch": lambda: health_pb2.HealthCheckRequest(service=""),
        }.get(method)
        return message().SerializeToString() if message else rng.randbytes(rng.randrange(64))

    # -- sending -------------------------------------------------------------------------------
    def send(self, host: str, http_port: int, grpc_port: int, workers: int = 8) -> Counter[str]:
        """Every request, from ``workers`` threads; the outcomes counted ("http 400", "grpc
        INVALID_ARGUMENT", "http held" for a bind the caller gave up on, ...)."""
        with grpc.insecure_channel(f"{host}:{grpc_port}") as channel, ThreadPoolExecutor(workers) as pool:
            return Counter(pool.map(lambda r: self._one(r, host, http_port, channel), self.requests))

    @staticmethod
    def _one(request: tuple[str, Any, bytes, dict[str, str]], host: str, port: int, channel: grpc.Channel) -> str:
        kind, what, payload, headers = request
        if kind == "http":
            conn = http.client.HTTPConnection(host, port, timeout=0.5 if what == "bind" else 30)
            try:
                conn.request("POST", f"/scheduler/{what}", payload, {"Content-Type": "application/json", **headers})
                resp = conn.getresponse()
                resp.read()
                return f"http {resp.status}"
            except (socket.timeout, TimeoutError):
                return "http held"  # a bind held at the gang gate: its gang's time will end it
            except OSError as exc:  # the server closed early (a body over the limit)
                return f"http {type(exc).__name__}"
            finally:
                conn.close()
        if kind == "grpc":
            path, client_streaming, server_streaming, _ = what
            try:
                call(channel, path, client_streaming, server_streaming, payload)
                return "grpc OK"
            except grpc.RpcError as exc:
                return f"grpc {exc.code().name}"
        try:
            with socket.create_connection((host, port), timeout=10) as sock:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                reply = sock.recv(200)
        except OSError as exc:  # closed before the header ended
            return f"raw {type(exc).__name__}"
        return "raw 400" if b" 400 " in reply[:20] else "raw closed" if not reply else f"raw {reply[:12]!r}"
