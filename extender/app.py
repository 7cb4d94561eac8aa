"""The composition root: the only place that reads files and flags and wires the ports.

    kube-scheduler --HTTP--> adapters/http/server  --> service.TopologyExtender --> core
    gRPC clients  --gRPC--> adapters/grpc/server  --/
    API server  --watch--> adapters/k8s/watch_cache --/        |
                <--POST--- adapters/k8s/binder      <----------+ (Bindings, Evictions, Events, Claims ports)
    /metrics    <--------- adapters/metrics.Metrics <----------+ (Observer port)
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import re
import ssl
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import yaml
from kubernetes import config as kubeconfig
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, start_http_server

from extender.adapters.grpc.server import GrpcServer, TlsFiles
from extender.adapters.http.server import ExtenderServer
from extender.adapters.http.view import ViewServer
from extender.adapters.k8s.api import Api
from extender.adapters.k8s.binder import KubeBinder
from extender.adapters.k8s.watch_cache import WatchCache, resources_for
from extender.adapters.kubeobjects import SCHEME, Translator
from extender.adapters.metrics import Metrics
from extender.adapters.periodic import Every
from extender.adapters.tls import CertificateReloader
from extender.core.ports import Ports
from extender.service import TopologyExtender
from extender.settings import Settings, deprecations, from_mapping, listen_address

log = logging.getLogger("railyard")

# kube-scheduler's default when an extender sets no httpTimeout (DefaultExtenderTimeout).
SCHEDULER_DEFAULT_HTTP_TIMEOUT = 5.0
# kube-scheduler's loop waits for every filter call, answered on the HTTP thread, while the
# watch threads decode pods and the Binding thread posts. CPython hands the GIL to a waiting
# thread only after its switch interval (default 5 ms): with one busy watch thread a filter
# over 1,000 names took 9.0 ms p50 / 60 ms p99 at 5 ms, 2.9 / 25 ms at 0.5 ms (issue 13).
GIL_SWITCH_INTERVAL = 0.0005
TICK_SECONDS = 5.0
"""How often time is applied to the service when no call carries it (``App.ticker``)."""
MALLOPT = {-3: 128 << 10, -8: 2}
"""glibc mallopt(3) settings (malloc.h numbers), ``limit_malloc_retention`` says why:
M_MMAP_THRESHOLD at its default, 128 KiB (set, it stops moving); M_ARENA_MAX 2."""


class ConfigError(Exception):
    """Settings or files that railyard cannot start with; the message lists every problem."""


def limit_malloc_retention() -> bool:
    """Keep glibc's malloc from holding on to what a burst of large requests freed (issue 25).

    glibc gives each block of 128 KiB or more a mapping of its own, unmapped when freed; but
    each such free raises that threshold to the block's size (up to 32 MiB), so after one 1 MB
    request body the later ones are cut from the arenas' heaps, whose free holes stay resident
    among live small objects; and each thread that allocates may get an arena of its own (up to
    8 a core: grpc's workers, the HTTP server's, the client's). Setting M_MMAP_THRESHOLD turns
    the adjustment off; M_ARENA_MAX 2 bounds the arenas (the GIL serialises most allocations
    anyway). A 3,000-request hostile burst at a local cluster's railyard
    (tests/e2e/test_hostile_burst.py) took RSS 86 -> 188 MiB, 179 MiB once its entries expired;
    with the threshold fixed, 87 -> 122 -> 104 MiB; with both, 86 -> 115 -> 99 MiB. Returns
    False off glibc (musl's mallopt does nothing, macOS has none), where there is nothing to set.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in MALLOPT.items())


@dataclass
class App:
    settings: Settings
    metrics: Metrics
    binder: KubeBinder
    service: TopologyExtender
    cache: WatchCache
    server: ExtenderServer
    grpc: GrpcServer | None = None
    """None when ``grpc.listen`` is empty."""
    metrics_server: Any = None
    """The /metrics-only listener (``server.metrics_listen``), once started."""
    tls_reloader: CertificateReloader | None = None
    """Re-reads the HTTPS certificate and key into the serving SSLContext when they change."""
    view: ViewServer | None = None
    """The live topology view (``view.listen``); None when it is off."""
    ticker: Every | None = None
    """Applies time to the service every ``TICK_SECONDS`` (``TopologyExtender.expire``): the verbs apply
    it on every call, but a quiet cluster makes none, and what a burst of calls for pods that
    never existed left (docs/faults.md, Bad input) would stay until the next one."""
    release: Every | None = None
    """Lifts the scheduling gates of planned gangs (``TopologyExtender.release_gangs``); each
    pass waits up to a second for a gated member or freed GPUs."""

    def start(self) -> tuple[str, int]:
        """Serve first (healthz answers, readyz says not ready), then list and watch."""
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        address = self.server.start()
        listeners = {"http": address[1]}
        if self.grpc is not None:
            listeners["grpc"] = self.grpc.start()[1]
        if self.settings.server.metrics_listen:
            host, port = listen_address(self.settings.server.metrics_listen)
            self.metrics_server, _ = start_http_server(port, addr=host, registry=self.metrics.registry)
            listeners["metrics"] = self.metrics_server.server_port
        if self.view is not None:
            listeners["view"] = self.view.start()[1]
        self.metrics.sample(self.service.held, listeners)
        if self.tls_reloader is not None:
            self.tls_reloader.start()
        for thread in (self.ticker, self.release):
            if thread is not None:
                thread.start()
        self.cache.start()
        return address

    def stop(self) -> None:
        for thread in (self.ticker, self.release):
            if thread is not None:
                thread.stop()
        self.cache.stop()
        if self.grpc is not None:
            self.grpc.stop()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        if self.view is not None:
            self.view.stop()
        if self.tls_reloader is not None:
            self.tls_reloader.stop()
        self.server.stop()
        self.binder.close()


def load_settings(path: str | None, overrides: dict[str, Any]) -> Settings:
    """The settings file (YAML, mirroring settings.Settings) with flag overrides on top."""
    data: dict[str, Any] = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from None
    for note in deprecations(data):
        log.warning("%s: %s", path, note)
    settings, problems = from_mapping(data)
    settings, more = from_mapping(overrides, settings)
    problems += more + settings.validate()
    if settings.scheduler_config:
        found, http_timeout = check_scheduler_config(settings)
        problems += found
        if http_timeout is not None and not settings.gangs.max_timeout_seconds:
            # Per-gang timeouts are capped so a held bind call ends before kube-scheduler cuts it.
            cap = max(http_timeout - settings.gangs.bind_margin_seconds, 0.0)
            settings = dataclasses.replace(settings, gangs=dataclasses.replace(settings.gangs, max_timeout_seconds=cap))
    if problems:
        raise ConfigError("; ".join(problems))
    return settings


def parse_duration(text: str) -> float:
    """A Go duration as kube-scheduler's config takes it: ``30s``, ``5m``, ``1m30s``, ``500ms``."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def check_scheduler_config(settings: Settings) -> tuple[list[str], float | None]:
    """kube-scheduler cuts a bind call at its extender's httpTimeout: it must outlast a gang's
    wait plus its Bindings. Returns the problems and the shortest httpTimeout found."""
    path = settings.scheduler_config
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        return [f"scheduler config {path}: {exc}"], None
    binders = [e for e in (doc or {}).get("extenders") or [] if isinstance(e, dict) and e.get("bindVerb")]
    if not binders:
        return [f"scheduler config {path}: no extender sets bindVerb, so gangs are never held at bind"], None
    problems = []
    shortest = None
    margin = settings.gangs.bind_margin_seconds
    for ext in binders:
        raw = ext.get("httpTimeout")
        try:
            timeout = parse_duration(str(raw)) if raw else SCHEDULER_DEFAULT_HTTP_TIMEOUT
        except ValueError as exc:
            problems.append(f"scheduler config {path}: extender {ext.get('urlPrefix')}: httpTimeout {exc}")
            continue
        shortest = timeout if shortest is None else min(shortest, timeout)
        gang = settings.gangs.default_timeout_seconds
        if timeout < gang + margin:
            problems.append(
                f"scheduler config {path}: extender {ext.get('urlPrefix')} has httpTimeout {raw or '5s (default)'}, "
                f"shorter than the gang timeout {gang:g}s plus {margin:g}s for the Bindings: the scheduler would "
                f"cut every held bind; set httpTimeout to at least {gang + margin:g}s")
    return problems, shortest


def kube_client(settings: Settings) -> ApiClient:
    cfg = Configuration()
    try:
        if settings.kubeconfig:
            kubeconfig.load_kube_config(config_file=settings.kubeconfig, client_configuration=cfg)
        else:
            kubeconfig.load_incluster_config(client_configuration=cfg)
    except (ConfigException, OSError) as exc:
        where = settings.kubeconfig or "in-cluster service account (no --kubeconfig given)"
        raise ConfigError(f"cannot load Kubernetes credentials from {where}: {exc}") from None
    # The watches (nodes, pods, each group and DRA kind), the event sender, the claim
    # deallocations and the compensating deletes share the pool (Bindings and marks have a pool
    # of their own: adapters/k8s/api.AsyncApi).
    cfg.connection_pool_maxsize = 32
    return ApiClient(cfg)


def build(settings: Settings, client: ApiClient | None = None) -> App:
    limit_malloc_retention()  # first: the arena bound holds only for threads not yet allocating
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)  # process_resident_memory_bytes and friends
    PlatformCollector(registry=registry)
    metrics = Metrics(registry)
    api = Api(client or kube_client(settings))
    binder = KubeBinder(api, metrics, event_interval=settings.gangs.event_interval_seconds)
    ports = Ports(bindings=binder, evictions=binder, events=binder, claims=binder, scheme=SCHEME, observer=metrics,
                  gates=binder)
    resources = resources_for(settings.workloads.enabled())
    service = TopologyExtender(settings, ports, kinds=tuple(r.kind for r in resources))
    translator = Translator(settings.placement.gpu_resource, settings.placement.volcano_tiers,
                            settings.workloads.enabled())
    cache = WatchCache(api, service, metrics, translator, resources=resources)
    s = settings.server
    context = None
    reloader = None
    if s.tls_cert_file:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(s.tls_cert_file, s.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load TLS certificate {s.tls_cert_file} / key {s.tls_key_file}: {exc}") from None
        reloader = CertificateReloader((s.tls_cert_file, s.tls_key_file),
                                       partial(context.load_cert_chain, s.tls_cert_file, s.tls_key_file))
    # One loop for the verbs and the Bindings: a lone pod's bind awaits its Binding where it
    # was read, with no thread hop (issue 21 item 5).
    server = ExtenderServer(service, metrics, translator, settings=s, ready_checks={"watch-cache": cache.synced},
                            ssl_context=context, loop=binder.writes.loop)
    g = settings.grpc
    grpc_server = None
    if g.listen:
        tls = TlsFiles(g.tls_cert_file, g.tls_key_file, g.client_ca_file) if g.tls_cert_file else None
        grpc_server = GrpcServer(service, translator, listen=g.listen, tls=tls, max_workers=g.max_workers,
                                 max_message_bytes=g.max_message_bytes, ready=cache.synced)
    view = ViewServer(service.topology_view, settings.view) if settings.view.listen else None
    return App(settings, metrics, binder, service, cache, server, grpc_server, tls_reloader=reloader, view=view,
               ticker=Every(TICK_SECONDS, service.expire, "tick"),
               release=Every(0.0, service.release_gangs, "release"))
