"""The facts the core works on, already translated from Kubernetes objects at the door.

Everything here is a frozen value. Label keys appear only as opaque strings naming a level;
``extender.adapters.kubeobjects`` is the one module that knows which keys mean what.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

HOST_LEVEL = "kubernetes.io/hostname"
"""The narrowest level is always the node itself."""

FABRIC_LEVEL = "railyard.io/fabric"
"""The broadest level of a cluster whose node pools have different fabrics (label schemes or
depths): one domain per pool, each with its own tree below; a gang never spans two."""
OTHER_FABRIC = "~"
"""A node's value at a level of another pool's tree (no label value can be ``~``): the domain is
its parent's, a step the tree passes through, never a place of its own."""

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
    missing: str = ""
    """A placeholder value its labeler writes when it knows no domain; read as no label."""
    fabric: str = ""
    """The node pool whose tree the level belongs to (``NodeFacts.fabric``); empty: every node's."""

    def value(self, labels: Mapping[str, str]) -> str | None:
        """The node's domain at this level, None when the label is missing, empty or ``missing``."""
        if self.prefix_of:
            raw = labels.get(self.prefix_of)
            return raw.split(".", 1)[0] if raw else None
        raw = labels.get(self.key)
        return raw if raw and raw != self.missing else None


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


Resources = tuple[tuple[str, int], ...]
"""Resource amounts other than GPUs, sorted by name: ``cpu`` in millicores, everything else
(memory, ephemeral-storage, hugepages-*, pods, extended resources) in whole units."""

PODS = "pods"
"""Every pod takes one of a node's allocatable ``pods``."""


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
    allocatable: Resources = ()
    """Every other allocatable resource; one the node does not list is 0 (as kube-scheduler reads it)."""
    rails: tuple[tuple[str, int], ...] = ()
    """(rail, GPU devices on it not allocated to a claim), per rail the node's DRA GPU devices
    name (``dra.rail_attribute``); empty when unknown (``core.placement.rails``)."""
    fabric: str = ""
    """The node pool whose fabric labels the node carries, as the label adapter names it
    (``topograph-v1-3-tiers``, ``gke``...); empty when it carries none."""

    def path(self, levels: tuple[Level, ...]) -> tuple[str | None, ...]:
        """The node's value at each level, broadest first; None where the label is missing,
        ``OTHER_FABRIC`` at a level of another pool's tree."""
        return tuple(self._value(lvl) for lvl in levels)

    def _value(self, lvl: Level) -> str | None:
        if lvl.key == FABRIC_LEVEL:
            return self.fabric or None
        if lvl.fabric and lvl.fabric != self.fabric:
            return OTHER_FABRIC
        return lvl.value(self.labels)


@dataclass(frozen=True)
class PodUsage:
    """What a pod assigned to a node (and not Succeeded/Failed) takes of it."""

    uid: str
    node: str
    gpus: int
    requests: Resources = ()
    """Its other requests, the pod itself (``pods``: 1) included."""


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement (``matchExpressions`` or ``matchFields`` entry)."""

    key: str
    operator: str
    """In, NotIn, Exists, DoesNotExist, Gt, Lt."""
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class SelectorTerm:
    """A ``nodeSelectorTerm``: every requirement holds (an empty term matches no node)."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    """``matchFields``: only ``metadata.name`` is a field nodes have."""


@dataclass(frozen=True)
class Eligibility:
    """Where a pod may run, as kube-scheduler's NodeAffinity, TaintToleration and
    NodeResourcesFit filters decide it (hashable: members with equal ones share a plan class)."""

    node_selector: tuple[tuple[str, str], ...] = ()
    required: tuple[SelectorTerm, ...] | None = None
    """Required node affinity: any term matches; None when the pod states none."""
    preferred: tuple[tuple[int, SelectorTerm], ...] = ()
    """(weight, term): breaks ties between otherwise equal choices."""
    tolerations: tuple[Toleration, ...] = ()
    requests: Resources = ((PODS, 1),)
    """Non-GPU requests, the pod itself included."""


@dataclass(frozen=True)
class GangRef:
    """Which gang a pod belongs to."""

    key: str
    """``<namespace>/<group>``, or ``<namespace>/<pod>`` for a pod that names no group."""
    named: bool
    """The pod names a group; False: it is a gang of one."""
    group_kind: str = ""
    """Which kind of group object the pod's convention names (an opaque name the adapters
    give each API, e.g. ``podgroups``); empty: its convention has no group object."""
    lineage: str = ""
    """The workload the gang is one instance of, shared by its restart attempts (a JobSet's
    ``<namespace>/<name>``); empty: the gang is its own lineage (``key``)."""
    group: str = ""
    """``<namespace>/<name>`` of the group object the pod reads, when it is not ``key`` (every
    restart attempt of a JobSet reads the one JobSet); empty: ``key``."""
    workload: str = ""
    """The workload the adapters found the gang from, as operators name it (``JobSet ml/train
    attempt 1``); empty: the pod names its group itself."""
    pod_group_cycle: bool = False
    """The pod names a Workload-API PodGroup (``spec.schedulingGroup``): kube-scheduler schedules
    it in a pod-group cycle, which never calls an extender's preempt verb, so railyard preempts
    for its gang from filter."""

    @property
    def group_id(self) -> tuple[str, str] | None:
        """The key of the group object this pod reads (``GroupFacts.id``), or None."""
        return (self.group_kind, self.group or self.key) if self.group_kind else None


MIN_MEMBER, TIMEOUT, REQUIRED, PREFERRED = "min_member", "timeout", "required", "preferred"
SLICE_SIZE, SLICE_LEVEL = "slice_size", "slice_level"
LEAD_SIZE = "lead_size"
"""How many lead members (``PodFacts.lead``) the gang binds before the others can exist."""
EXCLUSIVE = "exclusive"
"""Each part of the gang (``PodFacts.part``) inside a domain of its own: the value is
``(level key, GPU pods per part)``; no two parts share a domain of that level."""
PREFERRED_WAIT = "preferred_wait"
"""Seconds the gang waits for its preferred level before it accepts a wider domain."""
EXCLUSIVE_DOMAIN = "exclusive_domain"
"""The level at which every domain the gang uses is the gang's alone."""
RANK_LAYOUT = "rank_layout"
"""How a workload numbers its pods (Job, index in the Job): ``((Jobs, pods per Job), ...)`` in
global Job index order (a JobSet's replicatedJobs), so each pod's place in the gang is known
before the pods before it exist (``packing.position``)."""
ROLES = (MIN_MEMBER, TIMEOUT, REQUIRED, PREFERRED, SLICE_SIZE, SLICE_LEVEL, LEAD_SIZE, PREFERRED_WAIT, EXCLUSIVE,
         EXCLUSIVE_DOMAIN, RANK_LAYOUT)


@dataclass(frozen=True)
class Declaration:
    """A gang-level value that a pod or its group declares: its size, timeout, topology or slices."""

    role: str
    """One of ``ROLES``."""
    source: str
    """Where it was read, as operators name it (``railyard.io/min-member``,
    ``PodGroup ml/g spec.minMember``)."""
    value: object
    """The raw value (a string from an annotation; any JSON value from a PodGroup)."""
    precedence: int
    """Lower wins when several sources declare the same role."""


PREEMPT_LOWER, PREEMPT_NEVER = "PreemptLowerPriority", "Never"
"""The values of ``spec.preemptionPolicy`` (k8s.io/api/core/v1 PreemptionPolicy)."""


@dataclass(frozen=True)
class BindingMark:
    """A member of a Binding round, as railyard records it on the pod before any Binding of the
    round is created: what a restarted process or another replica needs to finish the round or
    undo it (``core.gangs.recovery``)."""

    round: str
    """Unique per round (a gang's Bindings that go out together)."""
    node: str
    """The node the member is bound to in that round."""
    size: int
    """How many members the round binds."""
    address: "Address | None" = None
    """Where the plan put the member (rank, slice, domain per level), for its launcher to read."""


@dataclass(frozen=True)
class Place:
    """A member's domain at one level."""

    level: str
    """The level's key (a node label key)."""
    name: str
    """The level's short name (``leaf``, ``nvlink``...), else the last part of its key."""
    domain: str
    """The domain's whole path from the broadest level, ``s1/l2``: a value repeated under two
    parents is two domains."""


@dataclass(frozen=True)
class Address:
    """Where a gang member sits in its plan (``core.placement.address``)."""

    pod: str
    """``<namespace>/<name>``; ``<gang>#<n>`` for a member not created yet."""
    node: str
    rank: int | None
    slice: int | None
    """None when the gang is not sliced."""
    domains: tuple[Place, ...]
    """Broadest first; a level whose label the node lacks is left out."""
    rails: tuple[str, ...] = ()
    """The rails planned for the member's GPUs (``core.placement.rails``); empty when not rail-aligned."""


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
class PodRef:
    """A pod as the API server's writes name it: by namespace and name, and by uid, so that a
    pod recreated under the same name is refused, not touched."""

    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, key: str, uid: str) -> PodRef:
        """From a pod key ``<namespace>/<name>``."""
        namespace, _, name = key.partition("/")
        return cls(namespace, name, uid)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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
    """The effective GPU request, as Kubernetes computes it; once ``core.devices.ledger`` sized the
    pod, plus the GPUs its ResourceClaims ask for."""
    rank: tuple[int, ...] | None = None
    declarations: tuple[Declaration, ...] = ()
    eligibility: Eligibility = Eligibility()
    """Node selector, affinity, tolerations and non-GPU requests."""
    problems: tuple[str, ...] = ()
    """Values of the pod the translator could not read (a quantity, a selector): its gang is
    not planned and these are the reason."""
    binding: "BindingMark | None" = None
    """What railyard wrote on the pod before creating its Binding (a Binding round)."""
    key: str = field(init=False, repr=False)
    """``<namespace>/<name>``"""
    claims: tuple[PodClaim, ...] = ()
    """The pod's ``spec.resourceClaims`` (DRA), sized by ``core.devices.ledger``."""
    priority: int = 0
    """``spec.priority``: the API server resolves ``priorityClassName`` into it at admission
    (0 when the pod names no class and the cluster has no global default)."""
    preemption_policy: str = PREEMPT_LOWER
    """``spec.preemptionPolicy``: ``PreemptLowerPriority`` (the default) or ``Never``."""
    lead: bool = False
    """The pod's controller creates (or starts) other members of its gang only once this one is
    bound: a JobSet exclusive-placement leader, a LeaderWorkerSet leader that starts first."""
    told_rank: int | None = None
    """The rank railyard wrote on the pod when it bound it (``railyard.io/rank``), read back: a
    replacement takes the rank no running member holds."""
    told_rails: tuple[str, ...] = ()
    """The rails railyard wrote on the pod when it bound it (``railyard.io/rails``), read back: a
    replacement is given the rail set of the running members."""
    part: int | None = None
    """Which part of its gang the pod belongs to (a JobSet pod's Job, by global index): in a
    gang whose parts are placed exclusively (``EXCLUSIVE``), its slice. None: no part."""
    gated: bool = False
    """``spec.schedulingGates`` holds railyard's gate: kube-scheduler tries the pod only once
    railyard lifts it, for the whole gang at once (``service.release``)."""
    held_by: tuple[str, ...] = ()
    """Other components' scheduling gates on the pod (Kueue's admission gate...): railyard
    plans its gang only once they are gone."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES

    @property
    def usage(self) -> PodUsage | None:
        """What the pod takes of its node, or None while unassigned or finished."""
        if not self.node or self.finished:
            return None
        return PodUsage(self.uid or self.key, self.node, self.gpus, self.eligibility.requests)


@dataclass(frozen=True)
class GroupFacts:
    """A pod group object (a PodGroup), whatever project's API it comes from."""

    key: str
    """``<namespace>/<name>``: the gang key of the pods that name it."""
    declarations: tuple[Declaration, ...] = ()
    kind: str = ""
    """Which API the object comes from (``GangRef.group_kind`` of the pods that read it): two
    conventions' objects with the same namespace and name are different groups."""
    problems: tuple[str, ...] = ()
    """What the object asks that railyard cannot honour; a gang reading it is not placed."""

    @property
    def id(self) -> tuple[str, str]:
        return (self.kind, self.key)


@dataclass(frozen=True)
class Member:
    """One pod of a gang waiting for placement."""

    key: str
    """``<namespace>/<name>``"""
    gpus: int
    rank: tuple[int, ...] | None = None
    """Position in the job (e.g. JobSet (job index, completion index)); consecutive ranks sit close."""
    eligibility: Eligibility = Eligibility()
    lead: bool = False
    """``PodFacts.lead``: binds before the members its controller has not created yet."""
    part: int | None = None
    """``PodFacts.part``: the slice of an exclusive gang the member belongs in."""


@dataclass(frozen=True)
class GangSpec:
    """What a gang asks for, built from its members and group (``core.gangs.gangspec``)."""

    key: str
    members: tuple[Member, ...]
    min_member: int
    timeout_seconds: float
    required: str | None = None
    """Level key every member must share one domain of, or None."""
    preferred: str | None = None
    slice_size: int = 0
    """GPU pods per slice (0: not sliced): each run of this many consecutive ranks shares one
    domain of ``slice_level``."""
    slice_level: str | None = None
    exclusive: bool = False
    """Slices are the gang's parts (``Member.part``: part k is slice k), each in a domain of
    ``slice_level`` of its own, no two in one (JobSet exclusive placement)."""
    invalid: tuple[str, ...] = field(default=())
    """Problems with the request; a gang with any is not placed and these are its reason."""
    sized: bool = True
    """The size is declared somewhere; False: the gang is the members seen, and may grow."""
    timeout_capped_from: float | None = None
    """The timeout the gang asked for, when it was capped to ``timeout_seconds``."""
    lineage: str = ""
    """``GangRef.lineage``: the workload this gang is one (restart) instance of; empty: ``key``."""
    lead_size: int = 0
    """Lead members that bind first, into their reserved slots, before the others exist
    (``LEAD_SIZE``); 0: every member binds at once."""
    ranks: tuple[tuple[str, int], ...] = ()
    """A round beside running members (replacements): each GPU member's rank in the whole gang,
    the running ones' included, in the first round's order (``core.placement.address``)."""
    gang_slice_size: int = 0
    """The whole gang's slice size, kept for such a round's addresses (it is planned unsliced)."""
    rail_set: tuple[str, ...] = ()
    """A round beside running members of a rail-aligned gang: the rail set they were given
    (``core.placement.rails``), which the new members get where it is free on their nodes."""
    size_from: str = ""
    """Where the size was read (the chosen ``Declaration.source``); empty: the members seen."""
    preferred_wait_seconds: float = 0.0
    """How long the gang waits, holding nothing, for a domain of ``preferred`` before it accepts
    a wider one (``PREFERRED_WAIT``); 0: it accepts one at once."""
    preferred_wait_capped_from: float | None = None
    """The wait the gang asked for, when it was capped to ``preferred_wait_seconds``."""
    exclusive_domain: str | None = None
    """Level key or name: every domain of it that holds a member holds no other GPU pod, from
    the gang's plan until its last pod ends (``EXCLUSIVE_DOMAIN``); None: it shares domains."""
    rank_layout: tuple[tuple[int, int], ...] = ()
    """``RANK_LAYOUT``: places a (Job, index in the Job) rank in the gang; empty: only one-part
    ranks have a place (``packing.position``)."""

    def demand(self) -> tuple[int, ...]:
        """GPUs per slot the gang needs, largest first, padded to min_member."""
        return tuple(sorted((gpus for gpus, _ in self.slots()), reverse=True))

    def slots(self) -> list[tuple[int, Eligibility]]:
        """(GPUs, eligibility) per slot the gang needs, members first, padded to min_member.

        Members not created yet are assumed to look like the most common member among those
        seen (a gang's pods usually come from one template).
        """
        shapes = [(m.gpus, m.eligibility) for m in self.members]
        missing = self.min_member - len(self.members)
        if missing > 0 and shapes:
            counts: dict[tuple[int, Eligibility], int] = {}
            for shape in shapes:
                counts[shape] = counts.get(shape, 0) + 1
            common = max(counts, key=lambda sh: (counts[sh], sh[0]))
            shapes += [common] * missing
        return shapes
