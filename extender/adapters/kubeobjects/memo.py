"""A pod translated again only when something its facts are read from changed.

Most watch events of a pod change nothing ``pod_facts`` reads but where it runs and its phase:
the Binding sets ``spec.nodeName``, the kubelet (kwok) writes its status, and every event
carries a new ``resourceVersion`` and ``managedFields``. kube-scheduler's filter call sends the
same pod again. A full translation costs about 75 us of Python per event (requests, rank,
eligibility, membership); this keeps the last facts per pod uid beside a digest of everything
else the translation reads, and on a match only sets ``node`` and ``phase`` (issue 21 item 5).
A pod created, bound and started (three events, decoded with orjson as the watch does) then
costs 0.14 ms of translation instead of 0.24.

What the digest covers: ``metadata`` but ``managedFields`` and ``resourceVersion``, ``spec`` but
``nodeName``, and ``status.resourceClaimStatuses``; ``node`` and ``phase`` are read from
``spec.nodeName`` and ``status.phase`` on every call. A translation that comes to read another
field must add it here: ``tests/adapters/kubeobjects/test_pod_memo.py`` checks that the facts
equal a fresh translation's over sequences of edits to every field the translation reads.

Filled by the pod watch only (``keep``): pods that exist. A verb call (filter, gRPC) reads what
the watch kept and keeps nothing, so pods that never existed cost nothing here (a hostile burst
of filter calls kept 50 MiB of their facts when verbs filled it too: ``tests/e2e/
test_hostile_burst.py``). Bounded (``size`` pods and ``max_bytes``, the oldest forgotten first),
shared by the threads that translate pods, so guarded by a lock held only around the dict. The
digest is the length and Python's ``hash`` of the fields' JSON: SipHash under a key drawn at
start (hash randomization, on unless ``PYTHONHASHSEED`` is set), about 1 us where BLAKE2b took
4: no one who has not read the process's key can make two contents collide, and by chance two
differ unseen about once in 2^64.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Mapping

import orjson

from extender.adapters.kubeobjects.fields import dict_at, str_at
from extender.core.model import PodFacts

PODS_KEPT = 8192
"""Pods whose last facts are kept: a pod's events come close together (created, bound, started),
so the pods changing at one time, not the cluster's size, is what this must hold."""
BYTES_KEPT = 16 << 20
"""And at most about this much of what they were read from (the digested JSON's length): a pod
can carry hundreds of kilobytes."""

_NOT_READ_META = frozenset({"managedFields", "resourceVersion"})


class PodMemo:
    def __init__(self, size: int = PODS_KEPT, max_bytes: int = BYTES_KEPT) -> None:
        self.size, self.max_bytes = size, max_bytes
        self._kept: dict[str, tuple[tuple[int, int], PodFacts]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def facts(self, pod: Mapping[str, Any], translate: Callable[[], PodFacts], keep: bool = True) -> PodFacts:
        """``translate()``'s facts for ``pod``, or the last ones kept for its uid with its node and
        phase; ``keep``: remember the facts returned."""
        meta, spec, status = dict_at(pod, "metadata"), dict_at(pod, "spec"), dict_at(pod, "status")
        uid = str_at(meta, "uid")
        digest = _digest(meta, spec, status) if uid else None
        if digest is None:
            return translate()
        node, phase = str_at(spec, "nodeName"), str_at(status, "phase")
        with self._lock:
            kept = self._kept.get(uid)
        if kept is not None and kept[0] == digest:
            facts = kept[1]
            if (facts.node, facts.phase) == (node, phase):
                return facts
            facts = replace(facts, node=node, phase=phase)
        else:
            facts = translate()
        if not keep:
            return facts
        with self._lock:
            self._forget(uid)  # then back in at the end: the oldest are forgotten first
            self._kept[uid] = (digest, facts)
            self._bytes += digest[0]
            while len(self._kept) > self.size or self._bytes > self.max_bytes:
                self._forget(next(iter(self._kept)))
        return facts

    def _forget(self, uid: str) -> None:
        kept = self._kept.pop(uid, None)
        if kept is not None:
            self._bytes -= kept[0][0]


def _digest(meta: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]) -> tuple[int, int] | None:
    read = [{k: v for k, v in meta.items() if k not in _NOT_READ_META},
            {k: v for k, v in spec.items() if k != "nodeName"},
            status.get("resourceClaimStatuses")]
    try:
        data = orjson.dumps(read)
    except (TypeError, orjson.JSONEncodeError):  # what JSON never holds (a file read otherwise): no memo
        return None
    return len(data), hash(data)
