"""``extender.api.v1.Extender``: decode protobuf -> service -> encode, nothing else.

Pods arrive as Kubernetes JSON bytes, the same objects the HTTP verbs carry, and are translated
to facts here with the same ``kubeobjects.Translator``. Errors are raised, and turned into
status codes by ``errors.ErrorInterceptor``, which also answers request bytes that are not a
method's message before any method here runs.
"""

from __future__ import annotations

import queue
from typing import Callable, Iterator, Protocol, Sequence

import grpc
import orjson

from extender.adapters.echo import clip
from extender.adapters.kubeobjects import Translator
from extender.api.v1 import extender_pb2 as pb
from extender.api.v1 import extender_pb2_grpc as pb_grpc
from extender.core.errors import BadRequest, UnknownPod
from extender.core.model import Address, PodFacts
from extender.core.verdicts import FilterVerdict
from extender.service.answers import Explanation, GangAnswer, GangChange, Slices

WATCH_POLL_SECONDS = 0.5
"""How often a WatchGangs stream with nothing to send checks that its client is still there."""
KEY_SHOWN_CHARS = 320
"""A pod key quoted in an error is cut past this: no real one is longer (a 63-character
namespace, '/', a 253-character name)."""


class Handler(Protocol):
    """What the servicer calls; implemented by ``extender.service.TopologyExtender``."""

    def filter(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict: ...
    def prioritize(self, pod: PodFacts, node_names: list[str]) -> list[tuple[str, int]]: ...
    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...  # may block for minutes
    def preempt(self, pod: PodFacts, victims: dict[str, list[str]]) -> dict[str, list[str]]: ...
    def plan_gang(self, pods: Sequence[PodFacts]) -> Sequence[GangAnswer]: ...
    def explain(self, pod_key: str) -> Explanation | None: ...
    def watch_gangs(self, sink: Callable[[GangChange], None]) -> tuple[list[GangChange], Callable[[], None]]: ...


def decode_pod(data: bytes, where: str) -> dict:
    """A Pod as JSON bytes; BadRequest names the field when it is not a Pod-shaped object."""
    try:
        pod = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{where} is not JSON: {exc}") from None
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise BadRequest(f"{where} must be a Kubernetes Pod object with metadata")
    meta = pod["metadata"]
    if not meta.get("name") or not meta.get("namespace"):
        raise BadRequest(f"{where} must carry metadata.name and metadata.namespace")
    return pod


def _required(value: str, where: str) -> str:
    if not value:
        raise BadRequest(f"{where} must not be empty")
    return value


def _path(values: Sequence[str | None] | None) -> list[str]:
    return ["" if v is None else v for v in values or ()]


def _ranks(ranks: Sequence[Address]) -> list[pb.MemberAddress]:
    return [pb.MemberAddress(rank=r.rank, slice=r.slice, pod=r.pod, node=r.node,
                             domains=[pb.LevelDomain(level=d.level, name=d.name, domain=d.domain) for d in r.domains],
                             rails=list(r.rails))
            for r in ranks]


def _slices(slices: Slices | None) -> pb.Slices | None:
    return None if slices is None else pb.Slices(size=slices.size, level=slices.level or "", count=slices.count)


def _change(change: GangChange) -> pb.GangEvent:
    return pb.GangEvent(gang=change.gang, phase=change.phase, previous=change.previous, event=change.event,
                        reason=change.reason, origin=change.origin)


class ExtenderServicer(pb_grpc.ExtenderServicer):
    def __init__(self, handler: Handler, translator: Translator) -> None:
        self.handler = handler
        self.translator = translator

    def _pod(self, data: bytes, where: str) -> PodFacts:
        return self.translator.pod(decode_pod(data, where))

    def Filter(self, request: pb.FilterRequest, context: grpc.ServicerContext) -> pb.FilterResponse:
        verdict = self.handler.filter(self._pod(request.pod, "pod"), list(request.node_names))
        return pb.FilterResponse(node_names=verdict.node_names, failed_nodes=dict(verdict.failed),
                                 failed_and_unresolvable_nodes=dict(verdict.failed_unresolvable))

    def Prioritize(self, request: pb.PrioritizeRequest, context: grpc.ServicerContext) -> pb.PrioritizeResponse:
        scores = self.handler.prioritize(self._pod(request.pod, "pod"), list(request.node_names))
        return pb.PrioritizeResponse(priorities=[pb.HostPriority(host=h, score=s) for h, s in scores])

    def Bind(self, request: pb.BindRequest, context: grpc.ServicerContext) -> pb.BindResponse:
        self.handler.bind(_required(request.pod_namespace, "pod_namespace"), _required(request.pod_name, "pod_name"),
                          request.pod_uid, _required(request.node, "node"))
        return pb.BindResponse()

    def Preempt(self, request: pb.PreemptRequest, context: grpc.ServicerContext) -> pb.PreemptResponse:
        given = request.node_name_to_victims
        kept = self.handler.preempt(self._pod(request.pod, "pod"), {n: list(v.pod_uids) for n, v in given.items()})
        return pb.PreemptResponse(node_name_to_victims={
            node: pb.Victims(pod_uids=uids, num_pdb_violations=given[node].num_pdb_violations if node in given else 0)
            for node, uids in kept.items()})

    def PlanGang(self, request: pb.PlanGangRequest, context: grpc.ServicerContext) -> pb.PlanGangResponse:
        if not request.pods:
            raise BadRequest("pods must list at least one Pod")
        pods = [self._pod(p, f"pods[{i}]") for i, p in enumerate(request.pods)]
        return pb.PlanGangResponse(gangs=[
            pb.GangPlan(gang=a.gang, feasible=a.feasible, level=a.level or "", domain=_path(a.domain),
                        placement=dict(a.placement), reason=a.reason, ranks=_ranks(a.ranks), slices=_slices(a.slices),
                        origin=a.origin)
            for a in self.handler.plan_gang(pods)])

    def ExplainPod(self, request: pb.ExplainPodRequest, context: grpc.ServicerContext) -> pb.ExplainPodResponse:
        key = f"{_required(request.namespace, 'namespace')}/{_required(request.name, 'name')}"
        got = self.handler.explain(key)
        if got is None:
            raise UnknownPod(f"pod {clip(key, KEY_SHOWN_CHARS)} is unknown to railyard: it asks for no GPUs and "
                             f"names no gang, does not exist, or the watch cache has not seen it yet")
        fit = [pb.DomainFit(domain=_path(r.domain.path), nodes=r.nodes, gpus=r.gpus, available_gpus=r.available,
                            fits=r.fits, blocked_nodes=r.blocked_nodes, slices=r.slices)
               for r in got.fit]
        return pb.ExplainPodResponse(
            pod=got.pod, gang=got.gang, phase=got.phase, reason=got.reason, plan=dict(got.plan),
            min_member=got.min_member, quorum=got.min_member, at_bind=got.at_bind,
            deadline_in_seconds=got.deadline_in_seconds, pods=got.pods, level=got.level, fit=fit,
            ranks=_ranks(got.ranks), slices=_slices(got.slices), origin=got.origin)

    def WatchGangs(self, request: pb.WatchGangsRequest, context: grpc.ServicerContext) -> Iterator[pb.GangEvent]:
        changes: queue.SimpleQueue[GangChange | None] = queue.SimpleQueue()
        listing, unsubscribe = self.handler.watch_gangs(changes.put)
        context.add_callback(lambda: changes.put(None))  # wakes the loop when the client goes away
        prefix = f"{request.namespace}/" if request.namespace else ""
        try:
            for change in listing:
                if change.gang.startswith(prefix):
                    yield _change(change)
            while context.is_active():
                try:
                    changed = changes.get(timeout=WATCH_POLL_SECONDS)
                except queue.Empty:
                    continue
                if changed is not None and changed.gang.startswith(prefix):
                    yield _change(changed)
        finally:
            unsubscribe()
