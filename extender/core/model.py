"""The facts the core works on, already translated from Kubernetes objects at the door.

Everything here is a frozen value. Label keys appear only as opaque strings naming a level;
``extender.adapters.kubeobjects`` is the one module that knows which keys mean what.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

HOST_LEVEL = "kubernetes.io/hostname"
"""The narrowest level is always the node itself."""

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Level:
    """One grouping of the fabric, broadest levels first in a topology."""

    key: str
    """What the level is called in requests and results: a node label key, or a derived name."""
    name: str = ""
    """A short alias accepted in requests (``leaf``, ``nvlink``...)."""
    prefix_of: str = ""
    """A derived level: its value is the part before the first ``.`` of this label's value
    (the ClusterUUID of ``<ClusterUUID>.<CliqueID>``). Empty: the value of label ``key``."""

    def value(self, labels: Mapping[str, str]) -> str | None:
        """The node's domain at this level, None when the label is missing or empty."""
        if self.prefix_of:
            raw = labels.get(self.prefix_of)
            return raw.split(".", 1)[0] if raw else None
        return labels.get(self.key) or None


@dataclass(frozen=True)
class LevelChoice:
    """The levels found for a cluster, and what was noticed choosing them."""

    levels: tuple[Level, ...]
    preset: str | None
    problems: tuple[str, ...] = ()


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
    labels: Mapping[str, str] = field(default_factory=dict, compare=True)
    """The node's labels (read-only): its topology path is computed from them per level."""
    gpus: int = 0
    """Allocatable GPUs."""
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()

    def path(self, levels: tuple[Level, ...]) -> tuple[str | None, ...]:
        """The node's value at each level, broadest first; None where the label is missing."""
        return tuple(lvl.value(self.labels) for lvl in levels)


@dataclass(frozen=True)
class PodUsage:
    """A pod that holds GPUs on a node (assigned and not Succeeded/Failed)."""

    uid: str
    node: str
    gpus: int


@dataclass(frozen=True)
class GangRef:
    """Which gang a pod belongs to."""

    key: str
    """``<namespace>/<group>``, or ``<namespace>/<pod>`` for a pod that names no group."""
    named: bool
    """The pod names a group; False: it is a gang of one."""


MIN_MEMBER, TIMEOUT, REQUIRED, PREFERRED = "min_member", "timeout", "required", "preferred"
ROLES = (MIN_MEMBER, TIMEOUT, REQUIRED, PREFERRED)


@dataclass(frozen=True)
class Declaration:
    """A gang-level value that a pod or its group declares: its size, timeout or topology."""

    role: str
    """One of ``ROLES``."""
    source: str
    """Where it was read, as operators name it (``railyard.io/min-member``,
    ``PodGroup ml/g spec.minMember``)."""
    value: object
    """The raw value (a string from an annotation; any JSON value from a PodGroup)."""
    precedence: int
    """Lower wins when several sources declare the same role."""


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: a ResourceClaim by name, or a template."""

    name: str
    """The entry's name in the pod."""
    claim: str = ""
    """The ResourceClaim's name: ``resourceClaimName``, or the claim made from the template as
    ``status.resourceClaimStatuses`` names it; empty until that claim exists."""
    template: str = ""
    """``resourceClaimTemplateName``, or empty."""


@dataclass(frozen=True)
class PodFacts:
    """A pod, translated once where it enters (watch event, extender call, file)."""

    namespace: str
    name: str
    uid: str
    gang: GangRef
    node: str = ""
    """``spec.nodeName``; empty while unbound."""
    phase: str = ""
    gpus: int = 0
    """The effective GPU request, as Kubernetes computes it; once ``core.ledger`` sized the
    pod, plus the GPUs its ResourceClaims ask for."""
    rank: tuple[int, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    declarations: tuple[Declaration, ...] = ()
    key: str = field(init=False, repr=False)
    """``<namespace>/<name>``"""
    claims: tuple[PodClaim, ...] = ()
    """The pod's ``spec.resourceClaims`` (DRA), sized by ``core.ledger``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    @property
    def usage(self) -> PodUsage | None:
        """The GPUs the pod holds on its node, or None if it holds none."""
        if not self.node or self.finished or self.gpus <= 0:
            return None
        return PodUsage(self.uid or self.key, self.node, self.gpus)


@dataclass(frozen=True)
class GroupFacts:
    """A pod group object (a PodGroup), whatever project's API it comes from."""

    key: str
    """``<namespace>/<name>``: the gang key of the pods that name it."""
    declarations: tuple[Declaration, ...] = ()


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
    """What a gang asks for, built from its members and group (``core.gangspec``)."""

    key: str
    members: tuple[Member, ...]
    min_member: int
    timeout_seconds: float
    required: str | None = None
    """Level key every member must share one domain of, or None."""
    preferred: str | None = None
    invalid: tuple[str, ...] = field(default=())
    """Problems with the request; a gang with any is not placed and these are its reason."""
    sized: bool = True
    """The size is declared somewhere; False: the gang is the members seen, and may grow."""

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
