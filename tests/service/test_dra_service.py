"""The live extender on a cluster whose GPUs are DRA devices (issue 16): nodes without
allocatable nvidia.com/gpu, one ResourceSlice of 8 devices per node, NVIDIA's DeviceClass.

The cluster, by hand (clique = the NVLink domain label GPU Feature Discovery sets):

    NVLink uuid-a.1: a1 a2 a3 a4   all free
    NVLink uuid-b.1: b1 b2 b3 b4   b1 holds a 4-device claim of a pod bound there
    NVLink uuid-c.1: c1 c2         c2 holds an 8-device extended-resource claim of a bound pod
"""

from __future__ import annotations

from pathlib import Path

import yaml

from extender.service.sink import DRA_KINDS
from extender.settings import Settings
from tests.service.test_live import Clock, Extender, MemoryBinder
from tests.topologies import TRANSLATE, gang, pod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
DOMAINS = {"a": ["a1", "a2", "a3", "a4"], "b": ["b1", "b2", "b3", "b4"], "c": ["c1", "c2"]}
ALL = [n for names in DOMAINS.values() for n in names]
NV = "gpu.nvidia.com"


def node(name):
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": f"uuid-{name[0]}.1"}},
            "status": {"allocatable": {"cpu": "128", "pods": "110"}}}


def gpu_slice(name):
    devices = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "rail": {"int": i}}} for i in range(8)]
    return {"metadata": {"name": f"{name}-{NV}"}, "spec": {"driver": NV, "nodeName": name,
                                                          "pool": {"name": name, "generation": 1}, "devices": devices}}


def claim(name, node_name, n, owner_uid="", reserved=(), ns="ml", extended=False, rv="1", count=None):
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": rv}
    if owner_uid:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "x", "uid": owner_uid, "controller": True}]
    if extended:
        meta["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    status = {}
    if n:
        status["allocation"] = {
            "devices": {"results": [{"request": "gpus", "driver": NV, "pool": node_name, "device": f"gpu-{i}"}
                                    for i in range(n)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "x", "uid": u} for u in reserved]
    return {"metadata": meta, "spec": {"devices": {"requests": [
        {"name": "gpus", "exactly": {"deviceClassName": NV, "count": count or n or 1}}]}}, "status": status}


def template(name, n, ns="ml"):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": NV, "count": n}}]}}}}


class DraBinder(MemoryBinder):
    def __init__(self):
        super().__init__()
        self.deallocated: list[tuple[str, str, str, str]] = []

    def deallocate_claim(self, namespace, name, uid, resource_version):
        self.deallocated.append((namespace, name, uid, resource_version))


def dra_cluster():
    binder = DraBinder()
    ext = Extender(Settings(), binder, clock=Clock(), kinds=("nodes", "pods", "podgroups", *DRA_KINDS))
    ext.relisted("nodes", [node(n) for n in ALL])
    user = pod("user-b1", 0, node="b1", resourceClaims=[{"name": "gpus", "resourceClaimName": "user-b1"}])
    ext8 = pod("ext-c2", 8, node="c2")
    ext.relisted("pods", [user, ext8])
    ext.relisted("podgroups", [])
    cls = yaml.safe_load((FIXTURES / "deviceclass-nvidia-gpu.yaml").read_text())
    ext.relisted("deviceclasses", [TRANSLATE.dra("DeviceClass", cls)])
    ext.relisted("resourceslices", [TRANSLATE.dra("ResourceSlice", gpu_slice(n)) for n in ALL])
    ext.relisted("resourceclaims", [
        TRANSLATE.dra("ResourceClaim", claim("user-b1", "b1", 4, reserved=["uid-ml-user-b1"])),
        TRANSLATE.dra("ResourceClaim", claim("ext-c2-extended-resources-x", "c2", 8, owner_uid="uid-ml-ext-c2",
                                             reserved=["uid-ml-ext-c2"], extended=True))])
    ext.relisted("resourceclaimtemplates", [TRANSLATE.dra("ResourceClaimTemplate", template("gpu8", 8))])
    return ext, binder


def free(ext):
    ext.ctx.state.view()
    return {n: ext.ctx.state.free(n) for n in ALL}


def test_gpus_come_from_slices_and_claims_count_once():
    ext, _ = dra_cluster()
    assert free(ext) == {"a1": 8, "a2": 8, "a3": 8, "a4": 8, "b1": 4, "b2": 8, "b3": 8, "b4": 8, "c1": 8, "c2": 0}


def test_a_one_gpu_pod_passes_where_devices_are_free():
    ext, _ = dra_cluster()  # issue 16: "1 node(s) have 0 free GPUs (0 reserved for gangs); pod needs 1"
    verdict = ext.filter(pod("one", 1), ALL)
    # A lone pod is refused only where railyard knows more than kube-scheduler (GPUs reserved for
    # gangs, cordoned or not-ready nodes); c2's devices are all allocated, which kube-scheduler's
    # own DRA filter sees. Before issue 16 every node was refused ("0 free GPUs").
    assert set(verdict.node_names) == set(ALL) and verdict.failed == {}
    assert ext.ctx.state.free("c2") == 0 and ext.ctx.state.free("a1") == 8


def test_a_gang_of_four_by_eight_lands_in_the_one_free_nvlink_domain_and_the_next_waits():
    ext, _ = dra_cluster()
    nvlink = {"railyard.io/required-topology": "nvlink", "railyard.io/min-member": "4"}
    first = gang("g1", 4, 8, annotations=nvlink)
    for p in first:
        ext.pod_upserted(p)
    planned = {p["metadata"]["name"]: ext.filter(p, ALL).node_names for p in first}
    assert sorted(n for names in planned.values() for n in names) == DOMAINS["a"]
    second = gang("g2", 4, 8, annotations=nvlink)
    for p in second:
        ext.pod_upserted(p)
    verdict = ext.filter(second[0], ALL)
    assert verdict.node_names == ()
    # b: b1 has 4 of 8 free (its claim), b2-b4 are free: 3 of the 4 pods; c fits 1; a is reserved.
    assert set(verdict.failed.values()) == {
        "gang ml/g2 needs 4 pods x 8 GPUs within one nvidia.com/gpu.clique; best nvlink uuid-b/uuid-b.1 fits 3 "
        "(4 GPUs in use)"}


def test_a_gang_sized_by_its_claim_template():
    ext, _ = dra_cluster()
    members = gang("t", 4, 0, annotations={"railyard.io/min-member": "4"},
                   resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu8"}])
    for p in members:
        ext.pod_upserted(p)
    planned = [n for p in members for n in ext.filter(p, ALL).node_names]
    assert sorted(planned) == DOMAINS["a"]


def test_a_member_whose_claims_cannot_be_sized_is_left_to_kube_scheduler():
    ext, binder = dra_cluster()
    p = pod("lost-0", 0, labels={"scheduling.x-k8s.io/pod-group": "lost"},
            resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "nope"}])
    ext.pod_upserted(p)
    assert ext.filter(p, ALL).node_names == tuple(ALL)
    assert binder.events == [("GPUsNotSized", "pod ml/lost-0: ResourceClaimTemplate ml/nope (entry gpus) is not "
                                              "known to railyard; railyard cannot count the pod's GPUs and leaves it "
                                              "to kube-scheduler (no gang hold)")]
    ext.bind("ml", "lost-0", "uid-ml-lost-0", "a1")  # not held for a gang: bound at once
    assert binder.bound == [("ml/lost-0", "a1")]


def test_a_claim_left_allocated_by_a_failed_bind_is_deallocated():
    ext, binder = dra_cluster()
    p = pod("h-0", 0, labels={"scheduling.x-k8s.io/pod-group": "h"}, annotations={"railyard.io/min-member": "2"},
            resourceClaims=[{"name": "gpus", "resourceClaimName": "user-h"}])
    ext.dra_upserted(TRANSLATE.dra("ResourceClaim", claim("user-h", "", 0, count=4)))
    ext.pod_upserted(p)
    assert len(ext.filter(p, ALL).node_names) == 1
    # PreBind allocated and reserved it; then the gang timed out and Unreserve dropped reservedFor.
    ext.dra_upserted(TRANSLATE.dra("ResourceClaim", claim("user-h", "a1", 4, reserved=["uid-ml-h-0"], rv="2")))
    assert binder.deallocated == []
    ext.dra_upserted(TRANSLATE.dra("ResourceClaim", claim("user-h", "a1", 4, rv="3")))
    assert binder.deallocated == [("ml", "user-h", "uid-user-h", "3")]
