"""The k8s adapters against a real API server: the watch cache sees what happens, the binder's
Bindings, deletes and Events land, and its errors are railyard's."""

from __future__ import annotations

import threading

import kubernetes
import pytest
from prometheus_client import CollectorRegistry

from extender.adapters.k8s import errors
from extender.adapters.k8s.api import Api
from extender.adapters.k8s.binder import KubeBinder
from extender.adapters.k8s.watch_cache import WatchCache
from extender.adapters.metrics import Metrics
from extender.core.model import NodeFacts, PodFacts, PodRef
from tests.topologies import TRANSLATE

from .helpers import CORDONED, SCHEDULABLE, TAINTED, delete_pods, gpu_pod, namespace, unique, wait_for


class Sink:
    """The CacheSink port, keeping the facts it was told (the way the service would)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.nodes: dict[str, NodeFacts] = {}
        self.pods: dict[str, PodFacts] = {}
        self.deleted: list[PodFacts] = []
        self.relists: list[tuple[str, int]] = []

    def node_upserted(self, node):
        with self.lock:
            self.nodes[node.name] = node

    def node_deleted(self, name):
        with self.lock:
            self.nodes.pop(name, None)

    def pod_upserted(self, pod):
        with self.lock:
            self.pods[pod.uid] = pod

    def pod_deleted(self, pod):
        with self.lock:
            self.pods.pop(pod.uid, None)
            self.deleted.append(pod)

    def group_upserted(self, group):
        pass

    def group_deleted(self, group):
        pass

    def relisted(self, kind, objects):
        with self.lock:
            self.relists.append((kind, len(objects)))
            if kind == "nodes":
                self.nodes = {o.name: o for o in objects}
            elif kind == "pods":
                self.pods = {o.uid: o for o in objects}


@pytest.fixture(scope="module")
def api(gpu_cluster):
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(gpu_cluster.kubeconfig), client_configuration=configuration)
    return Api(kubernetes.client.ApiClient(configuration))


@pytest.fixture
def watched(api):
    sink = Sink()
    cache = WatchCache(api, sink, Metrics(CollectorRegistry()), TRANSLATE)
    cache.start()
    try:
        wait_for(cache.synced, 30, "the watch cache's first lists")
        yield cache, sink
    finally:
        cache.stop()


def test_first_lists(watched):
    cache, sink = watched
    assert {*SCHEDULABLE, CORDONED, TAINTED} <= set(sink.nodes)
    assert ("podgroups", 0) in sink.relists  # no PodGroup CRD in this cluster: listed as empty
    assert sink.nodes[SCHEDULABLE[0]].gpus == 8 and sink.nodes[CORDONED].unschedulable
    assert cache.last_event_age() is not None


def test_bind_event_delete_seen_by_the_watch(gpu_cluster, api, watched):
    _, sink = watched
    core = gpu_cluster.core
    ns = namespace(core, "k8s-adapters")
    binder = KubeBinder(api, Metrics(CollectorRegistry()))
    try:
        # No scheduler serves this name: the pod waits for us to bind it.
        name = unique("held")
        created = core.create_namespaced_pod(ns, gpu_pod(name, 8, scheduler_name="nobody"))
        uid = created.metadata.uid
        wait_for(lambda: uid in sink.pods, 10, "the new pod in the cache")

        with pytest.raises(errors.Conflict, match=f"binding pod {ns}/{name} to {SCHEDULABLE[0]} failed"):
            binder.bind(PodRef(ns, name, "not-" + uid), SCHEDULABLE[0])  # the UID precondition holds
        binder.bind(PodRef(ns, name, uid), SCHEDULABLE[0])
        wait_for(lambda: getattr(sink.pods.get(uid), "node", None) == SCHEDULABLE[0], 10,
                 "the binding in the cache")
        with pytest.raises(errors.Conflict, match="already"):
            binder.bind(PodRef(ns, name, uid), SCHEDULABLE[1])
        binder.bind(PodRef(ns, name, uid), SCHEDULABLE[0])  # already there: a retry after a lost reply succeeds

        binder.event(sink.pods[uid], "GangWaiting", "gang ml/x waits at bind: 1 of 2 members")

        def event_sent():
            return [e for e in core.list_namespaced_event(ns).items if e.reason == "GangWaiting"]
        (event,) = wait_for(event_sent, 10, "the event")
        assert (event.involved_object.uid, event.type, event.source.component) == (uid, "Warning", "railyard")

        binder.delete_pod(PodRef(ns, name, uid))
        wait_for(lambda: any(p.uid == uid for p in sink.deleted), 30, "the delete in the cache")
        binder.delete_pod(PodRef(ns, name, uid))  # gone already: not an error
    finally:
        binder.close()
        delete_pods(core, ns)


def test_finished_pods_leave_the_cache(gpu_cluster, api, watched):
    _, sink = watched
    core = gpu_cluster.core
    ns = namespace(core, "k8s-adapters")
    binder = KubeBinder(api, Metrics(CollectorRegistry()))
    try:
        name = unique("short")
        uid = core.create_namespaced_pod(ns, gpu_pod(name, 1, scheduler_name="nobody", sim_runtime="1s")).metadata.uid
        binder.bind(PodRef(ns, name, uid), SCHEDULABLE[1])
        # kwok runs it, then it Succeeds: the field selector turns that into a delete.
        wait_for(lambda: any(p.uid == uid for p in sink.deleted), 60, "the finished pod to leave")
        (gone,) = [p for p in sink.deleted if p.uid == uid]
        # The API server sends the last state that matched the selector, not the Succeeded one.
        assert gone.phase == "Running"
        assert uid not in sink.pods
    finally:
        binder.close()
        delete_pods(core, ns)
