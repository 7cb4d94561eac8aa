"""The doors preemption goes through: a pod's priority and preemption policy translated at the
door, and evictions through the Eviction API (policy/v1) on a loopback stand-in for the API
server (the real one: tests/e2e/test_preemption.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from prometheus_client import CollectorRegistry

from extender.adapters.k8s import errors
from extender.adapters.k8s.api import Api
from extender.adapters.k8s.binder import KubeBinder
from extender.adapters.kubeobjects import pod_facts
from extender.adapters.metrics import Metrics
from extender.core.model import PodRef
from tests.adapters.k8s.fake_apiserver import FakeApiServer, status

PATH = "/api/v1/namespaces/lo/pods/p-a1/eviction"

# A pod as the API server stores it once the Priority admission plugin has resolved its
# PriorityClass: spec.priorityClassName kept, spec.priority and spec.preemptionPolicy filled
# (k8s.io/api v0.37.2 core/v1/types.go PodSpec: "priority", "preemptionPolicy"; the values as
# in the PriorityClass example of kubernetes/website content/en/docs/concepts/scheduling-eviction/
# pod-priority-preemption.md: value 1000000, preemptionPolicy Never for "high-priority-nonpreempting").
ADMITTED = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "nginx", "namespace": "default", "uid": "u1", "labels": {"env": "test"}},
    "spec": {"containers": [{"name": "nginx", "image": "nginx", "imagePullPolicy": "IfNotPresent"}],
             "priorityClassName": "high-priority-nonpreempting", "priority": 1000000,
             "preemptionPolicy": "Never"},
}


def test_priority_and_preemption_policy_are_read_as_admission_left_them():
    facts = pod_facts(ADMITTED, "nvidia.com/gpu")
    assert (facts.priority, facts.preemption_policy, facts.problems) == (1000000, "Never", ())


def test_a_pod_without_a_priority_class_has_priority_0_and_preempts_lower():
    facts = pod_facts({"metadata": {"name": "a"}, "spec": {}}, "nvidia.com/gpu")
    assert (facts.priority, facts.preemption_policy) == (0, "PreemptLowerPriority")


@pytest.mark.parametrize("spec, problem", [
    ({"priority": "1000"}, "spec.priority must be a 32-bit integer, got '1000'"),
    ({"priority": True}, "spec.priority must be a 32-bit integer, got True"),
    ({"priority": 2**31}, "spec.priority must be a 32-bit integer, got 2147483648"),
    ({"preemptionPolicy": "Sometimes"}, "spec.preemptionPolicy must be PreemptLowerPriority or Never, got 'Sometimes'"),
])
def test_unreadable_priority_fields_are_problems_and_preempt_nothing(spec, problem):
    facts = pod_facts({"metadata": {"name": "a"}, "spec": spec}, "nvidia.com/gpu")
    assert facts.problems == (problem,)
    assert facts.priority == 0
    if "preemptionPolicy" in spec:
        assert facts.preemption_policy == "Never"


@pytest.fixture
def binder():
    with FakeApiServer() as fake:
        b = KubeBinder(Api(fake.client()), Metrics(CollectorRegistry()),
                       wall=lambda: datetime(2026, 12, 1, tzinfo=timezone.utc))
        yield fake, b
        b.close()


def test_evict_posts_an_eviction_with_the_uid_and_a_dry_run_asks_only(binder):
    fake, b = binder
    fake.reply("POST", PATH, 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
    fake.reply("POST", PATH, 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
    assert b.evict(PodRef("lo", "p-a1", "uid-1"), dry_run=True) is None
    assert b.evict(PodRef("lo", "p-a1", "uid-1")) is None
    bodies = [body for _, body in fake.seen("POST", PATH)]
    assert bodies == [
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p-a1", "namespace": "lo"},
         "deleteOptions": {"preconditions": {"uid": "uid-1"}, "dryRun": ["All"]}},
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p-a1", "namespace": "lo"},
         "deleteOptions": {"preconditions": {"uid": "uid-1"}}},
    ]


def test_a_budget_that_allows_no_disruption_is_a_refusal_with_the_api_servers_words(binder):
    fake, b = binder
    # The body eviction.go sends (errors.NewTooManyRequests + a DisruptionBudget cause).
    fake.reply("POST", PATH, 429, {**status(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                                          "TooManyRequests"),
                                   "details": {"causes": [{"reason": "DisruptionBudget",
                                                           "message": "The disruption budget lo-pdb needs 1 healthy "
                                                                      "pods and has 1 currently"}]}})
    fake.reply("POST", PATH, 500, status(500, "This pod has more than one PodDisruptionBudget, which the eviction "
                                              "subresource does not support."))
    assert b.evict(PodRef("lo", "p-a1", "uid-1"), dry_run=True) == \
        "429 Cannot evict pod as it would violate the pod's disruption budget."
    assert b.evict(PodRef("lo", "p-a1", "uid-1")) == \
        "500 This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."


def test_a_pod_already_gone_or_replaced_is_evicted(binder):
    fake, b = binder
    fake.reply("POST", PATH, 409, status(409, "the UID in the precondition (uid-1) does not match the UID in record "
                                              "(uid-2). The object might have been deleted and then recreated",
                                         "Conflict"))
    assert b.evict(PodRef("lo", "p-a1", "uid-1")) is None
    assert b.evict(PodRef("lo", "p-a1", "uid-1")) is None  # nothing queued: the stand-in answers 404


def test_throttling_is_no_refusal_it_raises(binder):
    fake, b = binder
    fake.reply("POST", PATH, 429, status(429, "Too many requests, please try again later.", "TooManyRequests"))
    with pytest.raises(errors.Unavailable, match=r"evicting pod lo/p-a1 \(uid uid-1\) failed: POST .*: 429 Too many"):
        b.evict(PodRef("lo", "p-a1", "uid-1"))
