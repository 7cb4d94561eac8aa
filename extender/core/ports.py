"""The ports: what the core and the service need from the world, as Protocols, named in
Kubernetes' own words (Bindings, evictions, Events, ResourceClaims).

``app.py`` wires them (``Ports``): Bindings, Gates, Evictions, Events and Claims ->
``adapters/k8s/binder.KubeBinder`` (one client to the API server), Observer ->
``adapters/metrics.Metrics``, LabelScheme -> ``adapters/kubeobjects.SCHEME``. Defining an
interface does no I/O; the implementations live in the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, Sequence

from extender.core.model import BindingMark, LevelChoice, NodeFacts, PodFacts, PodRef


class Bindings(Protocol):
    """Binding pods to nodes, each pod marked with its Binding round first. Calls block; the
    service retries. Per pod, in order, None or the error (its message carries the API
    server's words)."""

    def bind_all(self, bindings: Sequence[tuple[PodRef, str]]) -> Sequence[Exception | None]:
        """Create the Binding of every (pod, node) at once."""
    def bind_async(self, pod: PodRef, node: str) -> Awaitable[Exception | None]:
        """One Binding, awaited on the caller's event loop instead of blocking a thread."""
    def mark_all(self, marks: Sequence[tuple[PodRef, BindingMark]]) -> Sequence[Exception | None]:
        """Record on every pod, if it still has its uid, the Binding round it is about to be
        bound in."""


class Gates(Protocol):
    """Lifting railyard's scheduling gate from gang members, each first nominated to its planned
    node; nominating gated members. Calls block. Per pod, in order, None or the error."""

    def release_all(self, pods: Sequence[tuple[PodRef, str]]) -> Sequence[Exception | None]:
        """For every (pod, node), if the pod still has its uid: write ``node`` as its
        ``status.nominatedNodeName`` (none when ``node`` is empty), then remove the gate."""
    def nominate_all(self, pods: Sequence[tuple[PodRef, str]]) -> Sequence[Exception | None]:
        """For every (pod, node), if the pod still has its uid: write ``node`` as its
        ``status.nominatedNodeName`` (clear it when ``node`` is empty); the gate stays."""


class Evictions(Protocol):
    """Taking pods off their nodes. Calls block."""

    def evict(self, pod: PodRef, dry_run: bool = False) -> str | None:
        """Evict honouring PodDisruptionBudgets (the Eviction API): None when evicted (or gone),
        else why it was refused (a budget allows no disruption now); raises on other failures."""
    def delete_pod(self, pod: PodRef) -> None:
        """Delete the pod if it still has its uid (a gang's bound members, so it restarts
        whole). Raises on failure."""


class Events(Protocol):
    def event(self, pod: PodFacts, reason: str, message: str, type_: str = "Warning") -> None:
        """A Kubernetes Event on the pod. Never blocks; rate-limited by the implementation."""


class Claims(Protocol):
    def deallocate_claim(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        """Clear a ResourceClaim's allocation if it is still at ``resource_version``, as
        kube-scheduler's DRA PostFilter does. Never blocks."""


class Observer(Protocol):
    """Domain events the core and the service report (metrics)."""

    def gang_finished(self, outcome: str) -> None: ...
    def gang_time_to_bind(self, seconds: float) -> None: ...
    def reservations(self, gangs: int, gpus: int) -> None: ...
    def plan_seconds(self, seconds: float) -> None: ...
    def binding_failed(self) -> None: ...
    def pods_forgotten(self, n: int) -> None:
        """Pods only filter had seen (the watch never showed them) were forgotten."""


class NullObserver:
    """An Observer that records nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        def ignore(*args: Any, **kwargs: Any) -> None:
            return None
        return ignore


class LabelScheme(Protocol):
    """Which node labels name topology levels (the label presets)."""

    def detect(self, nodes: Sequence[NodeFacts]) -> LevelChoice:
        """Levels for a cluster of these nodes (from their labels), broadest first."""

    def schemes_of(self, node: NodeFacts) -> frozenset[str]:
        """The presets one node's labels belong to, and its pool (a new one means: detect again)."""

    def explicit(self, keys: Sequence[str]) -> LevelChoice:
        """Levels named by the user (``--levels``), broadest first."""


@dataclass(frozen=True)
class Ports:
    """Every port the live service uses, as ``app.py`` wires them."""

    bindings: Bindings
    evictions: Evictions
    events: Events
    claims: Claims
    scheme: LabelScheme
    observer: Observer = field(default_factory=NullObserver)
    gates: Gates | None = None
    """None: no gate is ever lifted (gang members are then created without one: no admission
    policy, as in unit tests)."""
