"""The pods railyard remembers between calls, indexed so that no call scans every pod.

- pending: unbound, unfinished pods that ask for GPUs or name a gang, by key and by gang
  (planning a gang reads its members without scanning the cluster's pending pods);
- bound: bound pods of named gangs, by uid and by gang (preempt, replacements);
- running: every bound, unfinished pod by node and uid (who a preemption may evict);
- seen: pods filter was called for (bind carries only names).

GPU usage goes to ``ClusterState``; this index keeps who is who. Not thread-safe.
"""

from __future__ import annotations

from typing import Mapping

from extender.core.model import PodFacts
from extender.core.state import ClusterState


class PodIndex:
    def __init__(self) -> None:
        self._pending: dict[str, PodFacts] = {}
        self._pending_by_gang: dict[str, dict[str, PodFacts]] = {}
        self._bound: dict[str, PodFacts] = {}
        self._bound_by_gang: dict[str, set[str]] = {}
        self._seen: dict[str, PodFacts] = {}
        self._running: dict[str, dict[str, PodFacts]] = {}
        self._node_of: dict[str, str] = {}

    # -- watch events --------------------------------------------------------------------

    def changed(self, pod: PodFacts, state: ClusterState) -> None:
        """A pod was created or updated (watch), with its GPU usage recorded in ``state``."""
        uid = pod.uid or pod.key
        if pod.finished:
            self.gone(pod, state)
            return
        if pod.node:
            self._unpend(pod.key)
            self._seen.pop(pod.key, None)  # bind has happened: only filter-to-bind needs it
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
        state.delete_pod(uid)
        self._unbind(uid)
        self._stop(uid)
        self._unpend(pod.key)

    def deleted(self, pod: PodFacts, state: ClusterState) -> None:
        """A pod was deleted: its GPUs and any slot reserved for it are free; nobody binds it."""
        self.gone(pod, state)
        state.drop_slot(pod.key)
        self._seen.pop(pod.key, None)

    def clear(self, state: ClusterState) -> None:
        """Before a full relist: every pod railyard knew is replaced."""
        for uid in state.pod_uids():
            state.delete_pod(uid)
        self._pending.clear()
        self._pending_by_gang.clear()
        self._bound.clear()
        self._bound_by_gang.clear()
        self._running.clear()
        self._node_of.clear()

    # -- filter --------------------------------------------------------------------------

    def filtered(self, pod: PodFacts) -> None:
        """filter was called for the pod: bind will name it."""
        self._seen[pod.key] = pod
        if not pod.node and pod.key not in self._pending:
            self._pend(pod)

    def took_bound(self, key: str) -> None:
        """railyard bound the pod; the watch will show it."""
        self._unpend(key)

    # -- reads ---------------------------------------------------------------------------

    def seen_pod(self, key: str) -> PodFacts | None:
        """The pod as filter last saw it, until the watch shows it bound or deleted."""
        return self._seen.get(key)

    def pending_pod(self, key: str) -> PodFacts | None:
        return self._pending.get(key)

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
