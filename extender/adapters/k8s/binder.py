"""The writes to the API server, one client behind five ports (``core.ports``): Bindings (and
the marks before them), Gates (a member's nominated node, then its scheduling gate lifted),
Evictions (the Eviction API for preemption, the compensating pod delete), Events, and Claims
(clearing the allocation a failed binding cycle left on a ResourceClaim).

``bind_all`` creates a batch of Bindings at once over the async client (``api.AsyncApi``: one
connection pool, one thread) and returns each one's error or None; ``bind`` is one of them,
raising; ``bind_async`` is one of them as a coroutine, for a caller on an event loop. ``delete_pod`` and ``evict`` are synchronous and raise ``errors.KubernetesError``
subclasses (``evict`` returns a PodDisruptionBudget's refusal instead); the service decides
what to retry. ``event`` never blocks: it drops repeats of the same
(pod, reason) within ``event_interval`` seconds and hands the rest to one background thread
through a bounded queue; when the queue is full the event is dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import socket
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, Sequence

from cachetools import TTLCache

from extender.adapters.k8s.api import Api, AsyncApi
from extender.adapters.k8s.errors import Conflict, KubernetesError, NotFound
from extender.adapters.kubeobjects import GATE, binding_annotations
from extender.core.model import BindingMark, PodFacts, PodRef

log = logging.getLogger("railyard.k8s.binder")

COMPONENT = "railyard"
MAX_EVENT_MESSAGE = 1024  # events.k8s.io caps note at 1 kB; core/v1 readers truncate anyway


class BinderObserver(Protocol):
    def event_dropped(self) -> None: ...


def binding(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    """The Binding object; the UID makes the API server refuse a pod recreated under the same name."""
    return {"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def ungate(uid: str) -> dict[str, Any]:
    """A strategic merge patch removing railyard's scheduling gate (``schedulingGates`` merges
    by ``name``), refused if the pod is not the one with ``uid``."""
    return {"metadata": {"uid": uid}, "spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]}}


def deallocation(uid: str, resource_version: str) -> dict[str, Any]:
    """A merge patch clearing a claim's allocation, as kube-scheduler's DRA PostFilter does
    (dynamicresources.go ``deallocateOrDeletePodClaims``); the resourceVersion makes the API
    server refuse it if the claim changed since (a new attempt allocated or reserved it)."""
    return {"metadata": {"uid": uid, "resourceVersion": resource_version},
            "status": {"allocation": None, "reservedFor": None, "devices": None}}


def pod_event(pod: PodFacts, reason: str, message: str, type_: str, now: datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event about ``pod``, as ``kubectl describe pod`` lists it."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{pod.name or 'pod'}.", "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                           "namespace": pod.namespace, "uid": pod.uid},
        "reason": reason,
        "message": message if len(message) <= MAX_EVENT_MESSAGE else message[:MAX_EVENT_MESSAGE - 3] + "...",
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class KubeBinder:
    """The Bindings, Evictions, Events and Claims ports over the API server; ``close()`` stops
    the event and claim threads."""

    def __init__(self, api: Api, observer: BinderObserver, *, event_interval: float = 30.0,
                 event_queue: int = 1000, timeout: float = 15.0, pool: int = 64,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.api = api
        self.writes = AsyncApi(api.client.configuration, pool=pool)
        """Bindings: ``pool`` keep-alive connections, as many Bindings in flight at once."""
        self.observer = observer
        self.timeout = timeout
        self._wall = wall
        self._instance = socket.gethostname()
        self._recent: TTLCache = TTLCache(maxsize=100_000, ttl=event_interval, timer=clock)
        self._recent_lock = threading.Lock()
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=event_queue)
        self._thread = threading.Thread(target=self._send_events, name="k8s-events", daemon=True)
        self._thread.start()
        self._claims: queue.Queue[tuple[str, str, str, str] | None] = queue.Queue(maxsize=event_queue)
        self._claims_thread = threading.Thread(target=self._deallocate_claims, name="k8s-claims", daemon=True)
        self._claims_thread.start()

    def bind_all(self, bindings: Sequence[tuple[PodRef, str]]) -> list[KubernetesError | None]:
        """Create every (pod, node) Binding concurrently: per Binding None (bound, or already
        bound to that node) or its error."""
        return self.writes.run(self._bind_all(bindings))

    async def bind_async(self, pod: PodRef, node: str) -> KubernetesError | None:
        """One Binding (``bind_all``'s), awaited on the caller's loop: run right there when it
        is the pool's own loop, else handed to that loop (one hop each way, no thread held)."""
        if asyncio.get_running_loop() is self.writes.loop:
            return await self._bind(pod, node)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._bind(pod, node), self.writes.loop))

    def bind(self, pod: PodRef, node: str) -> None:
        """One Binding (``bind_all``), raising its error."""
        error = self.bind_all([(pod, node)])[0]
        if error is not None:
            raise error

    async def _bind_all(self, bindings: Sequence[tuple[PodRef, str]]) -> list[KubernetesError | None]:
        return list(await asyncio.gather(*(self._bind(pod, node) for pod, node in bindings)))

    async def _bind(self, pod: PodRef, node: str) -> KubernetesError | None:
        """A pod already bound to this node (a retry after a lost reply) is success."""
        namespace, name, uid = pod.namespace, pod.name, pod.uid
        try:
            await self.writes.json("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
                                   body=binding(namespace, name, uid, node), timeout=self.timeout)
            return None
        except Conflict as exc:
            if await self._bound_to(namespace, name, uid) == node:
                return None
            return Conflict(f"binding pod {namespace}/{name} to {node} failed: {exc}", exc.status)
        except KubernetesError as exc:  # the service counts and retries each attempt
            return type(exc)(f"binding pod {namespace}/{name} to {node} failed: {exc}", exc.status)

    async def _bound_to(self, namespace: str, name: str, uid: str) -> str | None:
        try:
            pod = await self.writes.json("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", timeout=self.timeout)
        except KubernetesError:
            return None
        if (pod.get("metadata") or {}).get("uid") != uid:
            return None
        return (pod.get("spec") or {}).get("nodeName") or None

    def mark_all(self, marks: Sequence[tuple[PodRef, BindingMark]]) -> list[KubernetesError | None]:
        """Write each member's Binding round on its pod, concurrently: a JSON merge patch that
        carries the uid, so a pod recreated under the same name is refused, not marked."""
        return self.writes.run(self._mark_all(marks))

    async def _mark_all(self, marks: Sequence[tuple[PodRef, BindingMark]]) -> list[KubernetesError | None]:
        return list(await asyncio.gather(*(self._mark(pod, mark) for pod, mark in marks)))

    async def _mark(self, pod: PodRef, mark: BindingMark) -> KubernetesError | None:
        patch = {"metadata": {"uid": pod.uid, "annotations": binding_annotations(mark)}}
        try:
            await self.writes.json("PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", body=patch,
                                   timeout=self.timeout, content_type="application/merge-patch+json")
            return None
        except KubernetesError as exc:
            return type(exc)(f"marking pod {pod.key} with its Binding round failed: {exc}", exc.status)

    def release_all(self, pods: Sequence[tuple[PodRef, str]]) -> list[KubernetesError | None]:
        """Nominate each pod to its node (``status.nominatedNodeName``) and then lift railyard's
        scheduling gate, concurrently; both patches carry the uid. A pod gone is not an error."""
        return self.writes.run(self._release_all(pods))

    def nominate_all(self, pods: Sequence[tuple[PodRef, str]]) -> list[KubernetesError | None]:
        """Nominate each pod to its node (``status.nominatedNodeName``, the uid as precondition; an
        empty node clears it), concurrently, leaving its gate; a pod gone is not an error."""
        return self.writes.run(self._release_all(pods, lift=False))

    async def _release_all(self, pods: Sequence[tuple[PodRef, str]], lift: bool = True) -> list[KubernetesError | None]:
        return list(await asyncio.gather(*(self._release(pod, node, lift) for pod, node in pods)))

    async def _release(self, pod: PodRef, node: str, lift: bool) -> KubernetesError | None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        try:
            if node or not lift:  # nominating to no node clears the nomination
                await self.writes.json("PATCH", path + "/status", timeout=self.timeout,
                                       body={"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node or None}},
                                       content_type="application/merge-patch+json")
            if lift:
                await self.writes.json("PATCH", path, body=ungate(pod.uid), timeout=self.timeout,
                                       content_type="application/strategic-merge-patch+json")
            return None
        except NotFound:
            return None
        except KubernetesError as exc:
            what = f"lifting the scheduling gate {GATE} of" if lift else f"nominating {node} for"
            return type(exc)(f"{what} pod {pod.key} failed: {exc}", exc.status)

    def delete_pod(self, pod: PodRef) -> None:
        """Delete the pod if it still has its UID; a pod already gone is not an error."""
        namespace, name, uid = pod.namespace, pod.name, pod.uid
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            self.api.json("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body, timeout=self.timeout)
        except NotFound:
            return
        except KubernetesError as exc:
            raise type(exc)(f"deleting pod {namespace}/{name} (uid {uid}) failed: {exc}", exc.status) from None

    def evict(self, pod: PodRef, dry_run: bool = False) -> str | None:
        """Evict the pod through the Eviction API (policy/v1), so PodDisruptionBudgets are
        honoured. None: evicted, or already gone (404, or another pod now has the name: 409 on
        the uid precondition); else the API server's refusal: a budget that allows no
        disruption now (429, 403) or a pod under more than one budget (500). ``dry_run``: only ask
        (``dryRun: [All]``: the API server checks the budget and changes nothing). Other
        failures raise ``KubernetesError``."""
        namespace, name, uid = pod.namespace, pod.name, pod.uid
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if dry_run:
            options["dryRun"] = ["All"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": options}
        try:
            self.api.json("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body=body,
                          timeout=self.timeout)
        except (NotFound, Conflict):
            return None
        except KubernetesError as exc:
            # pkg/registry/core/pod/storage/eviction.go (v1.37.2): 429 "Cannot evict pod as it
            # would violate the pod's disruption budget.", 403 when its disruptionsAllowed is
            # negative, 500 "This pod has more than one PodDisruptionBudget, ..."; a 429 from
            # API priority and fairness is no refusal.
            if exc.status in (403, 429, 500) and "disruption" in str(exc).lower():
                return str(exc).split(": ", 1)[-1]
            raise type(exc)(f"evicting pod {namespace}/{name} (uid {uid}) failed: {exc}", exc.status) from None
        return None

    def event(self, pod: PodFacts, reason: str, message: str, type_: str = "Warning") -> None:
        key = (pod.uid or pod.key, reason)
        with self._recent_lock:
            if key in self._recent:
                return  # said within the interval: a rate limit, not a drop
            self._recent[key] = True
        try:
            self._events.put_nowait(pod_event(pod, reason, message, type_, self._wall(), self._instance))
        except queue.Full:
            self.observer.event_dropped()

    def deallocate_claim(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        try:
            self._claims.put_nowait((namespace, name, uid, resource_version))
        except queue.Full:
            log.warning("ResourceClaim %s/%s not deallocated: the queue is full", namespace, name)

    def close(self, timeout: float = 5.0) -> None:
        for q in (self._events, self._claims):
            try:
                q.put(None, timeout=timeout)
            except queue.Full:
                pass
        self._thread.join(timeout)
        self._claims_thread.join(timeout)

    def _deallocate_claims(self) -> None:
        while (item := self._claims.get()) is not None:
            namespace, name, uid, rv = item
            try:
                self.api.json("PATCH", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status",
                              body=deallocation(uid, rv), content_type="application/merge-patch+json",
                              timeout=self.timeout)
                log.info("deallocated ResourceClaim %s/%s (left allocated by a failed binding cycle)", namespace, name)
            except (Conflict, NotFound):
                pass  # changed or gone since: the scheduler moved on, nothing to undo
            except KubernetesError as exc:
                log.warning("ResourceClaim %s/%s not deallocated: %s", namespace, name, exc)
        self.writes.close()

    def _send_events(self) -> None:
        while True:
            ev = self._events.get()
            if ev is None:
                return
            ns = ev["metadata"]["namespace"]
            try:
                self.api.json("POST", f"/api/v1/namespaces/{ns}/events", body=ev, timeout=self.timeout)
            except KubernetesError as exc:
                self.observer.event_dropped()
                log.warning("event %s on pod %s/%s not sent: %s", ev["reason"], ns,
                            ev["involvedObject"]["name"], exc)
