"""Every Prometheus collector railyard exports, on one injected registry (docs/metrics.md).

Other modules never touch prometheus_client: they call the typed helpers below. The registry
is an argument so each test gets a fresh one.

What a long run must sample (threads, Python heap, connections, what the service holds) is read
at scrape time by ``Sampled``, never counted per request: the verbs' hot path does not pay for it.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from collections import Counter as Tally
from typing import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from extender.adapters.kubeobjects import GROUP_APIS

# 50 us .. 10 s: filter and prioritize live well under 1 ms; a held bind lasts up to minutes
# but is answered by the gang's timeout, so 10 s and +Inf separate them well enough.
VERB_BUCKETS = (50e-6, 100e-6, 200e-6, 350e-6, 500e-6, 750e-6, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3,
                10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0)
PLAN_BUCKETS = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
                250e-3, 500e-3, 1.0, 2.5)
BIND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)

GANG_OUTCOMES = ("bound", "timed_out", "rejected", "compensated", "completed")
#: The number a pool gives each of its threads (bind-3, verb_0, ThreadPoolExecutor-0_1).
_NUMBERED = re.compile(r"[-_]\d+(?:_\d+)?$")
CACHE_KINDS = ("nodes", "pods", *(g.kind for g in GROUP_APIS))


class Metrics:
    """Typed helpers over railyard's collectors; every name starts with ``railyard_``."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._clock = clock
        self._last_watch_event: float | None = None
        r = self.registry
        self._verb = Histogram(
            "railyard_verb_duration_seconds",
            "Time to answer one extender call, by verb and outcome (bind includes time held at the gang gate).",
            ["verb", "outcome"], buckets=VERB_BUCKETS, registry=r)
        self._gangs = Counter(
            "railyard_gangs_total", "Gangs that finished, by outcome.", ["outcome"], registry=r)
        self._time_to_bind = Histogram(
            "railyard_gang_time_to_bind_seconds",
            "From the first member of a gang seen to every member bound.",
            buckets=BIND_BUCKETS, registry=r)
        self._held = Gauge(
            "railyard_held_binds", "Bind calls currently held at the gang gate.", registry=r)
        self._reserved_gangs = Gauge(
            "railyard_reserved_gangs", "Gangs holding a reservation (planned, not yet bound).", registry=r)
        self._reserved_gpus = Gauge(
            "railyard_reserved_gpus", "GPUs reserved for planned gangs.", registry=r)
        self._cache = Gauge(
            "railyard_cache_objects", "Objects in the watch cache, by kind.", ["kind"], registry=r)
        self._event_age = Gauge(
            "railyard_last_watch_event_age_seconds",
            "Seconds since the watch cache last received an event or list (-1 before the first).",
            registry=r)
        self._event_age.set_function(self._watch_event_age)
        self._plan = Histogram(
            "railyard_plan_duration_seconds", "Time to plan one gang's placement.",
            buckets=PLAN_BUCKETS, registry=r)
        self._binding_failures = Counter(
            "railyard_binding_failures_total",
            "Binding POSTs to the API server that failed (after which railyard retries or compensates).",
            registry=r)
        self._events_dropped = Counter(
            "railyard_events_dropped_total",
            "Kubernetes Events not sent because the event queue was full or the API server refused them.",
            registry=r)
        self._forgotten = Counter(
            "railyard_unshown_pods_forgotten_total",
            "Pods filter was called for that the watch never showed, forgotten past their time or railyard's bounds.",
            registry=r)
        for outcome in GANG_OUTCOMES:
            self._gangs.labels(outcome)
        for kind in CACHE_KINDS:
            self._cache.labels(kind)
        self._sampled = Sampled()
        r.register(self._sampled)

    # -- transport -----------------------------------------------------------------------
    def verb_finished(self, verb: str, outcome: str, seconds: float) -> None:
        self._verb.labels(verb, outcome).observe(seconds)

    def held_binds(self, n: int) -> None:
        self._held.set(n)

    # -- gangs ---------------------------------------------------------------------------
    def gang_finished(self, outcome: str) -> None:
        if outcome not in GANG_OUTCOMES:
            raise ValueError(f"unknown gang outcome {outcome!r}; expected one of {', '.join(GANG_OUTCOMES)}")
        self._gangs.labels(outcome).inc()

    def gang_time_to_bind(self, seconds: float) -> None:
        self._time_to_bind.observe(seconds)

    def reservations(self, gangs: int, gpus: int) -> None:
        self._reserved_gangs.set(gangs)
        self._reserved_gpus.set(gpus)

    def plan_seconds(self, seconds: float) -> None:
        self._plan.observe(seconds)

    def pods_forgotten(self, n: int) -> None:
        self._forgotten.inc(n)

    # -- Kubernetes ----------------------------------------------------------------------
    def cache_objects(self, kind: str, n: int) -> None:
        self._cache.labels(kind).set(n)

    def watch_event(self) -> None:
        """Called by the watch cache on every event and list."""
        self._last_watch_event = self._clock()

    def binding_failed(self) -> None:
        self._binding_failures.inc()

    def event_dropped(self) -> None:
        self._events_dropped.inc()

    # -- sampled at scrape ---------------------------------------------------------------
    def sample(self, held: Callable[[], Mapping[str, int]], listeners: Mapping[str, int]) -> None:
        """From now on each scrape also reads ``held()`` (what the service holds, by kind) and
        counts the connections open on each listening port (name -> port)."""
        self._sampled.held, self._sampled.listeners = held, dict(listeners)

    # -- exposition ----------------------------------------------------------------------
    def exposition(self) -> tuple[bytes, str]:
        """The /metrics body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def _watch_event_age(self) -> float:
        if self._last_watch_event is None:
            return -1.0
        return max(0.0, self._clock() - self._last_watch_event)


class Sampled(Collector):
    """The process and the service as a scrape finds them: each value is read from /proc, a
    length or the process's own sockets, about a millisecond a scrape with 40 sockets open
    (``sys.getallocatedblocks`` walks the interpreter's arenas, not its objects); nothing is
    counted per request."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.held: Callable[[], Mapping[str, int]] | None = None
        self.listeners: dict[str, int] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("railyard_process_threads", "Threads of the process (Python's and native ones).",
                                value=self.threads())
        pools = GaugeMetricFamily("railyard_python_threads",
                                  "Python threads by name, numbered ones counted together (bind-3 as bind).",
                                  labels=["thread"])
        for name, n in sorted(Tally(_NUMBERED.sub("", t.name) for t in threading.enumerate()).items()):
            pools.add_metric([name], n)
        yield pools
        yield GaugeMetricFamily("railyard_python_allocated_blocks",
                                "Memory blocks the Python interpreter has allocated now (sys.getallocatedblocks).",
                                value=sys.getallocatedblocks())
        connections = GaugeMetricFamily("railyard_open_connections",
                                        "Client connections open on a listening port, by server.", labels=["server"])
        for server, n in self.connections().items():
            connections.add_metric([server], n)
        yield connections
        held = GaugeMetricFamily("railyard_held_objects", "What the service holds, by kind.", labels=["kind"])
        for kind, n in (self.held() if self.held is not None else {}).items():
            held.add_metric([kind], n)
        yield held

    def threads(self) -> int:
        """From /proc/self/stat (num_threads, grpc's and the kubernetes client's native threads
        included), else the Python threads."""
        try:
            with open(f"{self.proc}/self/stat", "rb") as f:
                return int(f.read().rsplit(b")", 1)[1].split()[17])
        except (OSError, IndexError, ValueError):
            return threading.active_count()

    def connections(self) -> dict[str, int]:
        """Connected sockets this process holds on each listening port: connections accepted
        and not yet closed (CLOSE_WAIT included: a client gone whose socket railyard never
        closed is a leak to see). Each of the process's own sockets is asked its ports (through
        a duplicate of its descriptor), so the cost follows the process's descriptors, not
        every socket of the host as /proc/net/tcp would (7 ms at 675 sockets). Empty where
        /proc is not Linux's."""
        if not self.listeners:
            return {}
        try:
            fds = os.listdir(f"{self.proc}/self/fd")
        except OSError:
            return {}
        server_of = {port: server for server, port in self.listeners.items()}
        counts = dict.fromkeys(self.listeners, 0)
        for fd in fds:
            try:
                if not os.readlink(f"{self.proc}/self/fd/{fd}").startswith("socket:"):
                    continue
                with socket.socket(fileno=os.dup(int(fd))) as sock:
                    if sock.family not in (socket.AF_INET, socket.AF_INET6):
                        continue
                    server = server_of.get(sock.getsockname()[1])
                    if server is not None:
                        sock.getpeername()  # a listener has no peer: OSError
                        counts[server] += 1
            except OSError:  # closed since the listing, or not connected
                continue
        return counts

