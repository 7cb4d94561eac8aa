"""A pod translated again only when something its facts are read from changed (kubeobjects/memo.py).

The oracle is a fresh ``pod_facts`` of the same object: after every edit, the memo's facts must
equal it. The edits touch every field the translation reads (membership labels and annotations,
rank, requests, scheduling gates, priority, node selection, claims) and the ones it does not
(resourceVersion, managedFields, status conditions), where the memo must not translate again.
"""

from __future__ import annotations

import copy

import pytest

from extender.adapters import kubeobjects as ko
from extender.adapters.kubeobjects.memo import PodMemo
from extender.adapters.kubeobjects.pods import pod_facts
from extender.settings import DEFAULT_GPU_RESOURCE
from tests.topologies import pod


def fresh(obj):
    return pod_facts(obj, DEFAULT_GPU_RESOURCE)


def member() -> dict:
    p = pod("llama-0", 8, labels={"scheduling.x-k8s.io/pod-group": "llama",
                                  "batch.kubernetes.io/job-completion-index": "0"},
            annotations={"railyard.io/min-member": "4"}, priority=1000,
            schedulingGates=[{"name": "railyard.io/gang"}],
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            resourceClaims=[{"name": "nic", "resourceClaimTemplateName": "rdma"}])
    p["metadata"]["resourceVersion"] = "1"
    p["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    return p


def _set(path, value):
    def edit(p):
        *parents, last = path
        at = p
        for key in parents:
            at = at.setdefault(key, {})
        at[last] = value
    return edit


EDITS = {
    # Read by the translation: the facts change.
    "bound": _set(("spec", "nodeName"), "a1"),
    "running": _set(("status", "phase"), "Running"),
    "gate lifted": _set(("spec", "schedulingGates"), []),
    "another gate": _set(("spec", "schedulingGates"), [{"name": "kueue.x-k8s.io/admission"}]),
    "relabelled": _set(("metadata", "labels", "scheduling.x-k8s.io/pod-group"), "other"),
    "rank": _set(("metadata", "labels", "batch.kubernetes.io/job-completion-index"), "3"),
    "size": _set(("metadata", "annotations", "railyard.io/min-member"), "8"),
    "required level": _set(("metadata", "annotations", "railyard.io/required-topology"), "nvlink"),
    "resized": _set(("spec", "containers"), [{"name": "main", "image": "train",
                                              "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "2"}}}]),
    "unreadable GPUs": _set(("spec", "containers"), [{"name": "main", "image": "train",
                                                      "resources": {"limits": {"nvidia.com/gpu": "500m"}}}]),
    "priority": _set(("spec", "priority"), 5),
    "never preempts": _set(("spec", "preemptionPolicy"), "Never"),
    "selector": _set(("spec", "nodeSelector"), {"network.topology.nvidia.com/accelerator": "nvl-1"}),
    "tolerations": _set(("spec", "tolerations"), []),
    "claims": _set(("spec", "resourceClaims"), [{"name": "gpus", "resourceClaimTemplateName": "eight"}]),
    "claim made": _set(("status", "resourceClaimStatuses"), [{"name": "nic", "resourceClaimName": "llama-0-nic"}]),
    "binding mark": _set(("metadata", "annotations", "railyard.io/binding"), '{"round":"r1","node":"a1","size":4}'),
    "renamed namespace": _set(("metadata", "namespace"), "other"),
}
NOT_READ = {
    "resourceVersion": _set(("metadata", "resourceVersion"), "2"),
    "managedFields": _set(("metadata", "managedFields"), [{"manager": "kwok", "operation": "Update"}]),
    "conditions": _set(("status", "conditions"), [{"type": "Ready", "status": "True"}]),
    "pod IP": _set(("status", "podIP"), "10.0.0.7"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_each_edit_read_by_the_translation_gives_the_fresh_facts(name):
    t = ko.Translator(DEFAULT_GPU_RESOURCE)
    p = member()
    assert t.pod(p, keep=True) == fresh(p)
    before = fresh(p)
    EDITS[name](p)
    assert fresh(p) != before, f"edit {name!r} changes nothing the translation reads: not a test of the memo"
    assert t.pod(p, keep=True) == fresh(p)


def test_every_sequence_of_edits_gives_the_fresh_facts():
    # Each edit after every other, from one object kept across the sequence, as a watch sends it.
    t = ko.Translator(DEFAULT_GPU_RESOURCE)
    edits = [*EDITS.values(), *NOT_READ.values()]
    for i, first in enumerate(edits):
        for second in edits[i:] + edits[:i]:
            p = member()
            t.pod(p, keep=True)
            first(p)
            assert t.pod(p, keep=True) == fresh(p)
            second(p)
            assert t.pod(p, keep=True) == fresh(p)


def test_edits_the_translation_does_not_read_and_a_binding_translate_nothing_again():
    memo, calls = PodMemo(), []
    p = member()

    def translate(obj):
        calls.append(1)
        return fresh(obj)

    memo.facts(p, lambda: translate(p))
    for edit in [*NOT_READ.values(), EDITS["bound"], EDITS["running"]]:
        edit(p)
        assert memo.facts(p, lambda: translate(p)) == fresh(p)
    assert len(calls) == 1
    EDITS["gate lifted"](p)
    assert memo.facts(p, lambda: translate(p)) == fresh(p) and len(calls) == 2


def test_pods_are_told_apart_by_uid_and_the_oldest_are_forgotten():
    memo = PodMemo(size=2)
    pods = [pod(f"p{i}", i) for i in range(3)]
    for p in pods:
        assert memo.facts(p, lambda p=p: fresh(p)) == fresh(p)
    assert len(memo._kept) == 2 and "uid-ml-p0" not in memo._kept
    twin = copy.deepcopy(pods[1])
    twin["metadata"]["name"] = "twin"  # the same uid, other content: translated, not taken from p1's
    assert memo.facts(twin, lambda: fresh(twin)).name == "twin"


def test_a_verb_call_reads_what_the_watch_kept_and_keeps_nothing():
    # Pods that never existed (a client calling filter at will) must cost nothing here.
    t = ko.Translator(DEFAULT_GPU_RESOURCE)
    ghost = member()
    assert t.pod(ghost) == fresh(ghost) and t._pods._kept == {}
    watched = member()
    t.pod(watched, keep=True)
    EDITS["bound"](watched)
    assert t.pod(watched) == fresh(watched)  # read: node set on the kept facts
    (digest, kept), = t._pods._kept.values()
    assert kept.node == ""  # not kept by the verb call


def test_large_pods_are_kept_up_to_the_byte_bound():
    memo = PodMemo(size=100, max_bytes=50_000)
    for i in range(10):
        p = pod(f"big-{i}", 8, annotations={"note": "x" * 20_000})
        memo.facts(p, lambda p=p: fresh(p))
    assert list(memo._kept) == ["uid-ml-big-8", "uid-ml-big-9"]  # two of about 20 KB fit in 50 KB
    assert memo._bytes == sum(d[0] for d, _ in memo._kept.values()) <= 50_000


def test_what_json_never_holds_is_translated_without_the_memo():
    memo = PodMemo()
    p = member()
    p["metadata"]["annotations"]["big"] = 2**70  # out of JSON's 64-bit integers as orjson writes them
    calls = []
    for _ in range(2):
        memo.facts(p, lambda: calls.append(1) or fresh(p))
    assert len(calls) == 2 and memo._kept == {}
    no_uid = pod("x", 1)
    del no_uid["metadata"]["uid"]
    memo.facts(no_uid, lambda: fresh(no_uid))
    assert memo._kept == {}
