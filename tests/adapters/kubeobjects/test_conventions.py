"""Each pod-group convention's objects, translated: which group a pod names, and what that
group declares (size, topology), with the precedence between them.

Fixtures are the projects' own documented examples, cited where each is used; only the
namespaces and the GPU requests railyard needs are added where an example has none.
"""

from __future__ import annotations

import pytest
import yaml

from extender import topotext
from extender.adapters import kubeobjects as ko
from extender.adapters.kubeobjects.groups import KAI, KUBERNETES, SCHEDULER_PLUGINS, VOLCANO
from extender.core.gangs import gangspec
from extender.core.model import EXCLUSIVE_DOMAIN, MIN_MEMBER, PREFERRED, PREFERRED_WAIT, REQUIRED
from extender.settings import DEFAULT_GPU_RESOURCE
from extender.service.whatif import WhatIf
from tests.topologies import TRANSLATE, TWO_RACKS, cluster, pod

LEAF = "network.topology.nvidia.com/leaf"
NVL = "network.topology.nvidia.com/accelerator"

# volcano-sh/volcano v1.15.1, docs/user-guide/how_to_use_svc_plugin.md, the `ps` pod's metadata.
VOLCANO_POD = yaml.safe_load("""
apiVersion: v1
kind: Pod
metadata:
  annotations:
    scheduling.k8s.io/group-name: tensorflow-dist-mnist
    volcano.sh/job-name: tensorflow-dist-mnist
    volcano.sh/job-version: "0"
    volcano.sh/queue-name: default
    volcano.sh/task-spec: ps
    volcano.sh/template-uid: tensorflow-dist-mnist-ps
  labels:
    volcano.sh/job-name: tensorflow-dist-mnist
    volcano.sh/job-namespace: default
    volcano.sh/queue-name: default
    volcano.sh/task-spec: ps
  name: tensorflow-dist-mnist-ps-0
  namespace: default
""")

# volcano-sh/volcano v1.15.1, "docs/design/Network Topology Aware Scheduling.md", "Volcano Job
# Controller" step 1 (subGroupPolicy left out: railyard does not read it).
VOLCANO_TOPOLOGY_PODGROUP = yaml.safe_load("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: network-topology-job-<jobUID>
spec:
  minMember: 3
  networkTopology:
    mode: hard
    highestTierAllowed: 2
""")

# volcano-sh/apis v1.15.0, artifacts/podgroup.yaml.
VOLCANO_BASIC_PODGROUP = yaml.safe_load("""
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: test-pg
  namespace: default
spec:
  minMember: 1
  minResources:
    cpu: "1000m"
    memory: "2G"
  queue: default
""")

# NVIDIA/KAI-Scheduler v0.13.0, docs/topology/multilevel.md, "Advanced Example" (the doc's
# `subgroups` key, a typo for `subGroups`, is left as the doc has it: railyard reads neither)
# and its "Subgroup A" pod.
KAI_PODGROUP, KAI_POD = yaml.safe_load_all("""
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: sample2
spec:
  queue: test
  priorityClassName: inference
  topologyConstraint:
    topology: "cluster-topology"
    requiredTopologyLevel: "topology/zone"
  subgroups:
    - name: subgroup-c
      minMember: 3
---
apiVersion: v1
kind: Pod
metadata:
  name: pod-a1
  annotations:
    pod-group-name: sample2
  labels:
    kai.scheduler/subgroup-name: subgroup-a
spec:
  containers:
    - name: worker
      image: ubuntu
      command: ["sleep", "infinity"]
""")

# k8s.io/api v0.37.2 testdata/HEAD/scheduling.k8s.io.v1beta1.PodGroup.yaml: every field filled
# (not a valid object: both policies set), the field names of 1.37.2. Spec only.
KUBERNETES_TESTDATA = yaml.safe_load("""
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata:
  name: nameValue
  namespace: namespaceValue
spec:
  disruptionMode:
    all: {}
    single: {}
  parentCompositePodGroupName: parentCompositePodGroupNameValue
  preemptionPolicy: preemptionPolicyValue
  priority: 8
  priorityClassName: priorityClassNameValue
  schedulingConstraints:
    topology:
    - key: keyValue
  schedulingPolicy:
    basic: {}
    gang:
      minCount: 1
  workloadRef:
    templateName: templateNameValue
    workloadName: workloadNameValue
""")

# What the 1.37.2 API server accepted and kube-scheduler gang-scheduled
# (objects read back from the local 1.37.2 control plane).
KUBERNETES_PODGROUP = {
    "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "pg1", "namespace": "default"},
    "spec": {"workloadRef": {"workloadName": "job1", "templateName": "workers"},
             "schedulingPolicy": {"gang": {"minCount": 4}},
             "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}}}
KUBERNETES_POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pg1-w0", "namespace": "default"},
    "spec": {"schedulingGroup": {"podGroupName": "pg1"},
             "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10",
                             "resources": {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}]}}


def declared(group) -> dict[str, tuple[str, object]]:
    return {d.role: (d.source, d.value) for d in group.declarations}


# -- which group a pod names -------------------------------------------------------------------

@pytest.mark.parametrize("obj, key, kind", [
    (VOLCANO_POD, "default/tensorflow-dist-mnist", VOLCANO),
    (KAI_POD, "default/sample2", KAI),
    (KUBERNETES_POD, "default/pg1", KUBERNETES),
    (pod("p", 8, labels={"pod-group-name": "g"}), "ml/g", KAI),
    (pod("p", 8, labels={"scheduling.x-k8s.io/pod-group": "g"}), "ml/g", SCHEDULER_PLUGINS),
    (pod("p", 8, labels={"kueue.x-k8s.io/pod-group-name": "g"}), "ml/g", ""),
])
def test_a_pod_names_its_gang_and_the_kind_of_group_it_reads(obj, key, kind):
    ref = ko.gang_ref(obj)[0]
    assert (ref.key, ref.named, ref.group_kind) == (key, True, kind)
    assert ref.group_id == ((kind, key) if kind else None)


def test_a_pod_naming_a_workload_api_podgroup_is_scheduled_in_a_pod_group_cycle_whatever_names_its_gang():
    assert ko.gang_ref(KUBERNETES_POD)[0].pod_group_cycle
    both = pod("p", 8, labels={"scheduling.x-k8s.io/pod-group": "a"}, schedulingGroup={"podGroupName": "b"})
    assert ko.gang_ref(both)[0].group_id == (SCHEDULER_PLUGINS, "ml/a") and ko.gang_ref(both)[0].pod_group_cycle
    assert not any(ko.gang_ref(p)[0].pod_group_cycle for p in (VOLCANO_POD, KAI_POD, pod("p", 8, labels={
        "scheduling.x-k8s.io/pod-group": "g"})))


def test_first_match_wins_when_a_pod_carries_two_conventions():
    both = pod("p", 8, labels={"scheduling.x-k8s.io/pod-group": "a"},
               annotations={"scheduling.k8s.io/group-name": "b", "pod-group-name": "c"})
    assert ko.gang_ref(both)[0].group_id == (SCHEDULER_PLUGINS, "ml/a")
    kai_and_volcano = pod("p", 8, annotations={"scheduling.k8s.io/group-name": "b", "pod-group-name": "c"})
    assert ko.gang_ref(kai_and_volcano)[0].group_id == (VOLCANO, "ml/b")


# -- what each group object declares ----------------------------------------------------------

def test_volcano_podgroup_size_and_hard_tier_through_the_setting():
    tiers = ko.Translator(DEFAULT_GPU_RESOURCE, volcano_tiers=(NVL, LEAF))
    g = tiers.group(VOLCANO_TOPOLOGY_PODGROUP)
    where = "Volcano PodGroup default/network-topology-job-<jobUID> spec"
    assert (g.kind, g.problems) == (VOLCANO, ())
    assert declared(g) == {MIN_MEMBER: (f"{where}.minMember", 3),
                           REQUIRED: (f"{where}.networkTopology.highestTierAllowed", LEAF)}


def test_volcano_tier_without_a_mapping_is_a_problem_with_its_numbers():
    g = TRANSLATE.group(VOLCANO_TOPOLOGY_PODGROUP)
    assert declared(g) == {MIN_MEMBER: ("Volcano PodGroup default/network-topology-job-<jobUID> spec.minMember", 3)}
    assert g.problems == (
        "Volcano PodGroup default/network-topology-job-<jobUID> spec.networkTopology.highestTierAllowed 2 (hard) "
        "names a HyperNode tier railyard cannot match to a topology level: placement.volcano_tiers maps 0 tiers; "
        "list the node label key of tier 1, 2, ... there, or set highestTierName",)
    one_tier = ko.Translator(DEFAULT_GPU_RESOURCE, volcano_tiers=(NVL,)).group(VOLCANO_TOPOLOGY_PODGROUP)
    assert one_tier.problems == (
        "Volcano PodGroup default/network-topology-job-<jobUID> spec.networkTopology.highestTierAllowed 2 (hard) "
        "names a HyperNode tier railyard cannot match to a topology level: placement.volcano_tiers maps 1 tier "
        f"({NVL}); list the node label key of tier 1, 2, ... there, or set highestTierName",)


def volcano(spec: dict) -> dict:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ml"}, "spec": spec}


@pytest.mark.parametrize("spec, want, problems", [
    # highestTierName is a level as it is (Volcano's label discoverer names tiers after labels)
    ({"minMember": 2, "networkTopology": {"highestTierName": LEAF}},
     {MIN_MEMBER: 2, REQUIRED: LEAF}, ()),
    # soft mode: no bound; hard without a tier: Volcano sets no bound either
    ({"minMember": 2, "networkTopology": {"mode": "soft", "highestTierAllowed": 1}}, {MIN_MEMBER: 2}, ()),
    ({"minMember": 2, "networkTopology": {"mode": "hard"}}, {MIN_MEMBER: 2}, ()),
    # minMember 0 is Volcano's "no gang": no size declared
    ({"minMember": 0}, {}, ()),
    ({"networkTopology": {"mode": "sideways", "highestTierAllowed": 1}}, {},
     ("Volcano PodGroup ml/g spec.networkTopology.mode must be hard or soft, got 'sideways'",)),
])
def test_volcano_podgroup_fields(spec, want, problems):
    g = ko.Translator(DEFAULT_GPU_RESOURCE, volcano_tiers=(NVL, LEAF)).group(volcano(spec))
    assert {role: value for role, (_, value) in declared(g).items()} == want
    assert g.problems == problems
    basic = TRANSLATE.group(VOLCANO_BASIC_PODGROUP)
    assert declared(basic) == {MIN_MEMBER: ("Volcano PodGroup default/test-pg spec.minMember", 1)}


def test_kai_podgroup_topology_constraint():
    g = TRANSLATE.group(KAI_PODGROUP)
    assert (g.kind, g.problems) == (KAI, ())
    # No top-level minMember in the example: the size is declared nowhere (subgroups are not read).
    assert declared(g) == {REQUIRED: ("KAI PodGroup default/sample2 spec.topologyConstraint.requiredTopologyLevel",
                                      "topology/zone")}
    both = TRANSLATE.group({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                            "metadata": {"name": "g", "namespace": "ml"},
                            "spec": {"minMember": 4, "topologyConstraint": {"requiredTopologyLevel": LEAF,
                                                                            "preferredTopologyLevel": NVL}}})
    assert {r: v for r, (_, v) in declared(both).items()} == {MIN_MEMBER: 4, REQUIRED: LEAF, PREFERRED: NVL}


def test_kubernetes_podgroup_gang_min_count_and_topology_key():
    g = TRANSLATE.group(KUBERNETES_TESTDATA)
    where = "Kubernetes PodGroup namespaceValue/nameValue spec"
    assert declared(g) == {MIN_MEMBER: (f"{where}.schedulingPolicy.gang.minCount", 1),
                           REQUIRED: (f"{where}.schedulingConstraints.topology[0].key", "keyValue")}
    # A list item of a built-in API carries no apiVersion: the watched kind decides.
    listed = TRANSLATE.group({k: v for k, v in KUBERNETES_PODGROUP.items() if k not in ("apiVersion", "kind")},
                             KUBERNETES)
    assert (listed.id, {r: v for r, (_, v) in declared(listed).items()}) == (
        (KUBERNETES, "default/pg1"), {MIN_MEMBER: 4, REQUIRED: "example.com/rack"})
    basic = TRANSLATE.group({**KUBERNETES_PODGROUP, "spec": {"schedulingPolicy": {"basic": {}}}})
    assert basic.declarations == ()
    two = TRANSLATE.group({**KUBERNETES_PODGROUP, "spec": {"schedulingConstraints": {
        "topology": [{"key": "a"}, {"key": "b"}]}}})
    assert two.problems == ("Kubernetes PodGroup default/pg1 spec.schedulingConstraints.topology lists 2 "
                            "constraints; railyard reads one",)


def test_an_object_of_an_api_railyard_does_not_read_is_named_by_no_pod():
    g = TRANSLATE.group({"apiVersion": "scheduling.example.com/v9", "metadata": {"name": "g", "namespace": "ml"},
                         "spec": {"minMember": 4}})
    assert (g.kind, g.declarations) == ("scheduling.example.com/v9", ())
    # No apiVersion at all (older plan files): scheduler-plugins, as before.
    assert TRANSLATE.group({"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 4}}).kind == \
        SCHEDULER_PLUGINS


# -- a pod reads its own convention's group ----------------------------------------------------

def podgroup(api_version: str, min_member: int) -> dict:
    spec = ({"schedulingPolicy": {"gang": {"minCount": min_member}}} if api_version.startswith("scheduling.k8s.io")
            else {"minMember": min_member})
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ml"}, "spec": spec}


SAME_NAME = [podgroup("scheduling.x-k8s.io/v1alpha1", 2), podgroup("scheduling.volcano.sh/v1beta1", 3),
             podgroup("scheduling.k8s.io/v1beta1", 4), podgroup("scheduling.run.ai/v2alpha2", 1)]


@pytest.mark.parametrize("member, reserved", [
    ({"labels": {"scheduling.x-k8s.io/pod-group": "g"}}, 2),
    ({"annotations": {"scheduling.k8s.io/group-name": "g"}}, 3),
    ({"schedulingGroup": {"podGroupName": "g"}}, 4),
    ({"annotations": {"pod-group-name": "g"}}, 1),
    ({"labels": {"kueue.x-k8s.io/pod-group-name": "g"}}, 1),  # no group object: the member seen
])
def test_four_podgroups_named_ml_g_are_four_groups(member, reserved):
    w = cluster(TWO_RACKS, podgroups=SAME_NAME)
    (a,) = w.plan_pending([pod("p-0", 8, **member)])
    assert a.feasible, a.reason
    # Slots for the members not created yet are reserved too: the size is the pod's own group's.
    assert len(w.state.reservation("ml/g").slots) == reserved


# -- precedence (the table in kubeobjects/groups.py) -----------------------------------------

def spec_of(pods: list[dict], group: dict):
    return gangspec.build("ml/g", [TRANSLATE.pod(p) for p in pods], TRANSLATE.group(group), 60.0)


def test_railyard_annotations_beat_the_group_which_beats_kueue_annotations():
    kai = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ml"},
           "spec": {"minMember": 3, "topologyConstraint": {"requiredTopologyLevel": LEAF, "preferredTopologyLevel": NVL}}}
    members = [pod(f"g-{i}", 8, annotations={"pod-group-name": "g", "kueue.x-k8s.io/pod-group-total-count": "5",
                                             "kueue.x-k8s.io/podset-required-topology": NVL,
                                             "kueue.x-k8s.io/podset-preferred-topology": LEAF}) for i in range(2)]
    spec = spec_of(members, kai)
    assert (spec.min_member, spec.required, spec.preferred, spec.invalid) == (3, LEAF, NVL, ())
    for p in members:
        p["metadata"]["annotations"].update({"railyard.io/min-member": "2", "railyard.io/required-topology": "block"})
    spec = spec_of(members, kai)
    assert (spec.min_member, spec.required, spec.preferred, spec.invalid) == (2, "block", NVL, ())


def test_the_wait_for_the_preferred_level_is_a_railyard_annotation_read_as_a_declaration():
    annotations = {"railyard.io/preferred-topology": "nvlink", "railyard.io/preferred-topology-wait-seconds": " 90 "}
    facts = TRANSLATE.pod(pod("g-0", 8, annotations={"pod-group-name": "g", **annotations}))
    (wait,) = [d for d in facts.declarations if d.role == PREFERRED_WAIT]
    assert (wait.source, wait.value, wait.precedence) == ("railyard.io/preferred-topology-wait-seconds", " 90 ", 0)
    spec = gangspec.build("ml/g", [facts], None, 60.0, max_preferred_wait=300.0)
    assert (spec.preferred, spec.preferred_wait_seconds, spec.invalid) == ("nvlink", 90.0, ())


def test_the_exclusive_level_is_a_railyard_annotation_read_as_a_declaration():
    facts = TRANSLATE.pod(pod("g-0", 8, annotations={"pod-group-name": "g", "railyard.io/exclusive-topology": " nvlink"}))
    (exclusive,) = [d for d in facts.declarations if d.role == EXCLUSIVE_DOMAIN]
    assert (exclusive.source, exclusive.value, exclusive.precedence) == ("railyard.io/exclusive-topology", " nvlink", 0)
    assert gangspec.build("ml/g", [facts], None, 60.0).exclusive_domain == "nvlink"


def test_a_group_problem_makes_the_gang_invalid_and_is_its_reason():
    w = cluster(TWO_RACKS, podgroups=[volcano({"minMember": 2, "networkTopology": {"highestTierAllowed": 1}})])
    (a,) = w.plan_pending([pod(f"g-{i}", 8, annotations={"scheduling.k8s.io/group-name": "g"}) for i in range(2)])
    assert not a.feasible
    assert a.reason == ("gang ml/g: Volcano PodGroup ml/g spec.networkTopology.highestTierAllowed 1 (hard) names a "
                        "HyperNode tier railyard cannot match to a topology level: placement.volcano_tiers maps 0 "
                        "tiers; list the node label key of tier 1, 2, ... there, or set highestTierName")


def test_volcano_tier_n_bounds_the_gang_to_one_domain_of_the_nth_mapped_level():
    tiers = ko.Translator(DEFAULT_GPU_RESOURCE, volcano_tiers=("nvlink", LEAF))
    nodes = [tiers.node(n) for n in topotext.load(TWO_RACKS).nodes]

    def plan(tier: int):
        pg = tiers.group(volcano({"minMember": 3, "networkTopology": {"mode": "hard", "highestTierAllowed": tier}}))
        w = WhatIf.load(nodes, ko.detect_levels(nodes), [tiers.pod(p) for p in topotext.load(TWO_RACKS).filler_pods()],
                        [pg])
        (a,) = w.plan_pending([tiers.pod(pod("g-0", 8, annotations={"scheduling.k8s.io/group-name": "g"}))])
        return a

    # Tier 1 = an NVLink domain: none has 3 free 8-GPU nodes in TWO_RACKS (n1 has h1, h2).
    a = plan(1)
    assert not a.feasible and a.reason == ("gang ml/g needs 3 pods x 8 GPUs within one "
                                           "network.topology.nvidia.com/accelerator; best nvlink b1/r1/n1 fits 2")
    # Tier 2 = a leaf: rack r1 holds h1, h2, h3.
    a = plan(2)
    assert a.feasible and a.level == LEAF and a.domain == ("b1", "r1")
