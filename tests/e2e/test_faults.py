"""Fault matrix, cluster faults (docs/faults.md): a planned node lost while its gang waits at bind,
a Binding the API server refuses, a gang timeout above kube-scheduler's httpTimeout, and the
Events railyard writes for each, read back from the API server.

One cluster for the module (``cluster up`` with the extender, the reference scheduler config:
httpTimeout 150s), 10 kwok nodes x 8 GPUs::

    block b1 / rack r1:  nvl n1 (5 nodes)  nvl n2 (5 nodes)

Every test watches its namespace with a ``BindingWatch`` and ends with 0 gangs left partly
bound. Measured seconds are printed (``-s``) as ``fault-figure <row>: ...``; docs/faults.md
quotes them.
"""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime, timezone
from typing import Any, Callable

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from .helpers import (
    BindingWatch, create_pods, delete_pods, gang_pods, gpu_pod, metric, names_of, namespace, node_labels, run_railyard,
    wait_for, wait_released,
)

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=1 nvl=2 nodes=5 gpus=8 scheme=topograph"
NVLINK = "network.topology.nvidia.com/accelerator"
LEAF = "network.topology.nvidia.com/leaf"
#: Held bind calls must be answered within this long of the fault (the gang's own timeout is 100 s).
ANSWER_BOUND = 10
FAULT_TAINT = "e2e.railyard.io/fault"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(topology=TOPOLOGY, extender=True)


@pytest.fixture
def ns(cluster):
    name = namespace(cluster.core)
    yield name
    delete_pods(cluster.core, name)
    wait_released(cluster, name)


def state(cluster) -> dict[str, Any]:
    return json.loads((cluster.workdir / "cluster.json").read_text())


def gang(cluster, ns: str, name: str) -> dict[str, Any]:
    return cluster.extender_gangs().get(f"{ns}/{name}", {})


def events(core, ns: str, reason: str) -> list:
    return [e for e in core.list_namespaced_event(ns).items if e.reason == reason]


# -- a planned node lost while the gang waits at bind --------------------------------------------

def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(core, node: str, status: str) -> None:
    core.patch_node_status(node, {"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "KubeletReady" if status == "True" else "KubeletNotReady",
        "message": "set by the fault-matrix e2e test", "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}})


def _taint(effect: str) -> tuple[Callable, Callable, str]:
    def apply(core, node):
        core.patch_node(node, {"spec": {"taints": [{"key": FAULT_TAINT, "value": "x", "effect": effect}]}})

    def restore(core, node, saved):
        core.patch_node(node, {"spec": {"taints": []}})

    return apply, restore, f"became tainted {FAULT_TAINT}=x:{effect}"


def _delete(core, node):
    core.delete_node(node, grace_period_seconds=0)


def _recreate(core, node, saved):
    meta = saved["metadata"]
    saved["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    core.create_node(saved)


#: fault -> (apply(core, node), restore(core, node, saved node JSON), words of railyard's reason)
FAULTS = {
    "cordoned": (lambda core, n: core.patch_node(n, {"spec": {"unschedulable": True}}),
                 lambda core, n, _: core.patch_node(n, {"spec": {"unschedulable": False}}), "became cordoned"),
    "deleted": (_delete, _recreate, "was deleted"),
    "tainted NoSchedule": _taint("NoSchedule"),
    "tainted NoExecute": _taint("NoExecute"),
    "NotReady": (lambda core, n: _ready(core, n, "False"), lambda core, n, _: _ready(core, n, "True"), "became not ready"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_planned_node_lost_while_gang_waits_releases_at_once_and_binds_elsewhere(cluster, ns, fault):
    core = cluster.core
    apply, restore, words = FAULTS[fault]
    members = gang_pods("g", 4, required="nvlink", timeout_seconds=100)
    names = names_of(members)
    with BindingWatch(core, ns) as watch:
        create_pods(core, ns, members[:3])
        wait_for(lambda: gang(cluster, ns, "g").get("phase") == "waiting at bind 3/4", 120, "three members held")
        victim = gang(cluster, ns, "g")["plan"][f"{ns}/g-0"]
        saved = json.loads(core.read_node(victim, _preload_content=False).data)
        reason = f"node {victim} {words} while gang {ns}/g waited; planning again"

        faulted = time.monotonic()
        apply(core, victim)
        try:
            answered: dict[str, float] = {}

            def all_answered() -> bool:
                # kube-scheduler's own FailedScheduling Event for each held member: its bind call returned.
                for e in events(core, ns, "FailedScheduling"):
                    if reason in (e.message or "") and e.involved_object.name in names[:3]:
                        answered.setdefault(e.involved_object.name, time.monotonic())
                return len(answered) == 3

            wait_for(all_answered, ANSWER_BOUND, f"the three held members answered with {reason!r}", interval=0.1)
            replanned = wait_for(lambda: (g := gang(cluster, ns, "g")).get("phase") == "waiting at bind 3/4"
                                 and victim not in g["plan"].values() and time.monotonic(), 60,
                                 "the gang planned again without the lost node and held again")
            told = events(core, ns, "GangReplanned")
            assert {e.involved_object.name for e in told} >= set(names[:3]), [e.involved_object.name for e in told]
            assert all(e.message == reason for e in told), {e.message for e in told}

            create_pods(core, ns, gang_pods("g", 4, required="nvlink", timeout_seconds=100)[3:])
            bound = watch.wait_bound(names, 120, "the gang once complete")
            watch.assert_whole({"g": names})
            assert victim not in bound.values()
            labels = node_labels(core)
            assert len({(labels[n][LEAF], labels[n][NVLINK]) for n in bound.values()}) == 1, bound
            print(f"\nfault-figure planned node {fault} while waiting: held members answered "
                  f"{max(answered.values()) - faulted:.1f}s after the fault; planned again and held "
                  f"{replanned - faulted:.1f}s after it; bound whole on {len(set(bound.values()))} other nodes; "
                  f"0 pods left partial")
        finally:
            restore(core, victim, saved)
        watch.assert_none_partial_now({"g": names})


# -- one Binding refused by the API server --------------------------------------------------------

POLICY = "e2e-refuse-binding"


def _refuse_bindings(api_client) -> None:
    """A ValidatingAdmissionPolicy that refuses the Binding of every pod named ``*-refused``."""
    admission = kubernetes.client.AdmissionregistrationV1Api(api_client)
    admission.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods/binding"]}]},
                 "validations": [{"expression": "!object.metadata.name.endsWith('-refused')",
                                  "message": "the fault-matrix test refuses this Binding"}]}})
    admission.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY}, "spec": {"policyName": POLICY, "validationActions": ["Deny"]}})


def _unrefuse_bindings(api_client) -> None:
    admission = kubernetes.client.AdmissionregistrationV1Api(api_client)
    for delete in (admission.delete_validating_admission_policy_binding, admission.delete_validating_admission_policy):
        try:
            delete(POLICY)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _policy_active(core, ns: str, node: str, attempt: list[int]) -> bool:
    """Bind a pod no scheduler serves, named to be refused: True once the API server refuses it."""
    attempt[0] += 1
    name = f"probe{attempt[0]}-refused"
    pod = gpu_pod(name, 0)
    pod["spec"]["schedulerName"] = "e2e-nobody"
    core.create_namespaced_pod(ns, pod)
    try:
        # pods/<name>/binding, as kube-scheduler and railyard bind (not the legacy bindings resource).
        core.create_namespaced_pod_binding(name, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                                      "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                                           _preload_content=False)
        return False
    except ApiException as exc:
        return exc.status in (400, 403, 422) and "refuses this Binding" in (exc.body or "")
    finally:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def test_one_binding_refused_by_the_api_server_evicts_the_bound_members(cluster, ns):
    core = cluster.core
    api_client = core.api_client
    members = gang_pods("rb", 4, timeout_seconds=60)
    members[2]["metadata"]["name"] = "rb-2-refused"
    names = names_of(members)
    _refuse_bindings(api_client)
    try:
        probes = [0]
        node = core.list_node().items[0].metadata.name
        wait_for(lambda: _policy_active(core, ns, node, probes), 30, "the admission policy to refuse Bindings",
                 interval=0.5)
        with BindingWatch(core, ns, interval=0.1) as watch:
            created = time.monotonic()
            create_pods(core, ns, members)
            told = wait_for(lambda: events(core, ns, "GangCompensated"), 120, "railyard to compensate the gang")
            wait_for(lambda: watch.poll() or not watch.bound_now(names), 30, "no member of the gang left bound")
            undone = time.monotonic()
            ever = watch.bound(names)
            assert "rb-2-refused" not in ever, "the refused member was bound"
            alive = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
            evicted = sorted(set(ever) - set(alive))
            assert evicted == sorted(ever), f"every bound member is evicted, left: {sorted(set(ever) & set(alive))}"
            watch.assert_none_partial_now({"rb": names})
            first = min(watch.first_seen(ever)) if ever else undone
            expected = re.compile(
                rf"gang {ns}/rb: 1/4 Bindings failed \(binding {ns}/rb-2-refused to \S+ failed: .*"
                rf"refuses this Binding.*\); 3 bound members evicted so the gang restarts whole")
            assert all(expected.search(e.message) for e in told), [e.message for e in told]
            print(f"\nfault-figure one Binding refused: {len(ever)}/4 members were bound for "
                  f"{undone - first:.1f}s, all evicted ({undone - created:.1f}s after creation); 0 pods left partial")
    finally:
        _unrefuse_bindings(api_client)


# -- a gang timeout above the scheduler's httpTimeout ---------------------------------------------

def test_gang_timeout_above_http_timeout_is_capped_and_says_so(cluster, ns):
    core = cluster.core
    members = gang_pods("cap", 4, timeout_seconds=300)
    names = names_of(members)
    with BindingWatch(core, ns) as watch:
        create_pods(core, ns, members[:3])
        wait_for(lambda: gang(cluster, ns, "cap").get("phase") == "waiting at bind 3/4", 120, "three members held")
        capped = (f"gang {ns}/cap asked to wait 300s at bind; capped to 140s, so the held bind calls end before "
                  f"kube-scheduler's extender httpTimeout cuts them (gangs.max_timeout_seconds)")
        grpc = state(cluster)["replicas"][0]["grpc"]
        explained = run_railyard("explain", f"{ns}/cap-0", "--grpc", grpc)
        assert capped in explained.stdout, explained.stdout
        answer = json.loads(run_railyard("explain", f"{ns}/cap-0", "--grpc", grpc, "--json").stdout)
        assert 100 < float(answer["deadline_in_seconds"]) <= 140, answer
        told = wait_for(lambda: events(core, ns, "GangTimeoutCapped"), 30, "the GangTimeoutCapped Events")
        # Told to the members railyard had seen when it planned (at least the one that asked).
        assert told and {e.involved_object.name for e in told} <= set(names[:3])
        assert all(e.message == capped and e.type == "Warning" for e in told), [e.message for e in told]
        assert watch.bound(names) == {}
        watch.assert_none_partial_now({"cap": names})
        print(f"\nfault-figure timeout above httpTimeout: 300s asked, capped to 140s (httpTimeout 150s - 10s); "
              f"deadline {float(answer['deadline_in_seconds']):.0f}s; 0 pods left partial")


# -- Events with numbers, rate-limited; no hot loop while a gang waits ------------------------------

def test_a_gang_that_keeps_timing_out_tells_each_member_once_per_interval(cluster, ns):
    core = cluster.core
    window, interval = 25.0, 30.0  # gangs.event_interval_seconds: 30 (the default)
    members = gang_pods("slow", 4, timeout_seconds=5)
    names = names_of(members)
    s = state(cluster)
    scheduler_url, railyard_url = s["replicas"][0]["schedulerUrl"], s["extender"].rsplit("/scheduler", 1)[0]
    with BindingWatch(core, ns) as watch:
        timeouts0 = metric(railyard_url, "railyard_gangs_total", outcome="timed_out")
        attempts0 = metric(scheduler_url, "scheduler_schedule_attempts_total")
        started = time.monotonic()
        create_pods(core, ns, members[:3])
        time.sleep(window)
        elapsed = time.monotonic() - started
        timeouts = metric(railyard_url, "railyard_gangs_total", outcome="timed_out") - timeouts0
        attempts = metric(scheduler_url, "scheduler_schedule_attempts_total") - attempts0
        assert timeouts >= 2, f"the gang must time out again and again in {window:.0f}s: {timeouts:g} timeouts"

        limit = math.ceil(elapsed / interval)
        for reason, pattern in {
            "GangWaiting": rf"^gang {ns}/slow: [123]/4 GPU members at bind, the first for \d+s; "
                           rf"the rest must arrive within \d+s$",
            "GangTimedOut": rf"^gang {ns}/slow timed out at bind: [0-3]/4 GPU members arrived within 5s; "
                            rf"not arrived: .+$",
        }.items():
            told = events(core, ns, reason)
            per_pod: dict[str, int] = {}
            for e in told:
                per_pod[e.involved_object.name] = per_pod.get(e.involved_object.name, 0) + (e.count or 1)
                assert re.match(pattern, e.message), (reason, e.message)
            assert set(per_pod) == set(names[:3]), (reason, per_pod)
            assert max(per_pod.values()) <= limit, f"{reason}: {per_pod} in {elapsed:.0f}s, at most {limit} each"
        failed = sum((e.series.count if e.series else e.count) or 1 for e in events(core, ns, "FailedScheduling"))
        assert attempts / elapsed < 3, f"{attempts:g} scheduling attempts in {elapsed:.0f}s: a hot loop"
        watch.assert_none_partial_now({"slow": names})
        assert watch.bound(names) == {}
        print(f"\nfault-figure events of a gang timing out every 5s: {timeouts:g} timeouts in {elapsed:.0f}s, "
              f"1 GangWaiting and 1 GangTimedOut per member; {attempts / elapsed:.2f} scheduling attempts/s and "
              f"{failed / elapsed:.2f} FailedScheduling events/s for its 3 pods")
