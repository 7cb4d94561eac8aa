"""List and watch Nodes, Pods, PodGroups and the DRA kinds, and deliver every change to a CacheSink.

One thread per kind, each the same loop (the client-go reflector, in small):

    list (paged)  -> sink.relisted(kind, items), remember the list's resourceVersion
    watch from rv -> sink.*_upserted / *_deleted per event; BOOKMARKs only move rv
    watch ends    -> watch again from the last rv
    410 Gone      -> list again
    other failure -> back off (0.5 s doubling to 30 s, with jitter) and resume

Nothing here is on a verb's path: verbs read what the sink keeps. Objects arrive as raw
Kubernetes JSON dicts (no client model classes) and are translated to facts here, once
(``adapters.kubeobjects.Translator``), before the sink sees them.

Pods are watched with ``status.phase!=Succeeded,status.phase!=Failed``, as kube-scheduler
does: a pod that finishes arrives as ``pod_deleted`` (its GPUs are free) carrying its last
matching state (phase Running, not Succeeded: that is what the API server sends), and the
cache never holds finished pods. Each convention's group object (``kubeobjects.GROUP_APIS``:
scheduler-plugins, Kubernetes, Volcano and KAI PodGroups; JobSets, LeaderWorkerSets and Jobs
labelled ``railyard.io/gang=true``, for the workload kinds switched on) is watched only while its API is
served: until then (a CRD not installed, a beta API not enabled) the kind counts as listed with
no objects and its API is looked up again every ``podgroup_recheck`` seconds, so a CRD installed
later is picked up; an API that goes away is listed as empty and rechecked the same way. The DRA
kinds (``resource.k8s.io/v1``: DeviceClasses, ResourceSlices, ResourceClaims,
ResourceClaimTemplates) are watched the same way, only where that API is served.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import urllib3

from extender.adapters.k8s.api import Api, json_lines
from extender.adapters.k8s.errors import Gone, KubernetesError, NotFound
from extender.adapters.kubeobjects import GROUP_APIS, Translator
from extender.core.devices.facts import DraFacts
from extender.core.model import GroupFacts, NodeFacts, PodFacts

log = logging.getLogger("railyard.k8s.watch")


class CacheSink(Protocol):
    """Receives the cluster's state; implemented by ``extender.service``. Called from the
    watch threads (one per kind), so calls for different kinds may run concurrently."""

    def node_upserted(self, node: NodeFacts) -> None: ...
    def node_deleted(self, name: str) -> None: ...
    def pod_upserted(self, pod: PodFacts) -> None: ...
    def pod_deleted(self, pod: PodFacts) -> None: ...
    def group_upserted(self, group: GroupFacts) -> None: ...
    def group_deleted(self, group: GroupFacts) -> None: ...
    def dra_upserted(self, facts: DraFacts) -> None: ...
    def dra_deleted(self, facts: DraFacts) -> None: ...
    def relisted(self, kind: str, objects: list) -> None: ...  # kind: a Resource.kind


class WatchObserver(Protocol):
    def watch_event(self) -> None: ...
    def cache_objects(self, kind: str, n: int) -> None: ...


@dataclass(frozen=True)
class Resource:
    kind: str
    path: str
    field_selector: str = ""
    label_selector: str = ""
    api: str = ""
    """Discovery path of the API serving this kind, when it may be absent (a CRD)."""


NODES = Resource("nodes", "/api/v1/nodes")
PODS = Resource("pods", "/api/v1/pods", field_selector="status.phase!=Succeeded,status.phase!=Failed")
GROUPS = tuple(Resource(g.kind, f"/apis/{g.api_version}/{g.plural}", label_selector=g.label_selector,
                        api=f"/apis/{g.api_version}")
               for g in GROUP_APIS)
PODGROUPS = GROUPS[0]
"""scheduler-plugins PodGroups (``scheduling.x-k8s.io/v1alpha1``)."""
_DRA_API = "/apis/resource.k8s.io/v1"
DRA = {  # Resource kind -> the object kind the translator takes
    "deviceclasses": "DeviceClass", "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate",
}
DRA_RESOURCES = tuple(Resource(kind, f"{_DRA_API}/{kind}", api=_DRA_API) for kind in DRA)
RESOURCES = (NODES, PODS, *GROUPS, *DRA_RESOURCES)
KINDS = tuple(r.kind for r in RESOURCES)
"""Every kind the cache lists: what the service waits for before it plans a gang."""
_GROUP_KINDS = frozenset(r.kind for r in GROUPS)
_WORKLOAD_OF = {g.kind: g.workload for g in GROUP_APIS}


def resources_for(workloads: tuple[str, ...]) -> tuple[Resource, ...]:
    """Every kind the cache lists, less the workload objects of kinds switched off."""
    return tuple(r for r in RESOURCES if not _WORKLOAD_OF.get(r.kind) or _WORKLOAD_OF[r.kind] in workloads)


def translate(translator: Translator, kind: str, obj: dict) -> NodeFacts | PodFacts | GroupFacts | DraFacts:
    if kind == "nodes":
        return translator.node(obj)
    if kind == "pods":
        return translator.pod(obj, keep=True)  # a pod that exists: its next event reads the memo
    if kind in _GROUP_KINDS:
        # By the watched kind, not the object's apiVersion: list items of a built-in API carry none.
        return translator.group(obj, kind)
    if kind in DRA:
        return translator.dra(DRA[kind], obj)
    raise ValueError(f"unknown kind {kind!r}")


def deliver(sink: CacheSink, translator: Translator, kind: str, event_type: str, obj: dict) -> int:
    """Hand one watch event to the sink, as facts; returns the change in object count."""
    facts = translate(translator, kind, obj)
    deleted = event_type == "DELETED"
    if isinstance(facts, NodeFacts):
        sink.node_deleted(facts.name) if deleted else sink.node_upserted(facts)
    elif isinstance(facts, PodFacts):
        sink.pod_deleted(facts) if deleted else sink.pod_upserted(facts)
    elif isinstance(facts, GroupFacts):
        sink.group_deleted(facts) if deleted else sink.group_upserted(facts)
    else:
        sink.dra_deleted(facts) if deleted else sink.dra_upserted(facts)
    return {"ADDED": 1, "DELETED": -1}.get(event_type, 0)


class WatchCache:
    def __init__(self, api: Api, sink: CacheSink, observer: WatchObserver, translator: Translator, *,
                 resources: tuple[Resource, ...] = RESOURCES, page_size: int = 500,
                 watch_timeout: int = 300, backoff: tuple[float, float] = (0.5, 30.0),
                 podgroup_recheck: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.sink, self.observer, self.translator = api, sink, observer, translator
        self.resources = resources
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.podgroup_recheck = podgroup_recheck
        self._clock = clock
        self._stop = threading.Event()
        self._listed: set[str] = set()
        self._counts: dict[str, int] = {r.kind: 0 for r in resources}
        self._last_event: float | None = None
        self._streams: dict[str, urllib3.BaseHTTPResponse] = {}
        self._threads: list[threading.Thread] = []

    # -- public ----------------------------------------------------------------------------
    def start(self) -> None:
        for r in self.resources:
            t = threading.Thread(target=self._run, args=(r,), name=f"watch-{r.kind}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for resp in list(self._streams.values()):
            getattr(resp, "shutdown", resp.close)()  # unblocks a parked read (urllib3 >= 2.3)
        for t in self._threads:
            t.join(timeout)

    def synced(self) -> bool:
        """Every kind's first list has been delivered (drives /readyz)."""
        return all(r.kind in self._listed for r in self.resources)

    def last_event_age(self) -> float | None:
        """Seconds since the last event or list, None before the first."""
        return None if self._last_event is None else self._clock() - self._last_event

    # -- one kind ----------------------------------------------------------------------------
    def _run(self, r: Resource) -> None:
        rv: str | None = None
        failures = 0
        served = True
        while not self._stop.is_set():
            try:
                if r.api and (rv is None or not served):
                    served = self._served(r)
                    if not served:
                        rv = None
                        self._relisted(r, [])  # nothing to wait for: the API is not there
                        self._stop.wait(self.podgroup_recheck)
                        continue
                if rv is None:
                    rv = self._list(r)
                rv = self._watch(r, rv)
                failures = 0
            except Gone:
                log.info("%s: resourceVersion %s too old, listing again", r.kind, rv)
                rv = None
                failures += 1
                if failures > 1:  # Gone again right after a list: don't spin
                    self._pause(r, failures - 1)
            except NotFound as exc:
                log.warning("%s: %s", r.kind, exc)
                rv, served = None, not r.api
                failures += 1
                self._pause(r, failures)
            except Exception as exc:  # network, API server errors, bad JSON: back off and resume
                if self._stop.is_set():
                    return
                failures += 1
                level = logging.WARNING if isinstance(exc, (KubernetesError, urllib3.exceptions.HTTPError,
                                                            OSError)) else logging.ERROR
                log.log(level, "%s: watch failed (%s: %s); retry %d", r.kind, type(exc).__name__, exc, failures,
                        exc_info=level == logging.ERROR)
                self._pause(r, failures)

    def _pause(self, r: Resource, failures: int) -> None:
        base, cap = self.backoff
        self._stop.wait(min(cap, base * 2 ** (failures - 1)) * random.uniform(0.8, 1.2))

    def _served(self, r: Resource) -> bool:
        try:
            found = self.api.json("GET", r.api, timeout=10)
        except NotFound:
            return False
        plural = r.path.rsplit("/", 1)[-1]
        return any(res.get("name") == plural for res in found.get("resources") or [])

    def _list(self, r: Resource) -> str:
        items: list = []
        cont = ""
        while True:
            query: list[tuple[str, Any]] = [("limit", self.page_size)]
            if r.field_selector:
                query.append(("fieldSelector", r.field_selector))
            if r.label_selector:
                query.append(("labelSelector", r.label_selector))
            if cont:
                query.append(("continue", cont))
            page = self.api.json("GET", r.path, query=query, timeout=(10, 120))
            for obj in page.get("items") or []:
                items.append(translate(self.translator, r.kind, obj))
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                self._relisted(r, items)
                return meta.get("resourceVersion") or ""

    def _relisted(self, r: Resource, items: list) -> None:
        self.sink.relisted(r.kind, items)
        self._counts[r.kind] = len(items)
        self._listed.add(r.kind)
        self._touch(r)

    def _touch(self, r: Resource) -> None:
        self._last_event = self._clock()
        self.observer.watch_event()
        self.observer.cache_objects(r.kind, self._counts[r.kind])

    def _watch(self, r: Resource, rv: str) -> str:
        query: list[tuple[str, Any]] = [("watch", "true"), ("resourceVersion", rv),
                                        ("allowWatchBookmarks", "true"), ("timeoutSeconds", self.watch_timeout)]
        if r.field_selector:
            query.append(("fieldSelector", r.field_selector))
        if r.label_selector:
            query.append(("labelSelector", r.label_selector))
        # The server ends the watch after timeoutSeconds and sends a bookmark about once a
        # minute, so a read silent for much longer than that means a dead connection.
        resp = self.api.request("GET", r.path, query=query, timeout=(10, self.watch_timeout + 60))
        self._streams[r.kind] = resp
        finished = False
        try:
            for ev in json_lines(resp):
                if self._stop.is_set():
                    break
                kind, obj = ev.get("type") or "", ev.get("object") or {}
                if kind == "ERROR":
                    code, message = obj.get("code", 0), obj.get("message", "watch error")
                    if code == 410:
                        raise Gone(f"watch {r.path}: {message}", 410)
                    raise KubernetesError(f"watch {r.path}: {code} {message}", code)
                if kind != "BOOKMARK":
                    try:
                        self._counts[r.kind] += deliver(self.sink, self.translator, r.kind, kind, obj)
                    except Exception:
                        log.exception("%s: the cache sink failed on %s %s", r.kind, kind,
                                      (obj.get("metadata") or {}).get("name"))
                self._touch(r)
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
            finished = True
        finally:
            self._streams.pop(r.kind, None)
            # A stream cut short still has unread bytes: that connection must not be reused.
            resp.release_conn() if finished else resp.close()
        return rv
