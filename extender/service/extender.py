"""``TopologyExtender``: the service as the adapters see it. It builds the shared context and
the parts, and hands every call to the part whose job it is; it decides nothing itself.

Thread-safe: one lock (``Context.cond``) guards the core; held bind calls wait on its
condition, and the API server's writes happen outside it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Coroutine, Sequence

from extender.core.devices.facts import DraFacts
from extender.core.model import GroupFacts, NodeFacts, PodFacts
from extender.core.ports import Ports
from extender.core.verdicts import FilterVerdict
from extender.service import topoview, whatif
from extender.service.answers import Explanation, GangAnswer, GangChange, GangView
from extender.service.context import Context
from extender.service.gate import PermitGate
from extender.service.preemption import GangPreemption
from extender.service.recovery import Recovery
from extender.service.release import GangRelease
from extender.service.sink import KINDS, CacheSink
from extender.service.verbs import Verbs
from extender.settings import Settings


class TopologyExtender:
    """filter / prioritize / bind / preempt over the core, fed by the watch cache, with the
    read-only answers of the gRPC API and /debug/gangs."""

    def __init__(self, settings: Settings, ports: Ports, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, kinds: Sequence[str] = KINDS) -> None:
        self.ctx = ctx = Context(settings, ports, clock, sleep)
        self.preemption = GangPreemption(ctx)
        self.sink = CacheSink(ctx, self.preemption, kinds)
        self.verbs = Verbs(ctx, self.sink, PermitGate(ctx), self.preemption, Recovery(ctx))
        self.release = GangRelease(ctx, self.sink, self.preemption, self.verbs.reserve)
        self.sink.release = self.release if self.release.active else None

    # -- the cache sink (watch threads) ---------------------------------------------------------

    def ready(self) -> bool:
        return self.sink.ready()

    def node_upserted(self, node: NodeFacts) -> None:
        self.sink.node_upserted(node)

    def node_deleted(self, name: str) -> None:
        self.sink.node_deleted(name)

    def pod_upserted(self, pod: PodFacts) -> None:
        self.sink.pod_upserted(pod)

    def pod_deleted(self, pod: PodFacts) -> None:
        self.sink.pod_deleted(pod)

    def group_upserted(self, group: GroupFacts) -> None:
        self.sink.group_upserted(group)

    def group_deleted(self, group: GroupFacts) -> None:
        self.sink.group_deleted(group)

    def dra_upserted(self, facts: DraFacts) -> None:
        self.sink.dra_upserted(facts)

    def dra_deleted(self, facts: DraFacts) -> None:
        self.sink.dra_deleted(facts)

    def relisted(self, kind: str, objects: Sequence[NodeFacts | PodFacts | GroupFacts | DraFacts]) -> None:
        self.sink.relisted(kind, objects)

    # -- kube-scheduler's verbs (HTTP and gRPC servers) -----------------------------------------

    def filter(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict:
        return self.verbs.filter(pod, node_names)

    def filter_now(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict | None:
        return self.verbs.filter_now(pod, node_names)

    def prioritize(self, pod: PodFacts, node_names: list[str]) -> list[tuple[str, int]]:
        return self.verbs.prioritize(pod, node_names)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.verbs.bind(namespace, name, uid, node)

    def bind_now(self, namespace: str, name: str, uid: str, node: str) -> Coroutine[Any, Any, None] | None:
        return self.verbs.bind_now(namespace, name, uid, node)

    def preempt(self, pod: PodFacts, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        return self.verbs.preempt(pod, victims)

    def release_gangs(self, wait: float = 1.0) -> int:
        """Lift the scheduling gates of gangs that are planned now (``service.release``), after
        waiting up to ``wait`` seconds for a reason to look; returns the members released."""
        return self.release.run(wait)

    def expire(self) -> None:
        """Apply time with no call to carry it (``App.ticker``, every few seconds): on a quiet
        cluster what a burst of calls left (pods only filter saw, their gangs) still expires."""
        with self.ctx.cond:
            self.ctx.tick()

    # -- read-only answers and subscriptions (the gRPC API, /debug/gangs, /metrics) ---------------

    def held(self) -> dict[str, int]:
        """What the service holds, by kind (/metrics). Lengths read without the lock: a scrape
        never waits behind a verb, and a count a moment old is good enough."""
        ctx = self.ctx
        return {"gangs": len(ctx.book), "reservations": len(ctx.state.reservations()), **ctx.pods.sizes()}

    def debug_gangs(self) -> list[GangView]:
        with self.ctx.cond:  # time applied first: no deadline shown passed, no forgotten pod shown
            return whatif.debug_gangs(self.ctx, self.ctx.tick())

    def topology_view(self) -> topoview.TopologySnapshot:
        """The live topology view's snapshot: copies under the lock, no time applied (the
        verbs and the ticker do that), so the lock is held only for the copies."""
        with self.ctx.cond:
            return topoview.snapshot(self.ctx, self.ctx.clock())

    def explain(self, pod_key: str) -> Explanation | None:
        with self.ctx.cond:
            return whatif.explain(self.ctx, pod_key, self.ctx.tick())

    def plan_gang(self, pods: Sequence[PodFacts]) -> list[GangAnswer]:
        with self.ctx.cond:
            return whatif.plan_gangs(self.ctx, [self.ctx.devices.size(p)[0] for p in pods])

    def watch_gangs(self, sink: Callable[[GangChange], None]) -> tuple[list[GangChange], Callable[[], None]]:
        """Subscribe ``sink`` to gang phase changes: every gang as it is now, then each change;
        and a function that unsubscribes. ``sink`` is called under the service lock: it must
        only enqueue."""
        with self.ctx.cond:
            return whatif.watch(self.ctx, sink)
