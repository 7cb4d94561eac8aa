"""The real extender in-process for the fuzzers: ``ExtenderServer`` and ``GrpcServer`` on
loopback in front of the real ``TopologyExtender``, with an in-memory Binder (the only double)
and a manual clock. Also: the log watch (no traceback, nothing at ERROR), the process's RSS,
and the check every fuzzer ends with, that a real gang still binds whole.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from dataclasses import replace
from typing import Any, Callable

import grpc
from prometheus_client import CollectorRegistry

from extender import topotext
from extender.adapters.grpc.server import GrpcServer
from extender.adapters.http.server import ExtenderServer
from extender.adapters.kubeobjects import SCHEME
from extender.adapters.metrics import Metrics
from extender.api.v1 import extender_pb2_grpc as pb_grpc
from extender.core.model import PodFacts, PodRef
from extender.core.ports import Ports
from extender.core.cluster.pods import SEEN_TTL_SECONDS
from extender.service import TopologyExtender
from extender.settings import ServerSettings, Settings
from tests.topologies import TRANSLATE, TWO_RACKS, gang

NODES = ["h1", "h2", "h3", "h4", "h5", "h6"]
PAGE = 4096


class MemoryBinder:
    """Records Bindings of the pods it was told exist, refuses the others as the API server
    does (404); Events are counted, not sent."""

    def __init__(self) -> None:
        self.existing: set[str] = set()
        self.bound: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.events = 0
        self.lock = threading.Lock()
        self.on_bound: Callable[[str, str], None] = lambda key, node: None
        """What the watch does next: show the pod bound."""

    def bind(self, pod: PodRef, node: str) -> None:
        key, name = pod.key, pod.name
        if key not in self.existing:
            raise RuntimeError(f'pods "{name[:40]}" not found')
        with self.lock:
            if any(k == key for k, _ in self.bound):
                raise RuntimeError(f'Operation cannot be fulfilled on pods/binding "{name[:40]}": pod is already '
                                   f'assigned to a node')
            self.bound.append((key, node))
        self.on_bound(key, node)

    def mark(self, pod: PodRef, mark: object) -> None:
        if pod.key not in self.existing:
            raise RuntimeError(f'pods "{pod.name[:40]}" not found')

    def bind_all(self, bindings):
        return [_outcome(self.bind, *b) for b in bindings]

    def mark_all(self, marks):
        return [_outcome(self.mark, *m) for m in marks]

    async def bind_async(self, pod: PodRef, node: str) -> Exception | None:
        return _outcome(self.bind, pod, node)

    def delete_pod(self, pod: PodRef) -> None:
        with self.lock:
            self.deleted.append(pod.key)

    def deallocate_claim(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        pass

    def event(self, pod: Any, reason: str, message: str, type_: str = "Warning") -> None:
        with self.lock:
            self.events += 1


def _outcome(call: Callable[..., None], *args: Any) -> Exception | None:
    try:
        call(*args)
        return None
    except Exception as exc:  # the in-memory API server's refusal, as the real binder returns it
        return exc


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Live:
    """One extender serving HTTP and gRPC; ``close()`` stops both."""

    def __init__(self, drawing: str = TWO_RACKS, grpc_server: bool = False, **server: Any) -> None:
        self.binder, self.clock = MemoryBinder(), Clock()
        self.metrics = Metrics(CollectorRegistry())
        ports = Ports(self.binder, self.binder, self.binder, self.binder, SCHEME, self.metrics)
        self.ext = TopologyExtender(Settings(), ports, clock=self.clock, sleep=lambda s: None)
        spec = topotext.load(drawing)
        self.ext.relisted("nodes", [TRANSLATE.node(n) for n in spec.nodes])
        self.ext.relisted("pods", [TRANSLATE.pod(p) for p in spec.filler_pods()])
        self.ext.relisted("podgroups", [])
        self.node_names = [n["metadata"]["name"] for n in spec.nodes]
        self.shown_bound: dict[str, PodFacts] = {}
        self.binder.on_bound = self._watch_shows_bound
        settings = ServerSettings(listen="127.0.0.1:0", **server)
        self.http = ExtenderServer(self.ext, self.metrics, TRANSLATE, settings=settings,
                                   ready_checks={"watch-cache": lambda: True})
        self.host, self.port = self.http.start()
        self.grpc: GrpcServer | None = None
        if grpc_server:
            self.grpc = GrpcServer(self.ext, TRANSLATE, listen="127.0.0.1:0", max_workers=16)
            host, port = self.grpc.start()
            self.channel = grpc.insecure_channel(f"{host}:{port}")
            self.stub = pb_grpc.ExtenderStub(self.channel)

    def close(self) -> None:
        # Every deadline passes, so binds still held (a failed test) end instead of keeping the
        # process from exiting (its bind threads are joined at exit).
        self.clock.now += 10**7
        self.ext.explain("fuzz/tick")
        if self.grpc is not None:
            self.channel.close()
            self.grpc.stop(grace=0)
        self.http.stop()

    # -- HTTP ----------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
                timeout: float = 30) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body, {"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post(self, verb: str, body: Any, **kw: Any) -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, data = self.request("POST", f"/scheduler/{verb}", raw, **kw)
        return status, json.loads(data)

    def healthz_seconds(self, timeout: float = 30) -> float:
        started = time.perf_counter()
        status, body = self.request("GET", "/healthz", timeout=timeout)
        assert (status, body) == (200, b"ok\n")
        return time.perf_counter() - started

    # -- what the fuzz left behind ---------------------------------------------------------------
    def held_state(self) -> dict[str, int]:
        """Sizes of everything the service keeps per pod or gang (``railyard_held_objects``)."""
        return self.ext.held()

    def _watch_shows_bound(self, key: str, node: str) -> None:
        pod = self.ext.ctx.pods.seen_pod(key) or self.ext.ctx.pods.pending_pod(key)
        if pod is not None:
            self.shown_bound[key] = replace(pod, node=node, phase="Running")
            self.ext.pod_upserted(self.shown_bound[key])

    def forget_the_fuzz(self) -> None:
        """The fuzz's pods that exist are deleted (as their owner would), and the documented time
        passes: pods only filter saw are forgotten, their gangs collected."""
        for key, pod in list(self.shown_bound.items()):
            if not key.startswith("real/"):
                self.ext.pod_deleted(pod)
                del self.shown_bound[key]
        self.clock.now += SEEN_TTL_SECONDS + 61
        self.ext.explain("fuzz/tick")

    def assert_a_real_gang_binds_whole(self, name: str = "real") -> None:
        """A 2 x 8-GPU gang, created as the watch shows it, filtered and bound over HTTP.

        Oracle (the drawing): only NVLink domain b1/r1/n1 has two free 8-GPU nodes, h1 and h2."""
        pods = gang(name, 2, 8, ns="real", annotations={"railyard.io/min-member": "2"})
        for p in pods:
            self.binder.existing.add(f"real/{p['metadata']['name']}")
            self.ext.pod_upserted(TRANSLATE.pod(p))
        plan = {}
        for p in pods:
            status, reply = self.post("filter", {"Pod": p, "NodeNames": self.node_names})
            assert status == 200 and reply["Error"] == "", reply
            plan[p["metadata"]["name"]] = reply["NodeNames"]
        assert plan == {f"{name}-0": ["h1"], f"{name}-1": ["h2"]}, (
            plan, {n: self.ext.ctx.state.free(n) for n in NODES}, self.ext.ctx.state.reservations(), self.held_state(),
            [(p.key, p.node) for p in self.shown_bound.values()], self.ext.debug_gangs())
        results: dict[str, Any] = {}

        def bind(p: dict, node: str) -> None:
            results[p["metadata"]["name"]] = self.post("bind", {
                "PodName": p["metadata"]["name"], "PodNamespace": "real", "PodUID": p["metadata"]["uid"],
                "Node": node})

        threads = [threading.Thread(target=bind, args=(p, plan[p["metadata"]["name"]][0])) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == {f"{name}-0": (200, {"Error": ""}), f"{name}-1": (200, {"Error": ""})}, results
        mine = sorted(b for b in self.binder.bound if b[0].startswith(f"real/{name}-"))
        assert mine == [(f"real/{name}-0", "h1"), (f"real/{name}-1", "h2")]


def rss_bytes() -> int:
    """This process's resident set, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class LogWatch(logging.Handler):
    """Every record from railyard's loggers and grpc's, kept; ``problems()`` lists the bad ones."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._loggers = [logging.getLogger(n) for n in ("railyard", "grpc", "aiohttp", "asyncio")]

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> "LogWatch":
        self._levels = [lg.level for lg in self._loggers]
        for lg in self._loggers:
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        for lg, level in zip(self._loggers, self._levels):
            lg.removeHandler(self)
            lg.setLevel(level)

    def problems(self) -> list[str]:
        return [f"{r.name} {r.levelname}: {r.getMessage()[:300]}" for r in self.records
                if r.exc_info or r.levelno >= logging.ERROR or "Traceback" in r.getMessage()]

    def warnings(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.levelno == logging.WARNING]
