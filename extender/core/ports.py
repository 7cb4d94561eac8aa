"""The ports: what the core and the service need from the world, as Protocols.

``app.py`` wires them: Binder -> ``adapters/k8s/binder.KubeBinder``, Observer ->
``adapters/metrics.Metrics``, LabelScheme -> ``adapters/kubeobjects.SCHEME``. Defining an
interface does no I/O; the implementations live in the adapters.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from extender.core.model import BindingMark, LevelChoice, NodeFacts, PodFacts


class Binder(Protocol):
    """Writes to the API server. Calls block; the service retries."""

    def bind_all(self, bindings: Sequence[tuple[str, str, str, str]]) -> Sequence[Exception | None]:
        """Create every (namespace, name, uid, node) Binding at once; per Binding None or the
        error (its message carries the API server's words)."""
    def mark_all(self, marks: Sequence[tuple[str, str, str, BindingMark]]) -> Sequence[Exception | None]:
        """Record on every (namespace, name, uid) pod, if it still has that uid, the Binding round
        it is about to be bound in; per pod None or the error."""
    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Raises on failure."""
    def evict(self, namespace: str, name: str, uid: str, dry_run: bool = False) -> str | None:
        """Evict honouring PodDisruptionBudgets: None when evicted (or gone), else why it was
        refused (a budget allows no disruption now); raises on other failures."""
    def event(self, pod: PodFacts, reason: str, message: str, type_: str = "Warning") -> None:
        """Never blocks; rate-limited by the implementation."""
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
        return lambda *args, **kwargs: None


class LabelScheme(Protocol):
    """Which node labels name topology levels (the label presets)."""

    def detect(self, nodes: Sequence[NodeFacts]) -> LevelChoice:
        """Levels for a cluster of these nodes (from their labels), broadest first."""

    def schemes_of(self, node: NodeFacts) -> frozenset[str]:
        """The presets one node's labels belong to (a new one means: detect again)."""

    def explicit(self, keys: Sequence[str]) -> LevelChoice:
        """Levels named by the user (``--levels``), broadest first."""
