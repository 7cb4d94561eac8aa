"""The pods railyard remembers between calls, indexed so that no call scans every pod.

- pending: unbound, unfinished pods that ask for GPUs or name a gang, by key and by gang
  (planning a gang reads its members without scanning the cluster's pending pods);
- bound: bound pods of named gangs, by uid and by gang (preempt, replacements), railyard's own
  Bindings included before the watch shows them;
- done: leads (``PodFacts.lead``) that ran and Succeeded, by gang, until deleted: members of
  their gang that need no slot again (an initializer that finished before the others existed);
- running: every bound, unfinished pod by node and uid (who a preemption may evict);
- seen: pods filter was called for (bind carries only names).

GPU usage goes to ``ClusterState``; this index keeps who is who. Not thread-safe.

Anyone who reaches the extender can name pods that do not exist (issue 11: RSS 92 -> 299 MB in
one fuzz run), so what filter alone taught railyard is bounded and expires (``expire``, called
with ``now`` by the service on every call):

- a pod the watch has not shown is *unshown*: filter pends it (the watch may lag), but at most
  ``max_unshown`` pods and ``max_unshown_bytes`` of them are kept, and each for ``ttl`` seconds
  after filter last saw it; then it is forgotten as if deleted (its gang loses the member);
- what filter saw of a pod the watch shows is the watch's own copy (no memory of its own) and
  is dropped ``ttl`` seconds after filter last asked (bind then finds the pod pending).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Mapping

from extender.core.model import PodFacts
from extender.core.cluster.state import ClusterState

SEEN_TTL_SECONDS = 60.0
"""How long after its last filter call railyard remembers a pod for bind. Bind follows filter
within the same scheduling attempt (milliseconds to seconds); the watch shows a real pod long
before that."""
MAX_UNSHOWN = 5_000
"""Pods known only from filter calls (the watch has not shown them) kept at once."""
MAX_UNSHOWN_BYTES = 32 << 20
"""... and the memory they may hold, as ``footprint`` estimates it."""


class PodIndex:
    def __init__(self) -> None:
        self._pending: dict[str, PodFacts] = {}
        self._pending_by_gang: dict[str, dict[str, PodFacts]] = {}
        self._bound: dict[str, PodFacts] = {}
        self._bound_by_gang: dict[str, set[str]] = {}
        self._seen: dict[str, PodFacts] = {}
        self._seen_at: dict[str, float] = {}
        """key -> when filter last saw the pod, oldest first."""
        self._unshown: dict[str, int] = {}
        """keys filter pended that the watch has not shown -> their footprint, oldest first."""
        self._unshown_bytes = 0
        self.ttl, self.max_unshown, self.max_unshown_bytes = SEEN_TTL_SECONDS, MAX_UNSHOWN, MAX_UNSHOWN_BYTES
        self.forgotten = 0
        """Unshown pods forgotten so far (expired, or the oldest past a bound)."""
        self._running: dict[str, dict[str, PodFacts]] = {}
        self._done: dict[str, dict[str, PodFacts]] = {}
        """gang -> uid -> its leads that ran and Succeeded, until the pod is deleted."""
        self._node_of: dict[str, str] = {}

    # -- watch events --------------------------------------------------------------------

    def changed(self, pod: PodFacts, state: ClusterState) -> None:
        """A pod was created or updated (watch), with its GPU usage recorded in ``state``."""
        uid = pod.uid or pod.key
        self._shown(pod.key)
        if pod.finished:
            self.gone(pod, state)
            if pod.phase == "Succeeded" and pod.node and pod.gang.named and pod.lead:
                self._done.setdefault(pod.gang.key, {})[uid] = pod
            return
        if pod.node:
            self._unpend(pod.key)
            self._unsee(pod.key)  # bind has happened: only filter-to-bind needs it
            usage = pod.usage
            if usage is not None:
                state.upsert_pod(usage, member_key=pod.key)
                self._run(uid, pod)
            if pod.gang.named:
                self._bound[uid] = pod
                self._bound_by_gang.setdefault(pod.gang.key, set()).add(uid)
            return
        if pod.gang.named or pod.gpus > 0:
            self._pend(pod)

    def gone(self, pod: PodFacts, state: ClusterState) -> None:
        """A pod was deleted or finished: its GPUs are free."""
        uid = pod.uid or pod.key
        self._shown(pod.key)
        state.delete_pod(uid)
        self._unbind(uid)
        self._stop(uid)
        self._unpend(pod.key)

    def deleted(self, pod: PodFacts, state: ClusterState) -> None:
        """A pod was deleted: its GPUs and any slot reserved for it are free; nobody binds it."""
        self.gone(pod, state)
        state.drop_slot(pod.key)
        self._unsee(pod.key)
        done = self._done.get(pod.gang.key)
        if done is not None and done.pop(pod.uid or pod.key, None) is not None and not done:
            del self._done[pod.gang.key]

    def clear(self, state: ClusterState) -> None:
        """Before a full relist: every pod railyard knew is replaced."""
        for uid in state.pod_uids():
            state.delete_pod(uid)
        self._pending.clear()
        self._pending_by_gang.clear()
        self._bound.clear()
        self._bound_by_gang.clear()
        self._unshown.clear()  # their pending entries are gone; what filter saw expires
        self._unshown_bytes = 0
        self._running.clear()
        self._node_of.clear()
        self._done.clear()

    # -- filter --------------------------------------------------------------------------

    def filtered(self, pod: PodFacts, now: float) -> None:
        """filter was called for the pod at ``now``: bind will name it."""
        key = pod.key
        self._seen_at.pop(key, None)
        self._seen_at[key] = now
        if key in self._pending and key not in self._unshown:
            self._seen[key] = self._pending[key]
            return
        self._seen[key] = pod
        self._shown(key)
        weight = footprint(pod)
        self._unshown[key] = weight
        self._unshown_bytes += weight
        if not pod.node:
            self._pend(pod)

    def took_bound(self, key: str, node: str) -> None:
        """railyard bound the pod to ``node``; the watch will show it. Until it does, a member of
        a named gang counts as bound there (``bound_pods``): a next round of its gang, planned
        before the watch caught up, must not ask for a member again. Its GPUs stay counted by
        the slot railyard bound it to (``state.keep_bound``), not here."""
        pod = self._pending.get(key) or self._seen.get(key)
        self._unpend(key)
        self._shown(key)  # the API server took its Binding: it exists
        if pod is not None and pod.gang.named:
            uid = pod.uid or pod.key
            self._bound[uid] = replace(pod, node=node)
            self._bound_by_gang.setdefault(pod.gang.key, set()).add(uid)

    def expire(self, now: float) -> tuple[list[PodFacts], list[PodFacts]]:
        """Forget the oldest unshown pods past the bounds, then what filter saw ``ttl`` or more
        seconds ago. Returns the unshown pods forgotten, (past a bound, expired): the gangs
        holding slots for them lose them as members (the caller's part)."""
        crowded, expired = [], []
        while self._unshown and (len(self._unshown) > self.max_unshown
                                 or self._unshown_bytes > self.max_unshown_bytes):
            crowded.append(self._forget(next(iter(self._unshown))))
        while self._seen_at:
            key, at = next(iter(self._seen_at.items()))
            if now - at < self.ttl:
                break
            if key in self._unshown:
                expired.append(self._forget(key))
            else:
                self._unsee(key)
        self.forgotten += len(crowded) + len(expired)
        return crowded, expired

    def unshown(self) -> tuple[int, int]:
        """(pods known only from filter, their footprint in bytes)."""
        return len(self._unshown), self._unshown_bytes

    def sizes(self) -> dict[str, int]:
        """Pods in each index; lengths only, so another thread may read them without the lock."""
        return {"pods_pending": len(self._pending), "pods_bound": len(self._bound),
                "pods_running": len(self._node_of), "pods_seen": len(self._seen), "pods_unshown": len(self._unshown)}

    # -- reads ---------------------------------------------------------------------------

    def seen_pod(self, key: str) -> PodFacts | None:
        """The pod as filter last saw it, until the watch shows it bound or deleted."""
        return self._seen.get(key)

    def unshown_pod(self, key: str) -> bool:
        """Filter saw the pod and the watch has not shown it (nor has railyard bound it)."""
        return key in self._unshown

    def pending_pod(self, key: str) -> PodFacts | None:
        return self._pending.get(key)

    def uids(self) -> dict[str, str]:
        """key -> uid of every pending or bound pod the watch showed (what a relist compares)."""
        known = {p.key: p.uid for p in self._bound.values() if p.uid}
        known.update((k, p.uid) for k, p in self._pending.items() if p.uid and k not in self._unshown)
        return known

    def bound_named(self, key: str) -> PodFacts | None:
        return next((p for p in self._bound.values() if p.key == key), None)

    def pending_of(self, gang: str) -> list[PodFacts]:
        return list(self._pending_by_gang.get(gang, {}).values())

    def has_pending(self, gang: str) -> bool:
        return gang in self._pending_by_gang

    def bound_uids(self, gang: str) -> set[str]:
        return self._bound_by_gang.get(gang, set())

    def bound_pods(self, gang: str) -> list[PodFacts]:
        """The gang's members running on nodes (as the watch shows them)."""
        return [self._bound[uid] for uid in sorted(self._bound_by_gang.get(gang, ()))]

    def done_pods(self, gang: str) -> list[PodFacts]:
        """The gang's leads that ran and Succeeded (and still exist)."""
        return list(self._done.get(gang, {}).values())

    def bound_gang_of(self, uid: str) -> str | None:
        pod = self._bound.get(uid)
        return pod.gang.key if pod else None

    def on_node(self, node: str) -> Mapping[str, PodFacts]:
        """uid -> every bound, unfinished pod on the node (read-only)."""
        return self._running.get(node, {})

    def running_pod(self, uid: str) -> PodFacts | None:
        node = self._node_of.get(uid)
        return self._running[node].get(uid) if node is not None else None

    def __len__(self) -> int:
        return len(self._pending)

    # -- internals -----------------------------------------------------------------------

    def _forget(self, key: str) -> PodFacts:
        pod = self._seen[key]
        self._shown(key)
        self._unpend(key)
        self._unsee(key)
        return pod

    def _shown(self, key: str) -> None:
        weight = self._unshown.pop(key, None)
        if weight is not None:
            self._unshown_bytes -= weight

    def _unsee(self, key: str) -> None:
        self._seen.pop(key, None)
        self._seen_at.pop(key, None)

    def _pend(self, pod: PodFacts) -> None:
        self._unpend(pod.key)
        self._pending[pod.key] = pod
        self._pending_by_gang.setdefault(pod.gang.key, {})[pod.key] = pod

    def _unpend(self, key: str) -> None:
        pod = self._pending.pop(key, None)
        if pod is not None:
            members = self._pending_by_gang[pod.gang.key]
            del members[key]
            if not members:
                del self._pending_by_gang[pod.gang.key]

    def _run(self, uid: str, pod: PodFacts) -> None:
        old = self._node_of.get(uid)
        if old is not None and old != pod.node:
            self._stop(uid)
        self._node_of[uid] = pod.node
        self._running.setdefault(pod.node, {})[uid] = pod

    def _stop(self, uid: str) -> None:
        node = self._node_of.pop(uid, None)
        if node is not None:
            pods = self._running[node]
            pods.pop(uid, None)
            if not pods:
                del self._running[node]

    def _unbind(self, uid: str) -> None:
        pod = self._bound.pop(uid, None)
        if pod is not None:
            uids = self._bound_by_gang[pod.gang.key]
            uids.discard(uid)
            if not uids:
                del self._bound_by_gang[pod.gang.key]


def footprint(value: object) -> int:
    """Roughly the bytes ``value`` holds: itself and what it refers to (frozen dataclasses,
    tuples, lists, dicts, strings), counting shared objects each time they appear."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        total += sys.getsizeof(v)
        if isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif hasattr(v, "__dict__"):
            stack.extend(vars(v).values())
    return total
