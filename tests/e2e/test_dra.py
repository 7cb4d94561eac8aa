"""GPUs as DRA devices on the real control plane (issue 16): ``cluster up --gpus-as-dra`` with the
extender, kube-scheduler 1.37.2 allocating from hand-made ResourceSlices (no driver: kwok runs the
pods), no ``nvidia.com/gpu`` in any node's allocatable.

Two NVLink domains of four 8-GPU nodes (``nvidia.com/gpu.clique``, as GPU Feature Discovery
labels MNNVL nodes)::

    uuid-a.1: a1 a2 a3 a4        uuid-b.1: b1 b2 b3 b4

kube-controller-manager's resourceclaim controller makes the claims of ResourceClaimTemplates
and releases the claims of deleted pods; after each test the tests delete whatever claims are
left, finalizer first.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes.client import BatchV1Api, ResourceV1Api
from kubernetes.client.exceptions import ApiException

from .helpers import (
    BindingWatch, create_pods, delete_pods, gang_pods, gpu_node, gpu_pod, names_of, namespace, wait_for,
    wait_for_phase, wait_released,
)

pytestmark = pytest.mark.e2e

CLIQUE = "nvidia.com/gpu.clique"
DOMAINS = {"uuid-a.1": ["a1", "a2", "a3", "a4"], "uuid-b.1": ["b1", "b2", "b3", "b4"]}
DOMAIN_OF = {n: d for d, names in DOMAINS.items() for n in names}
NVLINK = {"railyard.io/required-topology": "nvlink"}
BIND_TIMEOUT = 150
DEVICE_CLASS = "gpu.nvidia.com"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    nodes = [gpu_node(n, 8, labels={CLIQUE: d}) for d, names in DOMAINS.items() for n in names]
    c = local_cluster(nodes=nodes, extender=True, gpus_as_dra=True)
    c.resource = ResourceV1Api(c.core.api_client)
    return c


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    delete_claims(cluster.resource, name)
    wait_released(cluster, name)


def delete_claims(resource: ResourceV1Api, ns: str) -> None:
    """Every claim left in ``ns`` (the tests' own, and any the controllers have not removed yet)."""
    for claim in resource.list_namespaced_resource_claim(ns).items:
        name = claim.metadata.name
        try:
            resource.patch_namespaced_resource_claim(name, ns, {"metadata": {"finalizers": None}})
            resource.delete_namespaced_resource_claim(name, ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(lambda: not resource.list_namespaced_resource_claim(ns).items, 60, f"claims of {ns} to be gone")


def allocations(resource: ResourceV1Api, ns: str) -> dict[str, list[tuple[str, str]]]:
    """claim name -> [(pool, device)] of its allocation."""
    out = {}
    for claim in resource.list_namespaced_resource_claim(ns).items:
        alloc = claim.status.allocation if claim.status else None
        out[claim.metadata.name] = [(r.pool, r.device) for r in alloc.devices.results] if alloc else []
    return out


def claim_gang(gang: str, size: int, template: str, annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Gang members whose GPUs come only from a ResourceClaimTemplate (no nvidia.com/gpu)."""
    pods = gang_pods(gang, size, 0)
    for p in pods:
        p["metadata"]["annotations"].update(annotations or {})
        p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
        p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return pods


def template_claims(cluster, ns: str, names: list[str]) -> dict[str, str]:
    """pod -> the claim the resourceclaim controller made for it from its template (named in the
    pod's status.resourceClaimStatuses), once every pod has one."""
    def made() -> dict[str, str] | None:
        found = {}
        for name in names:
            statuses = cluster.core.read_namespaced_pod(name, ns).status.resource_claim_statuses or []
            found.update({name: st.resource_claim_name for st in statuses if st.resource_claim_name})
        return found if len(found) == len(names) else None

    return wait_for(made, BIND_TIMEOUT, "the resourceclaim controller's claims")


def gpu8_template(cluster, ns: str) -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu8"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": 8}}]}}}}
    cluster.resource.create_namespaced_resource_claim_template(ns, template)


def test_no_node_reports_gpus_and_a_one_gpu_pod_binds(cluster, ns):
    for node in cluster.core.list_node().items:
        assert "nvidia.com/gpu" not in (node.status.allocatable or {})
    names = create_pods(cluster.core, ns, [gpu_pod("one", 1)])
    pods = wait_for_phase(cluster.core, ns, names, "Running", timeout=BIND_TIMEOUT)
    node = pods["one"].spec.node_name
    (claim, devices), = allocations(cluster.resource, ns).items()
    assert claim.startswith("one-extended-resources-") and devices == [(node, "gpu-0")]


def test_a_gang_of_four_by_eight_binds_whole_in_one_nvlink_domain_and_the_next_waits_whole(cluster, ns):
    with BindingWatch(cluster.core, ns) as watch:
        first = gang_pods("g1", 4, 8, required="nvlink")
        create_pods(cluster.core, ns, first)
        bound = watch.wait_bound(names_of(first), BIND_TIMEOUT, "gang g1")
        assert len({DOMAIN_OF[n] for n in bound.values()}) == 1 and len(set(bound.values())) == 4
        # kube-scheduler's allocator gave each member the 8 devices of the node railyard chose.
        claims = allocations(cluster.resource, ns)
        for member, node in bound.items():
            (devices,) = [d for c, d in claims.items() if c.startswith(f"{member}-extended-resources-")]
            assert sorted(devices) == sorted((node, f"gpu-{i}") for i in range(8))

        # 5 x 8 within one NVLink domain of 4 nodes: never fits; it waits holding nothing.
        second = gang_pods("g2", 5, 8, required="nvlink")
        create_pods(cluster.core, ns, second)
        free_domain = next(d for d in DOMAINS if d != DOMAIN_OF[next(iter(bound.values()))])
        want = (f"gang {ns}/g2 needs 5 pods x 8 GPUs within one {CLIQUE}; best nvlink "
                f"{free_domain.split('.')[0]}/{free_domain} fits 4")
        wait_for(lambda: any(want in (e.message or "") for e in cluster.core.list_namespaced_event(ns).items),
                 BIND_TIMEOUT, f"the event {want!r}")
        time.sleep(3)
        assert watch.bound(names_of(second)) == {}
        assert not [c for c in allocations(cluster.resource, ns) if c.startswith("g2-")]
        watch.assert_whole()


def test_a_gang_using_claim_templates_binds_whole_and_a_larger_one_waits(cluster, ns):
    gpu8_template(cluster, ns)
    with BindingWatch(cluster.core, ns) as watch:
        pods = claim_gang("t", 4, "gpu8", NVLINK)
        names = create_pods(cluster.core, ns, pods)
        claim_of = template_claims(cluster, ns, names)
        bound = watch.wait_bound(names, BIND_TIMEOUT, "gang t")
        assert len({DOMAIN_OF[n] for n in bound.values()}) == 1 and len(set(bound.values())) == 4
        claims = allocations(cluster.resource, ns)
        for member, node in bound.items():
            assert sorted(claims[claim_of[member]]) == sorted((node, f"gpu-{i}") for i in range(8))

        big = claim_gang("u", 5, "gpu8", NVLINK)
        big_names = create_pods(cluster.core, ns, big)
        big_claims = template_claims(cluster, ns, big_names)
        wait_for(lambda: any(f"gang {ns}/u needs 5 pods x 8 GPUs" in (e.message or "")
                             for e in cluster.core.list_namespaced_event(ns).items),
                 BIND_TIMEOUT, "gang u's reason")
        time.sleep(3)
        assert watch.bound(big_names) == {}
        claims = allocations(cluster.resource, ns)
        assert all(claims[claim] == [] for claim in big_claims.values())
        watch.assert_whole()


class ClaimWatch:
    """Every state a claim goes through, from a real watch: (allocated node or "", reserved)."""

    def __init__(self, resource: ResourceV1Api, ns: str, name: str) -> None:
        self.resource, self.ns, self.name = resource, ns, name
        self.states: list[tuple[float, str, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "ClaimWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            # Raw JSON lines: the client's models have no name its watch helper finds for claims.
            response = self.resource.list_namespaced_resource_claim(
                self.ns, watch=True, timeout_seconds=2, field_selector=f"metadata.name={self.name}",
                _preload_content=False)
            for line in response:
                if not line.strip():
                    continue
                status = (json.loads(line).get("object") or {}).get("status") or {}
                results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
                state = (results[0]["pool"] if results else "", bool(status.get("reservedFor")))
                if not self.states or self.states[-1][1:] != state:
                    self.states.append((time.monotonic(), *state))
            response.release_conn()


def test_a_gang_released_at_bind_leaves_no_claim_allocated_to_its_unbound_member(cluster, ns):
    # A gang of 2 with one member: it waits at bind 3 s, times out, is planned again, and so on.
    # kube-scheduler's Unreserve keeps a user claim's allocation (only reservedFor goes): railyard
    # deallocates it, so the next attempt is free to go where railyard plans it.
    cluster.resource.create_namespaced_resource_claim(ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "user-a"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": 4}}]}}})
    member = gang_pods("h", 2, 0, timeout_seconds=3)[0]
    member["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "user-a"}]
    member["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    with ClaimWatch(cluster.resource, ns, "user-a") as claims:
        create_pods(cluster.core, ns, [member])
        wait_for(lambda: sum(1 for _, node, reserved in claims.states if node and not reserved) >= 3, 90,
                 f"three rounds of gang h released at bind: {claims.states}")
    assert cluster.core.read_namespaced_pod("h-0", ns).spec.node_name is None
    states = claims.states
    for i, (at, node, reserved) in enumerate(states):
        if node and not reserved and i + 1 < len(states):
            after, next_node, _ = states[i + 1]
            assert next_node == "" and after - at < 1.0, f"left allocated after Unreserve: {states}"
    messages = [e.message or "" for e in cluster.core.list_namespaced_event(ns).items]
    assert sum("gang " + ns + "/h timed out at bind" in m for m in messages) >= 1
    assert not [m for m in messages if "deallocation of ResourceClaim completed" in m
                or "rejected by kube-scheduler's own filters" in m], messages


def hold(cluster, ns: str, node: str, gpus: list[int]) -> None:
    """An allocated claim holding the node's devices ``gpus`` (what a running job's claim is)."""
    name = f"held-{node}"
    cluster.resource.create_namespaced_resource_claim(ns, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": len(gpus)}}]}}})
    cluster.resource.patch_namespaced_resource_claim_status(name, ns, {"status": {"allocation": {
        "devices": {"results": [{"request": "gpus", "driver": DEVICE_CLASS, "pool": node, "device": f"gpu-{i}"}
                                for i in gpus]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})


def test_a_gang_of_partial_node_members_lands_where_the_same_rails_are_free(cluster, ns):
    # cluster up --gpus-as-dra publishes rail = index and sets dra.rail_attribute: rail. In
    # NVLink domain a: a1 has rails 0, 1, 4, 5 free, a2 and a3 have rails 0-3 free, a4 none;
    # domain b is full. Each of a1-a3 has 4 free GPUs: counts alone take a1 and a2 (node order).
    held = {"a1": [2, 3, 6, 7], "a2": [4, 5, 6, 7], "a3": [4, 5, 6, 7], "a4": list(range(8)),
            **{n: list(range(8)) for n in DOMAINS["uuid-b.1"]}}
    for node, gpus in held.items():
        hold(cluster, ns, node, gpus)
    time.sleep(3)  # the extender's watch sees the claims
    with BindingWatch(cluster.core, ns) as watch:
        members = gang_pods("r", 2, 4, required="nvlink")
        create_pods(cluster.core, ns, members)
        bound = watch.wait_bound(names_of(members), BIND_TIMEOUT, "gang r")
        assert sorted(bound.values()) == ["a2", "a3"]
        watch.assert_whole()
    # Each member's address names rails 0-3, and kube-scheduler's allocator gave it the devices
    # of rails 0-3 (the only free ones there: the choice railyard cannot make, forced).
    claims = allocations(cluster.resource, ns)
    for member, node in bound.items():
        pod = cluster.core.read_namespaced_pod(member, ns)
        assert pod.metadata.annotations["railyard.io/rails"] == "0,1,2,3"
        (devices,) = [d for c, d in claims.items() if c.startswith(f"{member}-extended-resources-")]
        assert sorted(devices) == [(node, f"gpu-{i}") for i in range(4)]


def test_a_replaced_member_of_a_rail_aligned_job_is_told_the_gangs_rails(cluster, ns):
    # Issue 20 item 4: a replacement's address includes rails. a2 and a3 have rails 0-3 free
    # (4 GPUs), every other node is full: an Indexed Job of 2 x 4 GPUs (opted in) takes a2 and
    # a3 on rails 0-3. The Job controller replaces the pod deleted from a2 (same index, new
    # name); once the old pod's claim is released the replacement can only go back to a2, and
    # it is told the lost member's rank and rails 0-3, not a bare Binding.
    held = {"a1": list(range(8)), "a2": [4, 5, 6, 7], "a3": [4, 5, 6, 7], "a4": list(range(8)),
            **{n: list(range(8)) for n in DOMAINS["uuid-b.1"]}}
    for node, gpus in held.items():
        hold(cluster, ns, node, gpus)
    time.sleep(3)  # the extender's watch sees the claims
    pod = gpu_pod("unused", 4, labels={"railyard.io/gang": "true"}, annotations=NVLINK)
    template = {"metadata": {"labels": pod["metadata"]["labels"], "annotations": NVLINK}, "spec": pod["spec"]}
    batch = BatchV1Api(cluster.core.api_client)
    batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rails"},
                                     "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                                              "backoffLimit": 6, "template": template}})
    try:
        first = wait_for(lambda: running_job_pods(cluster, ns, 2), BIND_TIMEOUT, "the Job's 2 pods Running")
        assert sorted(p.spec.node_name for p in first) == ["a2", "a3"]
        assert all(p.metadata.annotations["railyard.io/rails"] == "0,1,2,3" for p in first)
        (lost,) = [p for p in first if p.spec.node_name == "a2"]
        cluster.core.delete_namespaced_pod(lost.metadata.name, ns)

        def replaced() -> Any:
            pods = running_job_pods(cluster, ns, 2)
            return next((p for p in pods or [] if p.metadata.name != lost.metadata.name
                         and p.metadata.uid not in {f.metadata.uid for f in first}), None)

        again = wait_for(replaced, BIND_TIMEOUT, "the replacement Running")
        notes = again.metadata.annotations
        assert again.spec.node_name == "a2"
        told = (notes.get("railyard.io/rank"), notes.get("railyard.io/rails"))
        assert told == (lost.metadata.annotations["railyard.io/rank"], "0,1,2,3"), notes
    finally:
        batch.delete_namespaced_job("rails", ns, propagation_policy="Background")


def running_job_pods(cluster, ns: str, count: int) -> list[Any] | None:
    """The Job's pods, once ``count`` of them run and none is being deleted."""
    pods = [p for p in cluster.core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name=rails").items
            if p.metadata.deletion_timestamp is None]
    ok = len(pods) == count and all(p.status.phase == "Running" and p.spec.node_name for p in pods)
    return pods if ok else None
