"""The DRA ledger: DeviceClasses, ResourceSlices, ResourceClaims and their templates, kept as
facts (``core.devices.facts``) and turned into the numbers the rest of the core works on.

- Capacity: a node with allocatable GPUs keeps them (device plugin); a node with none gets
  the GPU devices published for it (the newest generation of each pool), and the labels
  ``dra.topology_attributes`` derive from attributes all its GPUs share.
- Usage: a ResourceClaim's allocated GPU devices are usage on their node, as a record of its
  own in ``ClusterState`` (uid ``claim:<ns>/<name>``), minus what a holder counts: a pod bound
  on that node that owns the claim or is in its ``reservedFor`` already counts its GPUs
  (request + claims), so its claims are credited against that count, in claim-key order,
  never beyond it. So no device is counted twice, and a claim nobody bound holds (a pod in
  PreBind, a leftover) still counts.
- Demand: a pod's GPUs = its GPU request + the GPU requests of the claims and templates it
  references; a pod whose claims railyard cannot size is answered with a reason.

Not thread-safe: the service serialises access.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping

from extender.core.devices.facts import (
    ClaimFacts,
    ClaimTemplateFacts,
    DeviceClassFacts,
    DeviceFacts,
    DeviceId,
    DraFacts,
    SliceFacts,
    gpu_request_names,
    qualified,
    requests_gpus,
    selects,
)
from extender.core.model import NodeFacts, PodFacts, PodUsage
from extender.core.cluster.pods import PodIndex
from extender.core.cluster.state import ClusterState

CLAIM_USAGE = "claim:"
"""Prefix of the usage records of claims in ``ClusterState``."""


@dataclass
class Changes:
    """What a DRA change touches: nodes whose GPUs or labels may differ, claims whose usage
    must be counted again, pods whose GPUs must be sized again."""

    nodes: set[str] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)
    pods: set[str] = field(default_factory=set)

    def __ior__(self, other: Changes) -> Changes:
        self.nodes |= other.nodes
        self.claims |= other.claims
        self.pods |= other.pods
        return self


class DeviceLedger:
    def __init__(self, gpu_resource: str, device_classes: Iterable[str] = (), rail_attribute: str = "",
                 topology_attributes: Iterable[tuple[str, str]] = ()) -> None:
        self.gpu_resource = gpu_resource
        self.named_classes = frozenset(device_classes)
        self.rail_attribute = rail_attribute
        self.topology_attributes = tuple(topology_attributes)
        self.classes: dict[str, DeviceClassFacts] = {}
        self.slices: dict[str, SliceFacts] = {}
        self.claims: dict[str, ClaimFacts] = {}
        self.templates: dict[str, ClaimTemplateFacts] = {}
        self._gpu_classes: frozenset[str] = self.named_classes
        self._raw_nodes: dict[str, NodeFacts] = {}
        self._pool_slices: dict[tuple[str, str], set[str]] = {}
        self._pool_devices: dict[tuple[str, str], dict[DeviceId, tuple[str, DeviceFacts]]] = {}
        self._node_gpus: dict[str, dict[DeviceId, DeviceFacts]] = {}
        self._device_node: dict[DeviceId, str] = {}
        self._sizes: dict[int, int] = {}
        self._held_by: dict[str, set[str]] = {}
        self._pool_claims: dict[tuple[str, str], set[str]] = {}
        self._used: dict[DeviceId, str] = {}
        self.users = PodClaims()

    # -- facts in -----------------------------------------------------------------------------

    def upserted(self, facts: DraFacts) -> Changes:
        return self._put(facts, deleted=False)

    def deleted(self, facts: DraFacts) -> Changes:
        return self._put(facts, deleted=True)

    def relisted(self, kind: type, objects: Iterable[DraFacts]) -> Changes:
        """Replace every object of one kind (``DeviceClassFacts``, ``SliceFacts``...)."""
        changes = Changes()
        store = self._store(kind)
        for old in list(store.values()):
            changes |= self.deleted(old)
        for obj in objects:
            if isinstance(obj, kind):
                changes |= self.upserted(obj)
        return changes

    def _store(self, kind: type) -> Mapping[str, DraFacts]:
        stores: dict[type, Mapping[str, DraFacts]] = {DeviceClassFacts: self.classes, SliceFacts: self.slices,
                                                      ClaimFacts: self.claims, ClaimTemplateFacts: self.templates}
        return stores[kind]

    def _put(self, facts: DraFacts, deleted: bool) -> Changes:
        changes = Changes()
        if isinstance(facts, DeviceClassFacts):
            self.classes.pop(facts.name, None) if deleted else self.classes.__setitem__(facts.name, facts)
            gpu = self.named_classes | {c.name for c in self.classes.values()
                                        if c.extended_resource == self.gpu_resource}
            self._gpu_classes = frozenset(gpu)
            for pool in list(self._pool_slices):
                changes.nodes |= self._recount_pool(pool)
            changes.claims |= set(self.claims)
            changes.pods |= set(self.users.pods)
        elif isinstance(facts, SliceFacts):
            old = self.slices.pop(facts.name, None)
            pools = {(old.driver, old.pool)} if old else set()
            if old:
                self._pool_slices[(old.driver, old.pool)].discard(old.name)
            if not deleted:
                self.slices[facts.name] = facts
                self._pool_slices.setdefault((facts.driver, facts.pool), set()).add(facts.name)
                pools.add((facts.driver, facts.pool))
            largest = self.largest_node()
            for pool in pools:
                changes.nodes |= self._recount_pool(pool)
                changes.claims |= self._pool_claims.get(pool, set())  # their GPUs may be these devices
            if self.largest_node() != largest:  # what allocationMode All counts
                changes.pods |= set(self.users.pods)
        elif isinstance(facts, ClaimFacts):
            held = self.claims.pop(facts.key, None)
            if held is not None:
                self._unindex_claim(held)
                changes.claims |= self._claims_sharing(held)
            if not deleted:
                self.claims[facts.key] = facts
                self._index_claim(facts)
                changes.claims |= self._claims_sharing(facts)
            for c in (held, None if deleted else facts) if self.rail_attribute else ():  # free rails change
                changes.nodes |= {n for d in c.allocated if (n := self._device_node.get(d.id))} if c else set()
            changes.claims.add(facts.key)
            changes.pods |= self.users.by_ref.get("claim:" + facts.key, set())
        else:
            self.templates.pop(facts.key, None) if deleted else self.templates.__setitem__(facts.key, facts)
            changes.pods |= self.users.by_ref.get("template:" + facts.key, set())
        return changes

    # -- capacity -----------------------------------------------------------------------------

    def _recount_pool(self, pool: tuple[str, str]) -> set[str]:
        touched = set()
        for dev_id, (node, _) in self._pool_devices.pop(pool, {}).items():
            touched.add(node)
            self._resize(node, -1)
            self._node_gpus.get(node, {}).pop(dev_id, None)
            if not self._node_gpus.get(node):
                self._node_gpus.pop(node, None)
            self._device_node.pop(dev_id, None)
        names = self._pool_slices.get(pool, set())
        slices = [self.slices[n] for n in names]
        if not slices:
            self._pool_slices.pop(pool, None)
            return touched
        newest = max(s.generation for s in slices)
        devices: dict[DeviceId, tuple[str, DeviceFacts]] = {}
        classes = [c for c in self.classes.values() if c.name in self._gpu_classes]
        for s in slices:
            if s.generation != newest or not s.node:
                continue
            for d in s.devices:
                if any(selects(c, s.driver, d) for c in classes):
                    devices[(s.driver, s.pool, d.name)] = (s.node, d)
        for dev_id, (node, d) in devices.items():
            touched.add(node)
            self._resize(node, +1)
            self._node_gpus.setdefault(node, {})[dev_id] = d
            self._device_node[dev_id] = node
        self._pool_devices[pool] = devices
        return touched

    def _resize(self, node: str, delta: int) -> None:
        """Keep ``_sizes`` (nodes per GPU-device count) up to date as one device comes or goes."""
        before = len(self._node_gpus.get(node, ()))
        for size, step in ((before, -1), (before + delta, +1)):
            if size > 0:
                self._sizes[size] = self._sizes.get(size, 0) + step
                if not self._sizes[size]:
                    del self._sizes[size]

    def gpus(self, node: str) -> int:
        """GPU devices published for the node."""
        return len(self._node_gpus.get(node, ()))

    def largest_node(self) -> int:
        """The most GPU devices any node publishes (what ``allocationMode: All`` is sized as)."""
        return max(self._sizes, default=0)

    def node_seen(self, raw: NodeFacts) -> NodeFacts:
        """Remember the node as its watch shows it; return it as placement sees it."""
        self._raw_nodes[raw.name] = raw
        return self.effective(raw)

    def node_gone(self, name: str) -> None:
        self._raw_nodes.pop(name, None)

    def nodes_relisted(self, raws: Iterable[NodeFacts]) -> list[NodeFacts]:
        self._raw_nodes = {n.name: n for n in raws}
        return [self.effective(n) for n in self._raw_nodes.values()]

    def raw_node(self, name: str) -> NodeFacts | None:
        return self._raw_nodes.get(name)

    def raw_nodes(self) -> Iterable[NodeFacts]:
        return self._raw_nodes.values()

    @property
    def gpu_classes(self) -> frozenset[str]:
        """Names of the DeviceClasses whose devices are GPUs."""
        return self._gpu_classes

    def effective(self, raw: NodeFacts) -> NodeFacts:
        """Allocatable GPUs win; else the node's GPU devices, and the labels their attributes give."""
        devices = self._node_gpus.get(raw.name)
        if raw.gpus > 0 or not devices:
            return raw
        derived = {}
        for attribute, label in self.topology_attributes:
            values = {d.attributes.get(qualified(attribute, driver)) for (driver, _, _), d in devices.items()}
            if len(values) == 1 and None not in values and label not in raw.labels:
                derived[label] = str(values.pop())
        labels = {**raw.labels, **derived} if derived else raw.labels
        rails = tuple(sorted((rail, total - used) for rail, (total, used) in self.rails(raw.name).items()))
        return replace(raw, gpus=len(devices), labels=labels, rails=rails)

    def rails(self, node: str) -> dict[str, tuple[int, int]]:
        """Per rail (``dra.rail_attribute``): (GPU devices, of them allocated) on the node."""
        out: dict[str, tuple[int, int]] = {}
        if not self.rail_attribute:
            return out
        for dev_id, d in self._node_gpus.get(node, {}).items():
            rail = d.attributes.get(qualified(self.rail_attribute, dev_id[0]))
            if rail is None:
                continue
            total, used = out.get(str(rail), (0, 0))
            out[str(rail)] = (total + 1, used + (dev_id in self._used))
        return out

    # -- usage --------------------------------------------------------------------------------

    def _index_claim(self, c: ClaimFacts) -> None:
        for uid in c.holders:
            self._held_by.setdefault(uid, set()).add(c.key)
        for d in c.allocated:
            self._pool_claims.setdefault((d.driver, d.pool), set()).add(c.key)
            if not d.admin:
                self._used[d.id] = c.key

    def _unindex_claim(self, c: ClaimFacts) -> None:
        for uid in c.holders:
            keys = self._held_by.get(uid)
            if keys is not None:
                keys.discard(c.key)
                if not keys:
                    del self._held_by[uid]
        for d in c.allocated:
            keys = self._pool_claims.get((d.driver, d.pool))
            if keys is not None:
                keys.discard(c.key)
                if not keys:
                    del self._pool_claims[(d.driver, d.pool)]
            if self._used.get(d.id) == c.key:
                del self._used[d.id]

    def _claims_sharing(self, c: ClaimFacts) -> set[str]:
        return {k for uid in c.holders for k in self._held_by.get(uid, ())}

    def held_by(self, uid: str) -> set[str]:
        """Claims a pod holds (owns or is reserved for)."""
        return set(self._held_by.get(uid, ()))

    def claim_gpus(self, c: ClaimFacts) -> tuple[str, int]:
        """(node, GPU devices) the claim has allocated."""
        names = gpu_request_names(c.requests, self._gpu_classes)
        node, count = c.node, 0
        for d in c.allocated:
            if d.admin or (d.request not in names and d.id not in self._device_node):
                continue
            count += 1
            node = node or self._device_node.get(d.id, "")
        return node, count

    def apply_claims(self, state: ClusterState, keys: Iterable[str]) -> None:
        """Record each claim's GPUs in use in ``state``, less what its holders count."""
        for key in keys:
            uid = CLAIM_USAGE + key
            c = self.claims.get(key)
            node, n = self.claim_gpus(c) if c else ("", 0)
            left = n - self._credit(state, c, node, n) if c else 0
            if node and left > 0:
                state.upsert_pod(PodUsage(uid, node, left))
            else:
                state.delete_pod(uid)

    def _credit(self, state: ClusterState, c: ClaimFacts, node: str, n: int) -> int:
        """GPUs of ``c`` a holder bound on ``node`` already counts: its count, less the claims it
        holds there that come before ``c``."""
        for uid in c.holders:
            usage = state.pod(uid)
            if usage is None or usage.node != node:
                continue
            budget = usage.gpus
            for key in sorted(self._held_by.get(uid, ())):
                if key == c.key:
                    return min(n, max(budget, 0))
                other = self.claims.get(key)
                if other is not None:
                    o_node, o_n = self.claim_gpus(other)
                    budget -= o_n if o_node == node else 0
        return 0

    # -- demand -------------------------------------------------------------------------------

    def size(self, pod: PodFacts) -> tuple[PodFacts, str]:
        """(the pod with its claims' GPUs added, "") or (the pod unchanged, why it cannot be sized)."""
        if not pod.claims:
            return pod, ""
        total = 0
        for ref in pod.claims:
            # The claim made from a template has the template's requests; until railyard sees
            # it, the template says the same.
            facts: ClaimFacts | ClaimTemplateFacts | None = self.claims.get(f"{pod.namespace}/{ref.claim}")
            what = f"ResourceClaim {pod.namespace}/{ref.claim}"
            if facts is None and ref.template:
                facts = self.templates.get(f"{pod.namespace}/{ref.template}")
                what = f"ResourceClaimTemplate {pod.namespace}/{ref.template}"
            if not ref.claim and not ref.template:
                return pod, f"pod {pod.key}: resourceClaims entry {ref.name} names neither a claim nor a template"
            if facts is None:
                return pod, f"pod {pod.key}: {what} (entry {ref.name}) is not known to railyard"
            n, problem = requests_gpus(facts.requests, self._gpu_classes, self.largest_node())
            if problem:
                return pod, f"pod {pod.key}: {what}: {problem}"
            total += n
        return (replace(pod, gpus=pod.gpus + total) if total else pod), ""

    def leftover(self, key: str, pending_seen: Callable[[str], bool]) -> ClaimFacts | None:
        """The claim, if it is a leftover of a failed binding cycle that railyard should
        deallocate: allocated, reserved for nobody (kube-scheduler's Unreserve took its pod
        out), not made for extended resources (Unreserve deletes those), and referenced only by
        pods that wait unbound for railyard's filter."""
        c = self.claims.get(key)
        if c is None or not c.allocated or c.reserved or c.extended:
            return None
        users = self.users.by_ref.get("claim:" + key, set())
        if not users or not all(pending_seen(k) for k in users):
            return None
        return c


class PodClaims:
    """The pods that reference claims or templates, as the watch showed them (unsized), by
    the claim (``claim:<ns>/<name>``) and template (``template:<ns>/<name>``) they name."""

    def __init__(self) -> None:
        self.pods: dict[str, PodFacts] = {}
        self.by_ref: dict[str, set[str]] = {}

    def seen(self, raw: PodFacts) -> None:
        self.gone(raw.key)
        if not raw.claims:
            return
        self.pods[raw.key] = raw
        for ref in self.refs(raw):
            self.by_ref.setdefault(ref, set()).add(raw.key)

    def gone(self, key: str) -> None:
        old = self.pods.pop(key, None)
        if old is not None:
            for ref in self.refs(old):
                users = self.by_ref.get(ref)
                if users is not None:
                    users.discard(key)
                    if not users:
                        del self.by_ref[ref]

    @staticmethod
    def refs(pod: PodFacts) -> list[str]:
        refs = [f"claim:{pod.namespace}/{c.claim}" for c in pod.claims if c.claim]
        return refs + [f"template:{pod.namespace}/{c.template}" for c in pod.claims if c.template]


def problems(ledger: DeviceLedger) -> list[str]:
    """What railyard noticed about the DRA objects, with counts and an example."""
    out = []
    for c in sorted(ledger.classes.values(), key=lambda c: c.name):
        if c.name not in ledger.gpu_classes:
            continue
        if not c.drivers:
            out.append(f"DeviceClass {c.name} has no selector device.driver == '...' railyard can read; "
                       f"no device is counted as its GPU")
        for part in c.unread:
            out.append(f"DeviceClass {c.name}: selector {part!r} not evaluated; devices are counted without it")
    both = sorted(raw.name for raw in ledger.raw_nodes() if raw.gpus > 0 and ledger.gpus(raw.name))
    if both:
        out.append(f"{len(both)} node(s) report allocatable {ledger.gpu_resource} and publish GPU devices "
                   f"(e.g. {both[0]}); railyard counts the allocatable GPUs there")
    remote = sorted(s.name for s in ledger.slices.values() if not s.node)
    if remote:
        out.append(f"{len(remote)} ResourceSlice(s) are not for one node (e.g. {remote[0]}); "
                   f"their devices are not counted")
    return out


# -- the ledger beside the pod index and the counters (called by the service, under its lock) --


def pod_changed(ledger: DeviceLedger, pods: PodIndex, state: ClusterState, raw: PodFacts) -> None:
    """A pod as the watch shows it: sized, indexed, and its claims' usage counted again. A
    pending pod railyard cannot size is left to kube-scheduler: no gang waits for it."""
    ledger.users.seen(raw)
    pod, problem = ledger.size(raw)
    if problem and not pod.node:
        pods.gone(pod, state)
    else:
        pods.changed(pod, state)
    ledger.apply_claims(state, ledger.held_by(pod.uid))


def pod_deleted(ledger: DeviceLedger, pods: PodIndex, state: ClusterState, pod: PodFacts) -> None:
    ledger.users.gone(pod.key)
    pods.deleted(pod, state)
    ledger.apply_claims(state, ledger.held_by(pod.uid))


def pods_relisted(ledger: DeviceLedger, pods: PodIndex, state: ClusterState, raws: Iterable[PodFacts]) -> None:
    pods.clear(state)  # the claims' usage records go too: counted again below
    ledger.users = PodClaims()
    for raw in raws:
        pod_changed(ledger, pods, state, raw)
    ledger.apply_claims(state, list(ledger.claims))


def dra_changed(ledger: DeviceLedger, pods: PodIndex, state: ClusterState, changes: Changes) -> list[NodeFacts]:
    """Apply a DRA change to pods and claims; return the nodes to upsert as placement sees them."""
    for key in changes.pods:
        raw = ledger.users.pods.get(key)
        if raw is not None:
            pod_changed(ledger, pods, state, raw)
    ledger.apply_claims(state, changes.claims)
    return [ledger.effective(node) for name in changes.nodes if (node := ledger.raw_node(name)) is not None]
