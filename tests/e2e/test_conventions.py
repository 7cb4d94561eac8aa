"""Gangs of every pod-group convention on the real kube-scheduler through railyard: members
created one by one, none bound before the last exists, then all bound in one planned domain.

One cluster for the module, 8 kwok nodes x 8 GPUs in two racks (leaves) of two NVLink domains,
with kube-scheduler 1.37.2's native gang scheduling turned on as bench arm C runs it (feature
gates GenericWorkload + TopologyAwareWorkloadScheduling, API scheduling.k8s.io/v1beta1), and two
profiles: ``railyard`` with the GangScheduling plugin disabled (railyard is the gate) and
``default-scheduler`` with it on (kube-scheduler holds the members too, and tries each rack as a
candidate placement, calling railyard's filter per pod per placement).

Volcano's and KAI's PodGroups are CustomResourceDefinitions written here, schema-less: the CRDs
are installed after railyard started, which is how the test of "a CRD installed later is picked
up" comes for free. The PodGroups and pods follow the projects' documented shapes
(tests/adapters/kubeobjects/test_conventions.py cites them).
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from .helpers import BindingWatch, create_podgroup, delete_pods, namespace, node_labels, wait_for, wait_gang_reason, wait_released
from .native import KUBERNETES, NATIVE_GATES, NATIVE_RUNTIME_CONFIG, PLUGIN_OFF, PLUGIN_ON, member, scheduler_config

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=2 gpus=8 scheme=topograph"
LEAF = "network.topology.nvidia.com/leaf"
#: Seconds between two members' creations: long enough that a scheduler that binds what it sees
#: binds a member before the next exists (the issue's failure: 3 of 4 bound within 20 s).
GAP = 2.0
BIND_TIMEOUT = 120

VOLCANO = ("scheduling.volcano.sh", "v1beta1")
KAI = ("scheduling.run.ai", "v2alpha2")


@pytest.fixture(scope="module")
def cluster(local_cluster, tmp_path_factory):
    return local_cluster(topology=TOPOLOGY, extender=True, feature_gates=NATIVE_GATES,
                         runtime_config=NATIVE_RUNTIME_CONFIG,
                         scheduler_config=scheduler_config(tmp_path_factory.mktemp("conventions")))


@pytest.fixture(scope="module")
def client(cluster) -> kubernetes.client.ApiClient:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def cached(cluster, kind: str) -> float:
    """railyard's ``railyard_cache_objects{kind=...}``: how many objects of the kind it holds."""
    state = json.loads((cluster.workdir / "cluster.json").read_text())
    with urllib.request.urlopen(state["extender"].rsplit("/scheduler", 1)[0] + "/metrics", timeout=5) as reply:
        text = reply.read().decode()
    found = re.search(rf'^railyard_cache_objects{{kind="{re.escape(kind)}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else -1.0


def podgroup_crd(group: str, version: str) -> dict[str, Any]:
    """A schema-less CustomResourceDefinition for ``<group>/<version>`` PodGroups."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "listKind": "PodGroupList"},
                 "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


_installed: dict[str, float] = {}


def install_crd(cluster, client, api: tuple[str, str]) -> float:
    """Install the PodGroup CRD of ``api`` (once per module) and wait until railyard lists a
    PodGroup of it; return how many seconds that took after the CRD was Established."""
    group, version = api
    kind = f"podgroups.{group}"
    if kind in _installed:
        return _installed[kind]
    extensions = kubernetes.client.ApiextensionsV1Api(client)
    assert cached(cluster, kind) == 0, "railyard holds PodGroups of an API that is not installed yet"
    try:
        extensions.create_custom_resource_definition(podgroup_crd(group, version))
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        crd = extensions.read_custom_resource_definition(f"podgroups.{group}")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, 30, f"the {kind} CRD to be Established")
    start = time.monotonic()
    wait_for(lambda: _create_probe(client, api), 30, f"a {kind} probe PodGroup to be created")
    wait_for(lambda: cached(cluster, kind) >= 1, 60, f"railyard to list {kind}")
    _installed[kind] = time.monotonic() - start
    return _installed[kind]


def _create_probe(client, api) -> bool:
    try:
        create_podgroup(client, api, "default", "probe", {"minMember": 1})
    except ApiException as exc:
        if exc.status == 404:  # discovery not caught up with the new CRD yet
            return False
        if exc.status != 409:
            raise
    return True


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core, "conv")
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


def one_by_one(cluster, ns: str, pods: list[dict[str, Any]], watch: BindingWatch) -> float:
    """Create the pods GAP seconds apart, checking before each that none is bound yet; return
    when the last was created (monotonic)."""
    for i, p in enumerate(pods):
        if i:
            time.sleep(GAP)
        watch.poll()
        assert watch.bound() == {}, f"bound before member {i} of {len(pods)} existed: {watch.bound()}"
        cluster.core.create_namespaced_pod(ns, p)
    return time.monotonic()


def assert_bound_whole_in_one_leaf(cluster, watch: BindingWatch, names: list[str], last_created: float) -> None:
    bound = watch.wait_bound(names, BIND_TIMEOUT, "the gang")
    assert min(watch.first_seen(names)) >= last_created, "a member was bound before the last member existed"
    assert len(set(bound.values())) == len(names), f"8-GPU members share a node: {bound}"
    labels = node_labels(cluster.core)
    leaves = {labels[node][LEAF] for node in bound.values()}
    assert len(leaves) == 1, f"the gang's required leaf holds them all, got {bound}"
    watch.assert_whole({"g": names})


def gang_of_four(cluster, ns: str, make) -> None:
    names = [f"g-{i}" for i in range(4)]
    with BindingWatch(cluster.core, ns) as watch:
        last = one_by_one(cluster, ns, [make(n) for n in names], watch)
        assert_bound_whole_in_one_leaf(cluster, watch, names, last)
    # railyard planned the gang of four and created its Bindings (bindVerb): it was the gate.
    assert cluster.extender_gangs()[f"{ns}/g"]["reason"] == f"gang {ns}/g bound: 4 pods"


# -- a CRD installed after railyard started ------------------------------------------------------

def test_a_podgroup_crd_installed_after_railyard_started_is_picked_up(cluster, client):
    for api in (VOLCANO, KAI):
        took = install_crd(cluster, client, api)
        # Looked up again every 10 s while absent, then listed: well inside 10 s + a list.
        assert took < 30, f"{api[0]} PodGroups listed {took:.0f}s after the CRD was installed"


# -- Volcano, KAI -------------------------------------------------------------------------------

def test_volcano_gang_created_one_by_one_binds_whole_after_the_last(cluster, client, ns):
    install_crd(cluster, client, VOLCANO)
    # Hard networkTopology by highestTierName: the label key, as Volcano's label discoverer names tiers.
    create_podgroup(client, VOLCANO, ns, "g", {"minMember": 4, "networkTopology": {"mode": "hard",
                                                                                   "highestTierName": LEAF}})
    gang_of_four(cluster, ns, lambda n: member(n, annotations={"scheduling.k8s.io/group-name": "g"}))


def test_kai_gang_created_one_by_one_binds_whole_after_the_last(cluster, client, ns):
    install_crd(cluster, client, KAI)
    create_podgroup(client, KAI, ns, "g", {"minMember": 4, "topologyConstraint": {"requiredTopologyLevel": LEAF}})
    gang_of_four(cluster, ns, lambda n: member(n, annotations={"pod-group-name": "g"}))


# -- the Kubernetes Workload API, kube-scheduler's gang plugin off and on --------------------------

@pytest.mark.parametrize("profile", [PLUGIN_OFF, PLUGIN_ON])
def test_kubernetes_podgroup_gang_created_one_by_one_binds_whole_after_the_last(cluster, client, ns, profile):
    before = cached(cluster, "podgroups.scheduling.k8s.io")
    create_podgroup(client, KUBERNETES, ns, "g", {"schedulingPolicy": {"gang": {"minCount": 4}},
                                                   "schedulingConstraints": {"topology": [{"key": LEAF}]}})
    # Served from the start (runtime-config and the gate): listed without waiting for a recheck.
    wait_for(lambda: cached(cluster, "podgroups.scheduling.k8s.io") > before, 10, "railyard to see the PodGroup")
    gang_of_four(cluster, ns, lambda n: member(n, scheduling_group="g", scheduler_name=profile))


# -- a gang whose size is declared nowhere ------------------------------------------------------

def test_a_gang_of_undeclared_size_binds_whole_once_settled(cluster, ns):
    # Volcano's annotation and no PodGroup: nothing says how many members the gang has.
    names = [f"g-{i}" for i in range(3)]
    with BindingWatch(cluster.core, ns) as watch:
        last = one_by_one(cluster, ns, [member(n, annotations={"scheduling.k8s.io/group-name": "g"}) for n in names],
                          watch)
        settling = re.compile(rf"gang {re.escape(ns)}/g declares no size: (\d) members? seen, the newest (\d+\.\d)s ago; it is "
                              r"planned once no new member appears for 5s \(declare the size to skip the wait: "
                              r"railyard\.io/min-member or its PodGroup's\)")

        def waiting_reason() -> re.Match | None:
            return settling.fullmatch(cluster.extender_gangs().get(f"{ns}/g", {}).get("reason", ""))

        seen = wait_for(waiting_reason, 30, "railyard to say the gang waits to settle")
        assert 1 <= int(seen.group(1)) <= 3 and float(seen.group(2)) < 5.0, seen.group(0)

        # What `kubectl describe pod` shows meanwhile: the members wait gated (kube-scheduler
        # tries none), and railyard's words in an Event.
        assert settling.search(wait_gang_reason(cluster.core, ns, "g-0", 30, reason="GangWaiting"))
        bound = watch.wait_bound(names, BIND_TIMEOUT, "the settled gang")
        first = min(watch.first_seen(names))
        assert first >= last + 5.0 - watch.interval, f"bound {first - last:.1f}s after the last member, not settled"
        assert len(set(bound.values())) == 3
        labels = node_labels(cluster.core)
        assert len({labels[n][LEAF] for n in bound.values()}) == 1, bound  # as tight as 3 fit: one leaf
        watch.assert_whole({"g": names})
