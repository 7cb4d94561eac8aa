"""The DRA ledger (``core/devices/ledger.py``): GPUs per node from ResourceSlices, usage from claims
without counting a device twice, pods sized by their claims. Expected numbers are worked out
by hand in each test, not by the ledger's own helpers."""

from __future__ import annotations

import pytest

from extender.core.devices import ledger as L
from extender.core.devices.facts import (
    DRIVER,
    AllocatedDevice,
    ClaimFacts,
    ClaimTemplateFacts,
    DeviceClassFacts,
    DeviceFacts,
    DeviceRequest,
    Match,
    SliceFacts,
)
from extender.core.model import GangRef, NodeFacts, PodClaim, PodFacts
from extender.core.cluster.pods import PodIndex
from extender.core.cluster.state import ClusterState

NV = "gpu.nvidia.com"
GPU_CLASS = DeviceClassFacts(NV, "nvidia.com/gpu", ((Match(DRIVER, NV), Match(f"{NV}/type", "gpu")),))


def gpu_slice(node, n=8, generation=1, kind="gpu", rails=True, extra=None):
    devices = tuple(DeviceFacts(f"{kind}-{i}", {f"{NV}/type": kind, **({f"{NV}/rail": i} if rails else {}),
                                                **(extra or {})}) for i in range(n))
    return SliceFacts(f"{node}-{NV}-{generation}-{kind}", NV, node, generation, node, devices)


def claim(key, node, devices, *, owner="", reserved=(), extended=False, count=None, request="gpus"):
    allocated = tuple(AllocatedDevice(request, NV, node, d) for d in devices)
    return ClaimFacts(key, uid=f"uid-{key}", requests=(DeviceRequest(request, NV, count or len(devices) or 1),),
                      allocated=allocated, node=node if devices else "", owner=owner, reserved=tuple(reserved),
                      extended=extended, resource_version="7")


def pod(name, gpus=0, node="", claims=(), ns="ml", gang="", uid=None):
    return PodFacts(ns, name, uid or f"uid-{name}", GangRef(f"{ns}/{gang or name}", bool(gang)), node=node,
                    phase="Running" if node else "Pending", gpus=gpus, claims=tuple(claims))


class World:
    """A ledger beside the pod index and the counters, wired as the service wires them."""

    def __init__(self, nodes=("n1", "n2"), allocatable=0):
        self.ledger = L.DeviceLedger("nvidia.com/gpu", rail_attribute="rail",
                                     topology_attributes=(("nvl", "nvidia.com/gpu.clique"),))
        self.pods = PodIndex()
        self.state = ClusterState()
        self.state.set_nodes(self.ledger.nodes_relisted(NodeFacts(n, gpus=allocatable) for n in nodes))

    def dra(self, facts, deleted=False):
        changes = self.ledger.deleted(facts) if deleted else self.ledger.upserted(facts)
        for node in L.dra_changed(self.ledger, self.pods, self.state, changes):
            self.state.upsert_node(node)

    def pod(self, p):
        L.pod_changed(self.ledger, self.pods, self.state, p)

    def free(self):
        self.state.view()
        return {n.name: self.state.free(n.name) for n in self.state.nodes()}


def test_gpus_are_the_matching_devices_of_the_newest_pool_generation():
    w = World()
    w.dra(GPU_CLASS)
    w.dra(gpu_slice("n1"))
    w.dra(gpu_slice("n1", n=2, kind="mig"))  # MIG devices: type mig, not the GPU class
    w.dra(gpu_slice("n2", n=4))
    assert w.free() == {"n1": 8, "n2": 4}
    w.dra(gpu_slice("n2", n=6, generation=2))  # the driver republished: generation 1 no longer counts
    assert w.free() == {"n1": 8, "n2": 6}
    w.dra(gpu_slice("n1"), deleted=True)
    assert w.free() == {"n1": 0, "n2": 6}
    w.dra(GPU_CLASS, deleted=True)  # no GPU class left: no device is a GPU
    assert w.free() == {"n1": 0, "n2": 0}


def test_allocatable_gpus_win_and_both_sources_are_reported():
    w = World(allocatable=4)
    w.dra(GPU_CLASS)
    w.dra(gpu_slice("n1"))
    assert w.free() == {"n1": 4, "n2": 4}
    assert L.problems(w.ledger) == ["1 node(s) report allocatable nvidia.com/gpu and publish GPU devices "
                                    "(e.g. n1); railyard counts the allocatable GPUs there"]


def test_a_class_without_a_readable_driver_counts_nothing():
    w = World()
    w.dra(DeviceClassFacts("odd", "nvidia.com/gpu", (), unread=("device.attributes['x'].y > 1",)))
    w.dra(gpu_slice("n1"))
    assert w.free() == {"n1": 0, "n2": 0}
    assert L.problems(w.ledger) == [
        "DeviceClass odd has no selector device.driver == '...' railyard can read; no device is counted as its GPU",
        "DeviceClass odd: selector \"device.attributes['x'].y > 1\" not evaluated; devices are counted without it"]


def dra_world():
    w = World()
    w.dra(GPU_CLASS)
    w.dra(gpu_slice("n1"))
    w.dra(gpu_slice("n2"))
    return w


@pytest.mark.parametrize("claim_first", [True, False])
def test_an_extended_resource_claim_and_its_bound_pod_count_eight_not_sixteen(claim_first):
    w = dra_world()
    p = pod("ext8", gpus=8, node="n1")
    c = claim("ml/ext8-extended-resources-x", "n1", [f"gpu-{i}" for i in range(8)], owner=p.uid,
              reserved=[p.uid], extended=True)
    steps = [lambda: w.dra(c), lambda: w.pod(p)]
    for step in steps if claim_first else reversed(steps):
        step()
        assert w.free() == {"n1": 0, "n2": 8}  # either alone holds the 8 devices
    L.pod_deleted(w.ledger, w.pods, w.state, p)
    assert w.free() == {"n1": 0, "n2": 8}  # the claim still holds them (no controller deleted it)
    w.dra(c, deleted=True)
    assert w.free() == {"n1": 8, "n2": 8}


def test_claims_of_pods_not_bound_there_count_in_full_and_credit_stops_at_the_pods_count():
    w = dra_world()
    w.dra(ClaimTemplateFacts("ml/gpu4", (DeviceRequest("gpus", NV, 4),)))
    p = pod("a", node="n1", claims=[PodClaim("gpus", "a-gpus", "gpu4")])
    w.pod(p)  # sized 4 from the template: 4 in use before its claim is seen
    assert w.free() == {"n1": 4, "n2": 8}
    mine = claim("ml/a-gpus", "n1", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"], owner=p.uid, reserved=[p.uid])
    w.dra(mine)
    assert w.free() == {"n1": 4, "n2": 8}
    # A second claim the pod is reserved for but did not ask for: beyond its 4, so it counts.
    extra = claim("ml/b-extra", "n1", ["gpu-4", "gpu-5"], reserved=[p.uid])
    w.dra(extra)
    assert w.free() == {"n1": 2, "n2": 8}
    # A claim allocated on n2 for a pod bound on n1: nothing there covers it.
    w.dra(claim("ml/c-elsewhere", "n2", ["gpu-0"], reserved=[p.uid]))
    assert w.free() == {"n1": 2, "n2": 7}


def test_pods_are_sized_by_claims_and_templates():
    w = dra_world()
    w.dra(ClaimTemplateFacts("ml/gpu8", (DeviceRequest("gpus", NV, 8),)))
    w.dra(ClaimTemplateFacts("ml/whole", (DeviceRequest("gpus", NV, all=True),)))
    w.dra(ClaimTemplateFacts("ml/nic", (DeviceRequest("nic", "nic.example.com", 1),)))
    w.dra(ClaimTemplateFacts("ml/admin", (DeviceRequest("gpus", NV, 8, admin=True),)))
    w.dra(ClaimTemplateFacts("ml/either", (DeviceRequest("gpus", alternatives=(
        DeviceRequest("big", NV, 8), DeviceRequest("small", NV, 4))),)))
    size = w.ledger.size
    assert size(pod("t", gpus=2, claims=[PodClaim("gpus", "", "gpu8")]))[0].gpus == 10
    assert size(pod("w", claims=[PodClaim("gpus", "", "whole")]))[0].gpus == 8  # the largest node
    assert size(pod("n", gpus=1, claims=[PodClaim("nic", "", "nic")]))[0].gpus == 1
    assert size(pod("adm", claims=[PodClaim("gpus", "", "admin")]))[0].gpus == 0
    assert size(pod("e", claims=[PodClaim("gpus", "", "either")]))[1] == (
        "pod ml/e: ResourceClaimTemplate ml/either: request gpus: firstAvailable asks 4 or 8 GPUs; "
        "railyard cannot know which the scheduler will pick")
    assert size(pod("u", claims=[PodClaim("gpus", "", "missing")]))[1] == (
        "pod ml/u: ResourceClaimTemplate ml/missing (entry gpus) is not known to railyard")


def test_a_pod_sized_again_when_its_template_arrives():
    w = dra_world()
    p = pod("m", gang="g", claims=[PodClaim("gpus", "", "gpu8")])
    w.pod(p)
    assert w.pods.pending_of("ml/g") == []  # cannot be sized: left to kube-scheduler
    w.dra(ClaimTemplateFacts("ml/gpu8", (DeviceRequest("gpus", NV, 8),)))
    assert [(q.key, q.gpus) for q in w.pods.pending_of("ml/g")] == [("ml/m", 8)]


def test_labels_and_rails_from_device_attributes():
    w = World()
    w.dra(GPU_CLASS)
    w.dra(gpu_slice("n1", extra={f"{NV}/nvl": "cl-a.1"}))
    w.dra(gpu_slice("n2", extra={f"{NV}/nvl": "cl-a.1"}))
    w.dra(SliceFacts("n2-more", NV, "n2-more", 1, "n2",
                     (DeviceFacts("gpu-9", {f"{NV}/type": "gpu", f"{NV}/nvl": "cl-b.1"}),)))
    nodes = {n.name: n for n in w.state.nodes()}
    assert nodes["n1"].labels == {"nvidia.com/gpu.clique": "cl-a.1"}
    assert nodes["n2"].labels == {}  # its GPUs disagree: no label
    w.dra(claim("ml/x", "n1", ["gpu-2", "gpu-5"]))
    assert w.ledger.rails("n1") == {str(i): (1, int(i in (2, 5))) for i in range(8)}


def test_a_leftover_allocation_is_found_only_for_pods_waiting_on_railyard():
    w = dra_world()
    p = pod("a", gang="g", claims=[PodClaim("gpus", "user-a", "")])
    w.dra(ClaimFacts("ml/user-a", requests=(DeviceRequest("gpus", NV, 4),)))
    w.pod(p)
    pending = {"ml/a"}
    left = claim("ml/user-a", "n1", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])  # allocated, reserved for nobody
    w.dra(left)
    assert w.ledger.leftover("ml/user-a", pending.__contains__) == left
    assert w.ledger.leftover("ml/user-a", set().__contains__) is None  # not railyard's to undo
    w.dra(claim("ml/user-a", "n1", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"], reserved=[p.uid]))
    assert w.ledger.leftover("ml/user-a", pending.__contains__) is None  # in use
    w.dra(claim("ml/user-a", "n1", ["gpu-0"], extended=True))
    assert w.ledger.leftover("ml/user-a", pending.__contains__) is None  # Unreserve deletes those
