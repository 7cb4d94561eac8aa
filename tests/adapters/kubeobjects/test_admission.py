"""The admission policy that marks and gates gang members (issue 21 items 2 and 4): generated
from the membership table, shipped unchanged, and what the translator makes of its work. The
policy's CEL runs in kube-apiserver: tests/e2e/test_lone_pods.py checks every row there."""

from __future__ import annotations

import pytest
import yaml

from extender.adapters.kubeobjects import GATE, MARKER, MEMBERSHIP, WORKLOAD_KINDS, admission
from extender.adapters.kubeobjects.workloads import LABELS as WORKLOAD_LABELS, workload_ref
from tests.topologies import TRANSLATE, gang, pod


@pytest.mark.parametrize("path", [*admission.SHIPPED, admission.CHART], ids=lambda p: p.name + ":" + p.parent.name)
def test_the_shipped_copies_are_the_generated_ones(path):
    assert path.read_text() == admission.rendered(path), \
        f"{path} drifted: run `python -m extender.adapters.kubeobjects.admission`"


def test_every_membership_row_is_in_the_policy_and_nothing_else_names_a_gang():
    condition = admission.member_condition()
    terms = condition.split(" ||\n")
    assert len(terms) == len(MEMBERSHIP) + len(WORKLOAD_LABELS)
    for term, (_, keys) in zip(terms[len(MEMBERSHIP):], WORKLOAD_LABELS):
        assert term.count(" in object.metadata.labels") == len(keys) and all(f'"{k}"' in term for k in keys)
    for term, (where, key, _) in zip(terms, MEMBERSHIP):
        if where == "field":
            assert f"object.{key} != ''" in term
        else:
            assert f'"{key}" in object.metadata.{where}s' in term


MEMBER_LABELS = {  # every label workload_ref reads for a member of each kind
    "jobsets": {"jobset.sigs.k8s.io/jobset-name": "w", "jobset.sigs.k8s.io/restart-attempt": "0"},
    "leaderworkersets": {"leaderworkerset.sigs.k8s.io/name": "w", "leaderworkerset.sigs.k8s.io/group-key": "k",
                         "leaderworkerset.sigs.k8s.io/group-index": "0"},
    "jobs": {"railyard.io/gang": "true", "batch.kubernetes.io/job-name": "w"},
}


@pytest.mark.parametrize("kind, keys", WORKLOAD_LABELS, ids=[k for k, _ in WORKLOAD_LABELS])
def test_the_policy_matches_every_member_of_a_workloads_gang(kind, keys):
    """workloads.LABELS (what the policy matches) against workload_ref (what railyard reads):
    a member carries every label of its row, and without any one of them it is no member."""
    labels = MEMBER_LABELS[kind]
    ref, _ = workload_ref(labels, "ml", frozenset(WORKLOAD_KINDS))
    assert ref is not None and ref.named and ref.group_kind == kind
    assert set(keys) <= set(labels)
    for missing in keys:
        ref, _ = workload_ref({k: v for k, v in labels.items() if k != missing}, "ml", frozenset(WORKLOAD_KINDS))
        assert ref is None, missing


def test_the_base_policy_serves_the_base_schedulers_profiles_and_the_overlay_the_main_scheduler():
    base, overlay = (list(yaml.safe_load_all(p.read_text())) for p in admission.SHIPPED)
    conditions = {c["name"]: c["expression"] for c in base[0]["spec"]["matchConditions"]}
    assert conditions["railyard-scheduler"] == 'object.spec.schedulerName in ["railyard","railyard-sampled"]'
    conditions = {c["name"]: c["expression"] for c in overlay[0]["spec"]["matchConditions"]}
    assert conditions["railyard-scheduler"] == 'object.spec.schedulerName in ["default-scheduler"]'
    assert base[0]["spec"]["failurePolicy"] == "Fail"
    assert base[1] == {**base[1], "kind": "MutatingAdmissionPolicyBinding",
                       "spec": {"policyName": base[0]["metadata"]["name"]}}
    with pytest.raises(ValueError, match="at least one scheduler name"):
        admission.policy_objects([], "nvidia.com/gpu")


def test_the_scheduler_configs_manage_only_the_marker():
    for path in ("manifests/base/scheduler-config.yaml", "manifests/overlays/https/scheduler-config.yaml",
                 "manifests/overlays/kueue/scheduler-config.yaml",
                 "manifests/overlays/main-scheduler/scheduler-extender.yaml"):
        (ext,) = yaml.safe_load((admission.ROOT / path).read_text())["extenders"]
        assert ext["managedResources"] == admission.managed_resources() == [
            {"name": MARKER, "ignoredByScheduler": True}], path


def marked(p, gated=True):
    """The pod as the policy leaves it: the marker on its first container, the gate."""
    c = p["spec"]["containers"][0]["resources"]
    c.setdefault("requests", {})[MARKER] = "1"
    c.setdefault("limits", {})[MARKER] = "1"
    if gated:
        p["spec"]["schedulingGates"] = [{"name": "other.example/gate"}, {"name": GATE}]
    return p


def test_the_translator_reads_the_gate_and_never_counts_the_marker():
    member = TRANSLATE.pod(marked(gang("g", 1, 8)[0]))
    assert member.gated and member.gpus == 8 and not member.problems
    assert MARKER not in dict(member.eligibility.requests)
    assert member.eligibility == TRANSLATE.pod(gang("g", 1, 8)[0]).eligibility  # as if unmarked
    lifted = TRANSLATE.pod(marked(gang("g", 1, 8)[0], gated=False))
    assert not lifted.gated
    other_gate = pod("p", 1, schedulingGates=[{"name": "other.example/gate"}])
    assert not TRANSLATE.pod(other_gate).gated and TRANSLATE.pod(other_gate).held_by == ("other.example/gate",)
    assert member.held_by == ("other.example/gate",)
    assert not TRANSLATE.pod(pod("p", 1, schedulingGates="garbage")).gated
