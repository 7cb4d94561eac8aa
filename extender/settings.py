"""railyard's settings: a tree of frozen dataclasses with documented defaults.

Only ``app.py`` reads flags, files and the environment; everything else receives these.
``validate()`` returns every problem at once, so an operator fixes a config in one pass.
A YAML file (``railyard serve --config FILE``) mirrors the tree::

    placement: {levels: [network.topology.nvidia.com/spine, ...], gpu_resource: nvidia.com/gpu, volcano_tiers: []}
    gangs: {default_timeout_seconds: 60, bind_attempts: 3, settle_seconds: 5}
    preemption: {gangs: true, victim_wait_seconds: 60, blocked_seconds: 30}
    server: {listen: "127.0.0.1:8888", prefix: /scheduler, max_body_bytes: 8388608, ...}
    grpc: {listen: "127.0.0.1:8889", tls_cert_file: "", tls_key_file: "", client_ca_file: "", ...}
    view: {listen: "", refresh_seconds: 1}
    dra: {device_classes: [], rail_attribute: "", topology_attributes: ["gpu.example.com/clique=nvidia.com/gpu.clique"]}
    workloads: {jobsets: true, leaderworkersets: true, jobs: true, trainjobs: true}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping


DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

RETIRED = {
    "gangs.steer_misses_before_replan": "a planned node kube-scheduler's filters refuse is now left out and the "
                                        "gang planned again at once",
    "gangs.filter_failures_before_replan": "a planned node kube-scheduler's filters refuse is now left out and the "
                                           "gang planned again at once",
}
"""Settings that no longer do anything: still accepted (configs keep working), with a warning
at start (``deprecations``) saying why."""


@dataclass(frozen=True)
class PlacementSettings:
    levels: tuple[str, ...] = ()
    """Topology label keys, broadest first. Empty: detected from the labels nodes carry."""
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    """The extended resource counted as GPUs."""
    volcano_tiers: tuple[str, ...] = ()
    """Volcano HyperNode tiers as topology levels, tier 1 first: the node label key (or short
    name) whose domains are the tier's HyperNodes. A Volcano PodGroup's hard ``highestTierAllowed:
    N`` is then the required level ``volcano_tiers[N-1]``. Empty: such a gang is not placed, and
    its reason says to set this (``highestTierName`` needs no mapping)."""


@dataclass(frozen=True)
class DraSettings:
    """GPUs published as DRA devices (``resource.k8s.io/v1``); docs/reference.md, DRA."""

    device_classes: tuple[str, ...] = ()
    """DeviceClasses whose devices are GPUs, besides those whose ``extendedResourceName`` is
    ``placement.gpu_resource``."""
    rail_attribute: str = ""
    """Device attribute naming a GPU's rail (its NIC rail or local index); without a domain it
    is the driver's. Empty: rails are not read."""
    topology_attributes: tuple[str, ...] = ()
    """``ATTRIBUTE=LABEL``: a node whose GPU devices all carry the same value of ATTRIBUTE is
    treated as labelled LABEL=value (unless it has that label)."""


@dataclass(frozen=True)
class WorkloadSettings:
    """Workload kinds whose gangs railyard finds from the workload itself (docs/workloads.md);
    a kind switched off is read as before: its pods are gangs of one unless they name a group."""

    jobsets: bool = True
    """A JobSet is one gang per restart attempt, sized from the JobSet (watched while served)."""
    leaderworkersets: bool = True
    """A LeaderWorkerSet group is one gang of its size; the LeaderWorkerSet is watched while served."""
    jobs: bool = True
    """A Job whose pod template is labelled ``railyard.io/gang: "true"`` is one gang of its parallelism."""
    trainjobs: bool = True
    """The PodGroup Kubeflow Trainer makes for a TrainJob gives no size (it counts initializer pods)."""

    def enabled(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self) if getattr(self, f.name))


@dataclass(frozen=True)
class GangSettings:
    default_timeout_seconds: float = 60.0
    """How long members wait at bind for the rest of their gang, unless the gang says otherwise."""
    bind_attempts: int = 3
    """Tries per Binding before the compensating action (evicting the members already bound)."""
    event_interval_seconds: float = 30.0
    """At most one Kubernetes Event per pod and reason in this interval."""
    settle_seconds: float = 5.0
    """A gang whose size is declared nowhere (no min-member annotation, no PodGroup size) is
    planned only once no new member has appeared for this long; it holds nothing meanwhile.
    0: plan at once with the members seen (they may then bind in rounds)."""
    max_timeout_seconds: float = 0.0
    """Longest a gang waits at bind; a longer per-gang timeout is capped to it (and says so).
    0: kube-scheduler's extender httpTimeout (read from ``scheduler_config``) minus
    ``bind_margin_seconds``; without ``scheduler_config``, no cap."""
    bind_margin_seconds: float = 10.0
    """Kept free of a held bind call's httpTimeout for the gang's Bindings themselves."""
    recovery_grace_seconds: float = 10.0
    """A Binding round found partly bound (the process that issued it died, or lost leadership)
    is completed or compensated once it has stayed partial this long here with no plan of
    this process in progress for the gang."""
    starvation_seconds: float = 60.0
    """The starvation bound: a gang that has lacked room this long (smaller gangs kept taking
    the GPUs freed before enough were free at once for it) drains the domain where it fits once
    the pods there finish: no other gang or GPU pod is placed on those GPUs meanwhile. It then
    waits at most this plus the longest remaining runtime on them. 0: never (first come, first
    placed)."""
    max_preferred_wait_seconds: float = 300.0
    """Longest a gang waits, holding nothing, for its preferred level before it accepts a wider
    domain (``railyard.io/preferred-topology-wait-seconds``); a longer wait is capped to it (and
    says so). 300 s is Slurm's ``max_switch_wait`` default."""
    binding_pause_seconds: float = 0.0
    """Fault injection for tests only: a pause between a gang's Bindings, which then go out one
    by one, so a test can kill the extender in the middle of a burst. Keep 0."""


@dataclass(frozen=True)
class PreemptionSettings:
    gangs: bool = True
    """railyard chooses the victims when a gang member's preemption is asked (kube-scheduler's
    preempt verb): one domain, whole gangs only, evicted through the Eviction API; the scheduler
    is told to evict nothing itself. False: gang members get no preemption at all (when Kueue or
    another admission layer owns preemption). Pods of no gang keep kube-scheduler's own
    preemption either way, vetoed when it would break a running gang."""
    victim_wait_seconds: float = 60.0
    """How long the cleared domain stays reserved for the preemptor while its victims terminate,
    on top of the gang's own timeout at bind."""
    blocked_seconds: float = 30.0
    """A pod whose eviction was refused (its PodDisruptionBudget) is not chosen again for this long."""


@dataclass(frozen=True)
class ServerSettings:
    listen: str = "127.0.0.1:8888"
    """host:port of the extender's HTTP endpoint. Loopback by default: a sidecar."""
    prefix: str = "/scheduler"
    """urlPrefix path the scheduler's extender config points at."""
    max_body_bytes: int = 8 << 20
    max_in_flight: int = 256
    """filter, prioritize and preempt calls served at once; more are refused at once."""
    max_held_binds: int = 1024
    """bind calls held at once (each may wait for its gang); more are refused at once."""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    metrics_listen: str = ""
    """host:port of an extra listener that serves only /metrics, so Prometheus can scrape the pod
    (e.g. ``0.0.0.0:9090``) while the verbs stay on loopback. Empty: /metrics on ``listen`` only."""


@dataclass(frozen=True)
class GrpcSettings:
    listen: str = "127.0.0.1:8889"
    """host:port of the gRPC API (verbs, PlanGang, ExplainPod, WatchGangs, health, reflection).
    Loopback by default, like the HTTP endpoint; empty turns the gRPC server off."""
    tls_cert_file: str = ""
    """Serve TLS with this certificate (PEM); re-read when the file changes. Empty: plaintext."""
    tls_key_file: str = ""
    client_ca_file: str = ""
    """mTLS: require client certificates signed by this CA (PEM). Needs the certificate and key."""
    max_workers: int = 64
    """Calls served at once (a held Bind or a WatchGangs stream keeps one); more get RESOURCE_EXHAUSTED."""
    max_message_bytes: int = 8 << 20
    """Largest request message accepted, as ``server.max_body_bytes``; larger get RESOURCE_EXHAUSTED."""


@dataclass(frozen=True)
class ViewSettings:
    listen: str = ""
    """host:port of the live topology view (docs/view.md), a read-only page on a port of its own.
    Empty (the default): no view."""
    refresh_seconds: float = 1.0
    """Each snapshot of the cache serves every viewer this long: the service lock is taken for
    the view at most once per period, however many browsers poll."""


@dataclass(frozen=True)
class Settings:
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    gangs: GangSettings = field(default_factory=GangSettings)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    grpc: GrpcSettings = field(default_factory=GrpcSettings)
    dra: DraSettings = field(default_factory=DraSettings)
    workloads: WorkloadSettings = field(default_factory=WorkloadSettings)
    view: ViewSettings = field(default_factory=ViewSettings)
    kubeconfig: str = ""
    """Empty: in-cluster configuration."""
    scheduler_config: str = ""
    """kube-scheduler's KubeSchedulerConfiguration, if readable: its extender httpTimeout is checked."""

    def validate(self) -> list[str]:
        problems = []
        if not _serves(self.server.listen):
            problems.append(f"server.listen must be HOST:PORT, got {self.server.listen!r}")
        if not self.server.prefix.startswith("/"):
            problems.append(f"server.prefix must start with '/', got {self.server.prefix!r}")
        for name in ("max_body_bytes", "max_in_flight", "max_held_binds"):
            if getattr(self.server, name) <= 0:
                problems.append(f"server.{name} must be positive")
        if bool(self.server.tls_cert_file) != bool(self.server.tls_key_file):
            problems.append("server.tls_cert_file and server.tls_key_file go together")
        if self.server.metrics_listen and not _serves(self.server.metrics_listen):
            problems.append(f"server.metrics_listen must be HOST:PORT or empty, got {self.server.metrics_listen!r}")
        if self.grpc.listen and not _serves(self.grpc.listen):
            problems.append(f"grpc.listen must be HOST:PORT or empty, got {self.grpc.listen!r}")
        if bool(self.grpc.tls_cert_file) != bool(self.grpc.tls_key_file):
            problems.append("grpc.tls_cert_file and grpc.tls_key_file go together")
        if self.grpc.client_ca_file and not self.grpc.tls_cert_file:
            problems.append("grpc.client_ca_file (mTLS) needs grpc.tls_cert_file and grpc.tls_key_file")
        if self.view.listen and not _serves(self.view.listen):
            problems.append(f"view.listen must be HOST:PORT or empty, got {self.view.listen!r}")
        if not 0.1 <= self.view.refresh_seconds <= 60:
            problems.append(f"view.refresh_seconds must be between 0.1 and 60, got {self.view.refresh_seconds:g}")
        if self.grpc.max_workers <= 0:
            problems.append("grpc.max_workers must be positive")
        if self.grpc.max_message_bytes <= 0:
            problems.append("grpc.max_message_bytes must be positive")
        if self.gangs.default_timeout_seconds <= 0:
            problems.append("gangs.default_timeout_seconds must be positive")
        if self.gangs.max_timeout_seconds < 0 or self.gangs.bind_margin_seconds < 0:
            problems.append("gangs.max_timeout_seconds and gangs.bind_margin_seconds must not be negative")
        elif 0 < self.gangs.max_timeout_seconds < self.gangs.default_timeout_seconds:
            problems.append(f"gangs.default_timeout_seconds ({self.gangs.default_timeout_seconds:g}) must not exceed "
                            f"gangs.max_timeout_seconds ({self.gangs.max_timeout_seconds:g})")
        if self.gangs.starvation_seconds < 0:
            problems.append("gangs.starvation_seconds must not be negative (0 turns the starvation bound off)")
        if self.gangs.recovery_grace_seconds < 0 or self.gangs.binding_pause_seconds < 0:
            problems.append("gangs.recovery_grace_seconds and gangs.binding_pause_seconds must not be negative")
        if not 0 < self.gangs.max_preferred_wait_seconds <= 86_400:
            problems.append(f"gangs.max_preferred_wait_seconds must be more than 0 and at most 86400 "
                            f"(a day), got {self.gangs.max_preferred_wait_seconds:g}")
        if self.gangs.settle_seconds < 0:
            problems.append("gangs.settle_seconds must be 0 or more")
        if self.gangs.bind_attempts < 1:
            problems.append("gangs.bind_attempts must be at least 1")
        if self.preemption.victim_wait_seconds <= 0:
            problems.append("preemption.victim_wait_seconds must be positive")
        if self.preemption.blocked_seconds < 0:
            problems.append("preemption.blocked_seconds must be 0 or more")
        if len(set(self.placement.levels)) != len(self.placement.levels):
            problems.append("placement.levels lists a key twice")
        if not all(self.placement.volcano_tiers) or len(set(self.placement.volcano_tiers)) != len(self.placement.volcano_tiers):
            problems.append("placement.volcano_tiers must list distinct, non-empty level keys")
        if not self.placement.gpu_resource:
            problems.append("placement.gpu_resource must not be empty")
        for entry in self.dra.topology_attributes:
            attribute, sep, label = entry.partition("=")
            if not sep or not attribute.strip() or not label.strip():
                problems.append(f"dra.topology_attributes entries must be ATTRIBUTE=LABEL, got {entry!r}")
        return problems

    def topology_attributes(self) -> tuple[tuple[str, str], ...]:
        """``dra.topology_attributes`` as (attribute, label) pairs."""
        pairs = (e.partition("=") for e in self.dra.topology_attributes)
        return tuple((a.strip(), lbl.strip()) for a, _, lbl in pairs)


def listen_address(text: str) -> tuple[str, int]:
    """A listen address ``HOST:PORT`` as (host, port), an IPv6 host's brackets removed
    (``[::1]:8888``); port 0 asks for any free port. ValueError when ``text`` is not one."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"not HOST:PORT: {text!r}")
    return host.strip("[]"), int(port)


def _serves(text: str) -> bool:
    """``text`` is a listen address with a port of its own (a configured port is never 0)."""
    try:
        return listen_address(text)[1] > 0
    except ValueError:
        return False


def from_mapping(data: Mapping[str, Any], base: Settings = Settings()) -> tuple[Settings, list[str]]:
    """Overlay a parsed YAML mapping on ``base``; unknown keys and wrong types are problems."""
    problems: list[str] = []

    def overlay(obj: Any, values: Any, path: str) -> Any:
        if not isinstance(values, Mapping):
            problems.append(f"{path or 'settings'} must be a mapping")
            return obj
        changes = {}
        fields = {f.name: f for f in dataclasses.fields(obj)}
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            if where in RETIRED:
                continue
            if key not in fields:
                problems.append(f"unknown setting {where}")
                continue
            current = getattr(obj, key)
            if dataclasses.is_dataclass(current):
                changes[key] = overlay(current, value, where)
            elif isinstance(current, tuple):
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    problems.append(f"{where} must be a list of strings")
                else:
                    changes[key] = tuple(value)
            elif isinstance(current, bool):
                if isinstance(value, bool):
                    changes[key] = value
                else:
                    problems.append(f"{where} must be true or false, got {value!r}")
            elif not isinstance(value, (type(current), int)) or isinstance(value, bool):
                problems.append(f"{where} must be a {type(current).__name__}, got {value!r}")
            else:
                changes[key] = type(current)(value)
        return dataclasses.replace(obj, **changes)

    settings = overlay(base, data or {}, "")
    return settings, problems


def deprecations(data: Mapping[str, Any]) -> list[str]:
    """A warning for every retired setting used in a settings mapping."""
    out = []
    for old, why in RETIRED.items():
        node: Any = data
        for part in old.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            out.append(f"setting {old} has no effect any more and is ignored: {why}")
    return out
