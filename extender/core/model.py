"""The facts the core works on, already translated from Kubernetes objects.

Everything here is a frozen value. Label keys appear only as opaque strings naming a level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HOST_LEVEL = "kubernetes.io/hostname"
"""The narrowest level is always the node itself."""


@dataclass(frozen=True)
class Level:
    """One grouping of the fabric, broadest levels first in a topology."""

    key: str
    """What the level is called in requests and results: a node label key, or a derived name."""
    name: str = ""
    """A short alias accepted in requests (``leaf``, ``nvlink``...)."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' matching rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if not self.key:  # an empty key is only valid with Exists
            return False
        return self.value == taint.value


BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates_all(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> bool:
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in taints
        if taint.effect in BLOCKING_EFFECTS
    )


@dataclass(frozen=True)
class NodeFacts:
    """A node as placement sees it."""

    name: str
    path: tuple[str | None, ...]
    """The node's value at each level of the topology, broadest first; None where the label is missing."""
    gpus: int
    """Allocatable GPUs."""
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class PodUsage:
    """A pod that holds GPUs on a node (assigned and not Succeeded/Failed)."""

    uid: str
    node: str
    gpus: int


@dataclass(frozen=True)
class Member:
    """One pod of a gang waiting for placement."""

    key: str
    """``<namespace>/<name>``"""
    gpus: int
    rank: tuple[int, ...] | None = None
    """Position in the job (e.g. JobSet (job index, completion index)); consecutive ranks sit close."""
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class GangSpec:
    """What a gang asks for. Built by the translator from pods and PodGroups."""

    key: str
    """``<namespace>/<group>``, or ``<namespace>/<pod>`` for a pod that names no group."""
    members: tuple[Member, ...]
    min_member: int
    timeout_seconds: float = 60.0
    required: str | None = None
    """Level key every member must share one domain of, or None."""
    preferred: str | None = None
    invalid: tuple[str, ...] = field(default=())
    """Problems with the request; a gang with any is not placed and these are its reason."""

    @property
    def gpu_members(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.gpus > 0)

    def demand(self) -> tuple[int, ...]:
        """GPUs per slot the gang needs, largest first, padded to min_member.

        Members not created yet are assumed to look like the most common GPU shape
        among those seen (a gang's pods usually come from one template).
        """
        sizes = sorted((m.gpus for m in self.members), reverse=True)
        missing = self.min_member - len(self.members)
        if missing > 0 and sizes:
            counts: dict[int, int] = {}
            for s in sizes:
                counts[s] = counts.get(s, 0) + 1
            common = max(counts, key=lambda s: (counts[s], s))
            sizes = sorted(sizes + [common] * missing, reverse=True)
        return tuple(sizes)
