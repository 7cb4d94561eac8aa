"""The kube-scheduler extender wire protocol, k8s.io/kube-scheduler/extender/v1, as TypedDicts.

The Go structs have no json tags, so every key below is the Go field name, character for
character. Embedded Kubernetes objects (``Pod``, ``Nodes``) are ordinary camelCase Kubernetes
JSON and stay plain dicts. Unset Go pointers, nil maps and nil slices arrive as ``null``.

``decode_*`` validate a parsed JSON body and raise :class:`BadRequest` naming the bad field;
``encode_*`` build replies from the handler's results. Nothing here decides anything.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, TypedDict

from extender.core.errors import BadRequest
from extender.core.verdicts import FilterVerdict

__all__ = ["BadRequest"]  # raised by every decode_*; the message names the bad field

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


# -- requests and replies, mirroring extender/v1/types.go ------------------------------------


class ExtenderArgs(TypedDict):
    """Request of filter and prioritize."""

    Pod: dict[str, Any]
    Nodes: dict[str, Any] | None  # *v1.NodeList, set only when nodeCacheCapable is false
    NodeNames: list[str] | None  # *[]string, set only when nodeCacheCapable is true


class ExtenderFilterResult(TypedDict):
    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


HostPriorityList = list[HostPriority]


class ExtenderBindingArgs(TypedDict):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(TypedDict):
    Error: str


class MetaPod(TypedDict):
    UID: str


class MetaVictims(TypedDict):
    Pods: list[MetaPod]
    NumPDBViolations: int


class Victims(TypedDict):
    Pods: list[dict[str, Any]]
    NumPDBViolations: int


class ExtenderPreemptionArgs(TypedDict):
    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, Victims] | None  # nodeCacheCapable false
    NodeNameToMetaVictims: dict[str, MetaVictims] | None  # nodeCacheCapable true


class ExtenderPreemptionResult(TypedDict):
    NodeNameToMetaVictims: dict[str, MetaVictims]


# -- decoding ------------------------------------------------------------------------------


def _field(obj: Mapping[str, Any], where: str, key: str) -> Any:
    if key not in obj:
        raise BadRequest(f"{where}.{key} is missing")
    return obj[key]


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{where}: expected a JSON object, got {_kind(value)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{where}: expected a string, got {_kind(value)}")
    return value


def _nonempty(value: Any, where: str) -> str:
    if not _string(value, where):
        raise BadRequest(f"{where} is empty")
    return value


def _int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{where}: expected an integer, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _pod(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    pod = _object(_field(obj, where, "Pod"), f"{where}.Pod")
    meta = _object(pod.get("metadata"), f"{where}.Pod.metadata")
    _nonempty(meta.get("name"), f"{where}.Pod.metadata.name")
    return pod


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise BadRequest(f"{where}: expected an array of node names, got {_kind(value)}")
    if not set(map(type, value)) <= {str}:  # C-speed check; 5,000 names per filter call
        i, name = next((i, n) for i, n in enumerate(value) if type(n) is not str)
        raise BadRequest(f"{where}[{i}]: expected a node name string, got {_kind(name)}")
    return value


def decode_extender_args(body: Any) -> ExtenderArgs:
    """Validate a filter or prioritize request.

    railyard keeps its own node cache, so it needs ``NodeNames`` (``nodeCacheCapable: true``);
    a request carrying only full ``Nodes`` means the scheduler is configured otherwise.
    """
    obj = _object(body, "ExtenderArgs")
    pod = _pod(obj, "ExtenderArgs")
    nodes = obj.get("Nodes")
    names = obj.get("NodeNames")
    if names is None:
        if nodes is not None:
            raise BadRequest("ExtenderArgs.NodeNames is null but Nodes is set: configure the extender "
                             "with nodeCacheCapable: true in the KubeSchedulerConfiguration")
        raise BadRequest("ExtenderArgs.NodeNames is missing or null")
    return ExtenderArgs(Pod=pod, Nodes=None, NodeNames=_names(names, "ExtenderArgs.NodeNames"))


def decode_binding_args(body: Any) -> ExtenderBindingArgs:
    obj = _object(body, "ExtenderBindingArgs")
    return ExtenderBindingArgs(
        PodName=_nonempty(_field(obj, "ExtenderBindingArgs", "PodName"), "ExtenderBindingArgs.PodName"),
        PodNamespace=_nonempty(_field(obj, "ExtenderBindingArgs", "PodNamespace"), "ExtenderBindingArgs.PodNamespace"),
        PodUID=_nonempty(_field(obj, "ExtenderBindingArgs", "PodUID"), "ExtenderBindingArgs.PodUID"),
        Node=_nonempty(_field(obj, "ExtenderBindingArgs", "Node"), "ExtenderBindingArgs.Node"),
    )


def decode_preemption_args(body: Any) -> ExtenderPreemptionArgs:
    """Validate a preempt request; either victims map may be the one that is set."""
    obj = _object(body, "ExtenderPreemptionArgs")
    pod = _pod(obj, "ExtenderPreemptionArgs")
    meta = obj.get("NodeNameToMetaVictims")
    full = obj.get("NodeNameToVictims")
    if meta is None and full is None:
        raise BadRequest("ExtenderPreemptionArgs: NodeNameToMetaVictims and NodeNameToVictims are both null")
    out = ExtenderPreemptionArgs(Pod=pod, NodeNameToVictims=None, NodeNameToMetaVictims=None)
    if meta is not None:
        out["NodeNameToMetaVictims"] = _victims(meta, "ExtenderPreemptionArgs.NodeNameToMetaVictims", _meta_uid)
    else:
        out["NodeNameToVictims"] = _victims(full, "ExtenderPreemptionArgs.NodeNameToVictims", _pod_uid)
    return out


def _meta_uid(p: Any, where: str) -> None:
    _string(_object(p, where).get("UID"), f"{where}.UID")


def _pod_uid(p: Any, where: str) -> None:
    meta = _object(_object(p, where).get("metadata"), f"{where}.metadata")
    _string(meta.get("uid"), f"{where}.metadata.uid")


def _victims(value: Any, where: str, check_pod: Any) -> dict[str, Any]:
    """Either victims map: node -> {Pods: [...], NumPDBViolations: int}, every pod with a UID."""
    for node, v in _object(value, where).items():
        w = f"{where}[{node!r}]"
        _object(v, w)
        _int(v.get("NumPDBViolations", 0), f"{w}.NumPDBViolations")
        pods = v.get("Pods") or []
        if not isinstance(pods, list):
            raise BadRequest(f"{w}.Pods: expected an array, got {_kind(pods)}")
        for i, p in enumerate(pods):
            check_pod(p, f"{w}.Pods[{i}]")
    return value


def victim_uids(args: ExtenderPreemptionArgs) -> dict[str, list[str]]:
    """node -> victim pod UIDs, from whichever victims map the scheduler sent."""
    if args["NodeNameToMetaVictims"] is not None:
        return {node: [p["UID"] for p in (v.get("Pods") or [])]
                for node, v in args["NodeNameToMetaVictims"].items()}
    return {node: [p["metadata"]["uid"] for p in (v.get("Pods") or [])]
            for node, v in (args["NodeNameToVictims"] or {}).items()}


def pdb_violations(args: ExtenderPreemptionArgs) -> dict[str, int]:
    victims = args["NodeNameToMetaVictims"] or args["NodeNameToVictims"] or {}
    return {node: v.get("NumPDBViolations", 0) for node, v in victims.items()}


# -- encoding ------------------------------------------------------------------------------


def encode_filter_result(verdict: FilterVerdict) -> ExtenderFilterResult:
    """The reasons go out only when no node passes: kube-scheduler reads FailedNodes into the
    attempt's diagnosis, which it uses only when the attempt fails (event, preemption;
    ``findNodesThatPassExtenders``, pkg/scheduler/schedule_one.go, v1.37.2). A gang member
    steered to its one node otherwise sent a reason for each of 5,000 other names."""
    passed = bool(verdict.node_names)
    return ExtenderFilterResult(
        Nodes=None,
        NodeNames=list(verdict.node_names),
        FailedNodes={} if passed else dict(verdict.failed),
        FailedAndUnresolvableNodes={} if passed else dict(verdict.failed_unresolvable),
        Error="",
    )


def filter_error(message: str) -> ExtenderFilterResult:
    """A filter reply the scheduler treats as an error for this attempt (pod to backoff)."""
    return ExtenderFilterResult(Nodes=None, NodeNames=None, FailedNodes={},
                                FailedAndUnresolvableNodes={}, Error=message)


def encode_host_priorities(scores: Sequence[tuple[str, int]]) -> HostPriorityList:
    # A 5,000-host reply is built per prioritize call: C-speed checks, dict literals.
    if not scores:
        return []
    _, values = zip(*scores)
    if min(values) < MIN_EXTENDER_PRIORITY or max(values) > MAX_EXTENDER_PRIORITY:
        host, score = next((h, s) for h, s in scores if not MIN_EXTENDER_PRIORITY <= s <= MAX_EXTENDER_PRIORITY)
        raise ValueError(f"score {score} for {host} is outside {MIN_EXTENDER_PRIORITY}..{MAX_EXTENDER_PRIORITY}")
    return [{"Host": host, "Score": score} for host, score in scores]


def encode_binding_result(error: str = "") -> ExtenderBindingResult:
    return ExtenderBindingResult(Error=error)


def encode_preemption_result(kept: Mapping[str, Sequence[str]],
                             violations: Mapping[str, int]) -> ExtenderPreemptionResult:
    """Each kept node with its victims; the scheduler re-reads NumPDBViolations from here."""
    return ExtenderPreemptionResult(NodeNameToMetaVictims={
        node: MetaVictims(Pods=[MetaPod(UID=uid) for uid in uids], NumPDBViolations=violations.get(node, 0))
        for node, uids in kept.items()
    })
