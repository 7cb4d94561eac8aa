"""The k8s adapter's translation: API server JSON <-> CacheSink calls, Bindings, Events."""

from __future__ import annotations

import socket
import time
from datetime import datetime, timezone

import pytest
from kubernetes.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry

from extender.adapters.k8s import errors
from extender.adapters.k8s.api import Api
from extender.adapters.k8s.binder import KubeBinder
from extender.adapters.k8s.watch_cache import DRA_RESOURCES, GROUPS, NODES, PODGROUPS, PODS, WatchCache
from extender.adapters.metrics import Metrics
from extender.core.model import PodRef
from tests.topologies import TRANSLATE
from tests.adapters.k8s.fake_apiserver import HANG, FakeApiServer, status


def node(name, rv="1"):
    return {"metadata": {"name": name, "resourceVersion": rv, "managedFields": [{"manager": "kubectl"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(name, rv="1", ns="ml"):
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": rv}}


def podgroup(name, rv="1"):
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": rv}, "spec": {"minMember": 4}}


class Sink:
    """The CacheSink port, recording each call."""

    def __init__(self):
        self.calls = []
        self.lists = {}

    def node_upserted(self, node):
        self.calls.append(("node_upserted", node.name))

    def node_deleted(self, name):
        self.calls.append(("node_deleted", name))

    def pod_upserted(self, pod):
        self.calls.append(("pod_upserted", pod.name))

    def pod_deleted(self, pod):
        self.calls.append(("pod_deleted", pod.name))

    def group_upserted(self, group):
        self.calls.append(("group_upserted", group.key))

    def group_deleted(self, group):
        self.calls.append(("group_deleted", group.key))

    def dra_upserted(self, facts):
        self.calls.append(("dra_upserted", type(facts).__name__, getattr(facts, "name", None) or facts.key))

    def dra_deleted(self, facts):
        self.calls.append(("dra_deleted", type(facts).__name__, getattr(facts, "name", None) or facts.key))

    def relisted(self, kind, objects):
        self.calls.append(("relisted", kind, [getattr(o, "name", None) or o.key.split("/")[-1] for o in objects]))
        self.last_list = objects
        self.lists.setdefault(kind, []).append(objects)


def wait_until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.fixture
def apiserver():
    with FakeApiServer() as fake:
        yield fake


def cache(fake, sink, resources, metrics=None):
    wc = WatchCache(Api(fake.client()), sink, metrics or Metrics(CollectorRegistry()), TRANSLATE,
                    resources=resources, page_size=2, backoff=(0.01, 0.05), podgroup_recheck=0.05)
    wc.start()
    return wc


def test_paged_list_then_watch_events(apiserver):
    apiserver.list("/api/v1/nodes", ([node("a"), node("b")], "10"), ([node("c")], "10"))
    apiserver.watch("/api/v1/nodes", [
        {"type": "ADDED", "object": node("d", "11")},
        {"type": "MODIFIED", "object": node("a", "12")},
        {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "15"}}},
        {"type": "DELETED", "object": node("b", "16")},
    ])
    apiserver.watch("/api/v1/nodes", [HANG])
    sink, metrics = Sink(), Metrics(CollectorRegistry())
    wc = cache(apiserver, sink, (NODES,), metrics)
    try:
        wait_until(lambda: len(apiserver.seen("GET", "/api/v1/nodes")) == 4)
        assert sink.calls == [("relisted", "nodes", ["a", "b", "c"]), ("node_upserted", "d"),
                              ("node_upserted", "a"), ("node_deleted", "b")]
        # Translated once, here: the sink gets facts, with each node's labels.
        assert [(type(o).__name__, o.name) for o in sink.last_list] == [("NodeFacts", n) for n in "abc"]
        lists = [q for q, _ in apiserver.seen("GET", "/api/v1/nodes") if "watch" not in q]
        assert [q.get("continue") for q in lists] == [None, "1"] and lists[0]["limit"] == "2"
        watches = [q for q, _ in apiserver.seen("GET", "/api/v1/nodes") if "watch" in q]
        # The second watch resumes from the last event, not from the list.
        assert [w["resourceVersion"] for w in watches] == ["10", "16"]
        assert watches[0]["allowWatchBookmarks"] == "true"
        assert wc.synced() and wc.last_event_age() is not None
        text = metrics.exposition()[0].decode()
        assert 'railyard_cache_objects{kind="nodes"} 3.0' in text
    finally:
        wc.stop()


def test_gone_relists(apiserver):
    apiserver.list("/api/v1/pods", ([pod("p1")], "5"))
    apiserver.watch("/api/v1/pods", [{"type": "ERROR", "object": status(410, "too old resource version: 5 (40)",
                                                                        "Expired")}])
    apiserver.watch("/api/v1/pods", [{"type": "ADDED", "object": pod("p2", "41")}, HANG])
    sink = Sink()
    wc = cache(apiserver, sink, (PODS,))
    try:
        wait_until(lambda: ("pod_upserted", "p2") in sink.calls)
        assert sink.calls == [("relisted", "pods", ["p1"]), ("relisted", "pods", ["p1"]), ("pod_upserted", "p2")]
        queries = [q for q, _ in apiserver.seen("GET", "/api/v1/pods")]
        assert all(q["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed" for q in queries)
    finally:
        wc.stop()


def test_refused_watch_backs_off_and_resumes(apiserver):
    apiserver.list("/api/v1/nodes", ([node("a")], "7"))
    apiserver.watch("/api/v1/nodes", (500, status(500, "etcdserver: leader changed")))
    apiserver.watch("/api/v1/nodes", [{"type": "DELETED", "object": node("a", "9")}, HANG])
    sink = Sink()
    wc = cache(apiserver, sink, (NODES,))
    try:
        wait_until(lambda: ("node_deleted", "a") in sink.calls)
        watches = [q["resourceVersion"] for q, _ in apiserver.seen("GET", "/api/v1/nodes") if "watch" in q]
        assert watches[:2] == ["7", "7"]  # resumed without a relist
        assert sink.calls.count(("relisted", "nodes", ["a"])) == 1
    finally:
        wc.stop()


def test_podgroups_absent_count_as_listed_and_are_picked_up_when_served(apiserver):
    sink = Sink()
    wc = cache(apiserver, sink, (PODGROUPS,))
    try:
        wait_until(wc.synced)
        assert sink.calls[0] == ("relisted", "podgroups", [])
        apiserver.list("/apis/scheduling.x-k8s.io/v1alpha1/podgroups", ([podgroup("llama")], "3"))
        apiserver.watch("/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
                        [{"type": "DELETED", "object": podgroup("llama", "4")}, HANG])
        apiserver.reply("GET", "/apis/scheduling.x-k8s.io/v1alpha1", 200, {
            "kind": "APIResourceList", "groupVersion": "scheduling.x-k8s.io/v1alpha1",
            "resources": [{"name": "podgroups", "namespaced": True, "kind": "PodGroup"}]})
        wait_until(lambda: ("group_deleted", "ml/llama") in sink.calls)
        assert ("relisted", "podgroups", ["llama"]) in sink.calls
    finally:
        wc.stop()


def test_dra_kinds_are_listed_and_watched_where_resource_k8s_io_v1_is_served(apiserver):
    api = "/apis/resource.k8s.io/v1"
    for _ in range(2):  # one discovery answer per kind watched
        apiserver.reply("GET", api, 200, {"kind": "APIResourceList", "groupVersion": "resource.k8s.io/v1",
                                          "resources": [{"name": "resourceslices", "kind": "ResourceSlice"},
                                                        {"name": "resourceclaims", "kind": "ResourceClaim"}]})
    slice_ = {"metadata": {"name": "n1-gpu", "resourceVersion": "5"},
              "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1"}, "devices": [{"name": "gpu-0"}]}}
    apiserver.list(f"{api}/resourceslices", ([slice_], "5"))
    claim = {"metadata": {"name": "c", "namespace": "ml", "resourceVersion": "6"}}
    apiserver.list(f"{api}/resourceclaims", ([], "5"))
    apiserver.watch(f"{api}/resourceslices", [{"type": "DELETED", "object": slice_}, HANG])
    apiserver.watch(f"{api}/resourceclaims", [{"type": "ADDED", "object": claim}, HANG])
    sink = Sink()
    slices, claims = (r for r in DRA_RESOURCES if r.kind in ("resourceslices", "resourceclaims"))
    wc = cache(apiserver, sink, (slices, claims))
    try:
        wait_until(lambda: ("dra_upserted", "ClaimFacts", "ml/c") in sink.calls
                   and ("dra_deleted", "SliceFacts", "n1-gpu") in sink.calls)
        assert ("relisted", "resourceslices", ["n1-gpu"]) in sink.calls
    finally:
        wc.stop()


def test_dra_kinds_count_as_listed_where_not_served(apiserver):
    sink = Sink()
    wc = cache(apiserver, sink, DRA_RESOURCES)  # GET /apis/resource.k8s.io/v1: 404
    try:
        wait_until(wc.synced)
        # Listed as empty, again every recheck while the API is not served.
        assert {c[1] for c in sink.calls if c[0] == "relisted" and c[2] == []} == {
            "deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"}
        assert {c[0] for c in sink.calls} == {"relisted"}
    finally:
        wc.stop()


def test_synced_needs_every_kind(apiserver):
    apiserver.list("/api/v1/nodes", ([node("a")], "1"))
    sink = Sink()
    wc = cache(apiserver, sink, (NODES, PODS))  # pods never list: 404
    try:
        wait_until(lambda: ("relisted", "nodes", ["a"]) in sink.calls)
        time.sleep(0.1)
        assert not wc.synced()
    finally:
        wc.stop()


# -- binder ----------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def binder(fake, metrics, **kw):
    return KubeBinder(Api(fake.client()), metrics, wall=lambda: datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc),
                      **kw)


def test_bind_posts_the_binding_with_uid(apiserver):
    path = "/api/v1/namespaces/ml/pods/llama-0/binding"
    apiserver.reply("POST", path, 201, {"kind": "Status", "status": "Success", "code": 201})
    b = binder(apiserver, Metrics(CollectorRegistry()))
    b.bind(PodRef("ml", "llama-0", "uid-1"), "gpu-002")
    b.close()
    assert apiserver.seen("POST", path) == [({}, {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "llama-0", "namespace": "ml", "uid": "uid-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-002"}})]


def test_a_members_mark_carries_its_round_and_its_address_in_one_merge_patch(apiserver):
    from extender.core.model import Address, BindingMark, Place
    path = "/api/v1/namespaces/ml/pods/llama-3"
    apiserver.reply("PATCH", path, 200, pod("llama-3"))
    b = binder(apiserver, Metrics(CollectorRegistry()))
    address = Address("ml/llama-3", "gpu-002", 3, 1, (Place("network.topology.nvidia.com/leaf", "leaf", "s1/l2"),
                                                       Place("network.topology.nvidia.com/accelerator", "nvlink",
                                                             "s1/l2/n3")))
    assert b.mark_all([(PodRef("ml", "llama-3", "uid-3"), BindingMark("r1", "gpu-002", 8, address))]) == [None]
    b.close()
    ((_, body),) = apiserver.seen("PATCH", path)
    assert body == {"metadata": {"uid": "uid-3", "annotations": {
        "railyard.io/binding": '{"round":"r1","node":"gpu-002","size":8}',
        "railyard.io/rank": "3", "railyard.io/slice": "1", "railyard.io/domain.leaf": "s1/l2",
        "railyard.io/domain.nvlink": "s1/l2/n3"}}}
    assert apiserver.content_types[-1] == "application/merge-patch+json"


def test_a_release_nominates_the_member_then_lifts_only_railyards_gate_both_with_its_uid(apiserver):
    path = "/api/v1/namespaces/ml/pods/llama-3"
    apiserver.reply("PATCH", path + "/status", 200, pod("llama-3"))
    apiserver.reply("PATCH", path, 200, pod("llama-3"))
    apiserver.reply("PATCH", "/api/v1/namespaces/ml/pods/gone", 404, status(404, 'pods "gone" not found', "NotFound"))
    b = binder(apiserver, Metrics(CollectorRegistry()))
    assert b.release_all([(PodRef("ml", "llama-3", "uid-3"), "gpu-002"), (PodRef("ml", "gone", "uid-9"), "")]) \
        == [None, None]  # a pod gone has nothing left to lift
    b.close()
    assert apiserver.seen("PATCH", path + "/status") == [
        ({}, {"metadata": {"uid": "uid-3"}, "status": {"nominatedNodeName": "gpu-002"}})]
    assert apiserver.seen("PATCH", path) == [({}, {"metadata": {"uid": "uid-3"}, "spec": {"schedulingGates": [
        {"$patch": "delete", "name": "railyard.io/gang"}]}})]
    assert "application/strategic-merge-patch+json" in apiserver.content_types


def test_a_nomination_keeps_the_gate_and_an_empty_node_clears_it(apiserver):
    path = "/api/v1/namespaces/ml/pods/llama-3"
    apiserver.reply("PATCH", path + "/status", 200, pod("llama-3"))
    b = binder(apiserver, Metrics(CollectorRegistry()))
    assert b.nominate_all([(PodRef("ml", "llama-3", "uid-3"), "gpu-002")]) == [None]
    assert b.nominate_all([(PodRef("ml", "llama-3", "uid-3"), "")]) == [None]
    b.close()
    assert apiserver.seen("PATCH", path + "/status") == [
        ({}, {"metadata": {"uid": "uid-3"}, "status": {"nominatedNodeName": "gpu-002"}}),
        ({}, {"metadata": {"uid": "uid-3"}, "status": {"nominatedNodeName": None}})]
    assert apiserver.seen("PATCH", path) == []  # the gate stays


def test_a_refused_release_names_the_pod_and_the_api_servers_words(apiserver):
    path = "/api/v1/namespaces/ml/pods/llama-3"
    apiserver.reply("PATCH", path + "/status", 409, status(409, "Precondition failed: UID in precondition: uid-3, "
                                                                "UID in object meta: uid-4", "Conflict"))
    b = binder(apiserver, Metrics(CollectorRegistry()))
    (error,) = b.release_all([(PodRef("ml", "llama-3", "uid-3"), "gpu-002")])
    b.close()
    assert isinstance(error, errors.Conflict)
    assert str(error).startswith("lifting the scheduling gate railyard.io/gang of pod ml/llama-3 failed: PATCH "
                                 f"{path}/status: 409 Precondition failed")
    assert apiserver.seen("PATCH", path) == []  # not ungated when its nomination was refused


def test_bind_conflict_is_a_conflict_with_the_api_servers_words(apiserver):
    path = "/api/v1/namespaces/ml/pods/llama-0/binding"
    apiserver.reply("POST", path, 409, status(409, 'Operation cannot be fulfilled on pods/binding "llama-0": '
                                                   'pod llama-0 is already assigned to node "gpu-001"', "Conflict"))
    apiserver.reply("GET", "/api/v1/namespaces/ml/pods/llama-0", 200, {
        "metadata": {"name": "llama-0", "namespace": "ml", "uid": "uid-1"}, "spec": {"nodeName": "gpu-001"}})
    metrics = Metrics(CollectorRegistry())
    b = binder(apiserver, metrics)
    with pytest.raises(errors.Conflict) as exc:
        b.bind(PodRef("ml", "llama-0", "uid-1"), "gpu-002")
    b.close()
    assert str(exc.value) == (f"binding pod ml/llama-0 to gpu-002 failed: POST {path}: 409 Operation cannot be "
                              'fulfilled on pods/binding "llama-0": pod llama-0 is already assigned to node "gpu-001"')


def test_bind_without_an_api_server_is_unavailable():
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = KubeBinder(Api(ApiClient(Configuration(host=f"http://127.0.0.1:{port}"))), Metrics(CollectorRegistry()))
    with pytest.raises(errors.Unavailable, match="binding pod ml/p to n failed: POST"):
        b.bind(PodRef("ml", "p", "u"), "n")
    b.close()


def test_bind_conflict_on_a_pod_already_on_that_node_is_success(apiserver):
    # A retry after a lost reply, or after railyard restarted mid-gang: the Binding is there.
    path = "/api/v1/namespaces/ml/pods/llama-0/binding"
    apiserver.reply("POST", path, 409, status(409, "pod llama-0 is already assigned to node \"gpu-002\"", "Conflict"))
    apiserver.reply("GET", "/api/v1/namespaces/ml/pods/llama-0", 200,
                    {**pod("llama-0"), "metadata": {**pod("llama-0")["metadata"], "uid": "uid-1"},
                     "spec": {"nodeName": "gpu-002"}})
    b = binder(apiserver, Metrics(CollectorRegistry()))
    b.bind(PodRef("ml", "llama-0", "uid-1"), "gpu-002")
    b.close()


def test_delete_pod_with_uid_precondition_and_gone_is_fine(apiserver):
    path = "/api/v1/namespaces/ml/pods/llama-0"
    apiserver.reply("DELETE", path, 200, pod("llama-0"))
    b = binder(apiserver, Metrics(CollectorRegistry()))
    b.delete_pod(PodRef("ml", "llama-0", "uid-1"))
    b.delete_pod(PodRef("ml", "llama-0", "uid-1"))  # second time: 404, already gone
    b.close()
    assert [body["preconditions"] for _, body in apiserver.seen("DELETE", path)] == [{"uid": "uid-1"}] * 2


def test_events_are_rate_limited_per_pod_and_reason(apiserver):
    path = "/api/v1/namespaces/ml/events"
    clock = Clock()
    b = binder(apiserver, Metrics(CollectorRegistry()), clock=clock, event_interval=30)
    p = TRANSLATE.pod(pod("llama-0"))
    b.event(p, "GangWaiting", "gang ml/llama waits at bind: 3 of 4 members")
    b.event(p, "GangWaiting", "gang ml/llama waits at bind: 3 of 4 members")
    b.event(p, "GangPlanned", "gang ml/llama: 4 pods, 32 GPUs on 4 nodes within rack r1", "Normal")
    clock.now = 31
    b.event(p, "GangWaiting", "gang ml/llama waits at bind: 3 of 4 members")
    b.close()
    sent = [body for _, body in apiserver.seen("POST", path)]
    assert [(e["reason"], e["type"]) for e in sent] == [("GangWaiting", "Warning"), ("GangPlanned", "Normal"),
                                                        ("GangWaiting", "Warning")]
    e = sent[0]
    assert e["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "llama-0", "namespace": "ml",
                                   "uid": "uid-llama-0"}
    assert e["metadata"] == {"generateName": "llama-0.", "namespace": "ml"}
    assert (e["source"], e["firstTimestamp"], e["count"]) == ({"component": "railyard"}, "2026-11-29T20:00:00Z", 1)


def test_events_past_the_queue_are_dropped_and_counted(apiserver):
    path = "/api/v1/namespaces/ml/events"
    apiserver.held.add(path)
    apiserver.hold.clear()  # the first event's POST waits; the queue fills behind it
    metrics = Metrics(CollectorRegistry())
    b = binder(apiserver, metrics, event_queue=1)
    b.event(TRANSLATE.pod(pod("a")), "R", "first")
    wait_until(lambda: apiserver.seen("POST", path))
    b.event(TRANSLATE.pod(pod("b")), "R", "queued")
    b.event(TRANSLATE.pod(pod("c")), "R", "dropped")
    assert "railyard_events_dropped_total 1.0" in metrics.exposition()[0].decode()
    apiserver.hold.set()
    b.close()
    assert [body["message"] for _, body in apiserver.seen("POST", path)] == ["first", "queued"]


def served(apiserver, api_version, *plurals):
    apiserver.reply("GET", f"/apis/{api_version}", 200, {
        "kind": "APIResourceList", "groupVersion": api_version,
        "resources": [{"name": p, "namespaced": True, "kind": "X"} for p in plurals]})


def test_each_group_api_is_watched_only_where_served_and_read_as_its_own_kind(apiserver):
    volcano = "/apis/scheduling.volcano.sh/v1beta1/podgroups"
    served(apiserver, "scheduling.volcano.sh/v1beta1", "podgroups", "queues")
    # scheduling.k8s.io/v1beta1 is served (--runtime-config) but without GenericWorkload it has
    # no podgroups: not served as far as railyard is concerned.
    served(apiserver, "scheduling.k8s.io/v1beta1", "priorityclasses")
    item = {"metadata": {"name": "train", "namespace": "ml", "resourceVersion": "5"}, "spec": {"minMember": 4}}
    apiserver.list(volcano, ([item], "5"))
    apiserver.watch(volcano, (404, status(404, "the server could not find the requested resource", "NotFound")))
    sink = Sink()
    wc = cache(apiserver, sink, GROUPS)
    try:
        wait_until(wc.synced)
        volcano_lists = lambda: [[g.key for g in objs] for objs in sink.lists.get("podgroups.scheduling.volcano.sh", [])]
        wait_until(lambda: volcano_lists()[-2:] == [["ml/train"], []])
        assert set(sink.lists) == {r.kind for r in GROUPS}
        assert all(lists == [[]] * len(lists) for kind, lists in sink.lists.items()
                   if kind != "podgroups.scheduling.volcano.sh")
        (listed,) = [o for o in sink.lists["podgroups.scheduling.volcano.sh"] if o]
        # A list item carries no apiVersion: it is read as the watched kind's object.
        assert listed[0].id == ("podgroups.scheduling.volcano.sh", "ml/train")
        assert listed[0].declarations[0].source == "Volcano PodGroup ml/train spec.minMember"
        # The watch said 404 (the CRD was deleted): the kind is listed as empty and looked up again.
        assert not apiserver.seen("GET", "/apis/scheduling.k8s.io/v1beta1/podgroups")
        assert not apiserver.seen("GET", "/apis/scheduling.run.ai/v2alpha2/podgroups")
    finally:
        wc.stop()
def test_deallocate_claim_patches_status_with_the_resource_version_it_saw(apiserver):
    path = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/user-a/status"
    apiserver.reply("PATCH", path, 200, {"metadata": {"name": "user-a"}})
    apiserver.reply("PATCH", path, 409, status(409, "the object has been modified", "Conflict"))
    b = binder(apiserver, Metrics(CollectorRegistry()))
    b.deallocate_claim("ml", "user-a", "uid-a", "41")
    b.deallocate_claim("ml", "user-a", "uid-a", "41")  # changed since: a conflict, nothing to undo
    wait_until(lambda: len(apiserver.seen("PATCH", path)) == 2)
    b.close()
    body = {"metadata": {"uid": "uid-a", "resourceVersion": "41"},
            "status": {"allocation": None, "reservedFor": None, "devices": None}}
    assert apiserver.seen("PATCH", path) == [({}, body), ({}, body)]
    patches = [t for (m, *_), t in zip(apiserver.requests, apiserver.content_types) if m == "PATCH"]
    assert patches == ["application/merge-patch+json"] * 2
