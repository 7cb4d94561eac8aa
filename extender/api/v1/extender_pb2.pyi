from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FilterRequest(_message.Message):
    __slots__ = ("pod", "node_names")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    pod: bytes
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pod: _Optional[bytes] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class FilterResponse(_message.Message):
    __slots__ = ("node_names", "failed_nodes", "failed_and_unresolvable_nodes")
    class FailedNodesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FailedAndUnresolvableNodesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    FAILED_NODES_FIELD_NUMBER: _ClassVar[int]
    FAILED_AND_UNRESOLVABLE_NODES_FIELD_NUMBER: _ClassVar[int]
    node_names: _containers.RepeatedScalarFieldContainer[str]
    failed_nodes: _containers.ScalarMap[str, str]
    failed_and_unresolvable_nodes: _containers.ScalarMap[str, str]
    def __init__(self, node_names: _Optional[_Iterable[str]] = ..., failed_nodes: _Optional[_Mapping[str, str]] = ..., failed_and_unresolvable_nodes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PrioritizeRequest(_message.Message):
    __slots__ = ("pod", "node_names")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    pod: bytes
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pod: _Optional[bytes] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class HostPriority(_message.Message):
    __slots__ = ("host", "score")
    HOST_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    host: str
    score: int
    def __init__(self, host: _Optional[str] = ..., score: _Optional[int] = ...) -> None: ...

class PrioritizeResponse(_message.Message):
    __slots__ = ("priorities",)
    PRIORITIES_FIELD_NUMBER: _ClassVar[int]
    priorities: _containers.RepeatedCompositeFieldContainer[HostPriority]
    def __init__(self, priorities: _Optional[_Iterable[_Union[HostPriority, _Mapping]]] = ...) -> None: ...

class BindRequest(_message.Message):
    __slots__ = ("pod_name", "pod_namespace", "pod_uid", "node")
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_UID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str
    def __init__(self, pod_name: _Optional[str] = ..., pod_namespace: _Optional[str] = ..., pod_uid: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class BindResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Victims(_message.Message):
    __slots__ = ("pod_uids", "num_pdb_violations")
    POD_UIDS_FIELD_NUMBER: _ClassVar[int]
    NUM_PDB_VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    pod_uids: _containers.RepeatedScalarFieldContainer[str]
    num_pdb_violations: int
    def __init__(self, pod_uids: _Optional[_Iterable[str]] = ..., num_pdb_violations: _Optional[int] = ...) -> None: ...

class PreemptRequest(_message.Message):
    __slots__ = ("pod", "node_name_to_victims")
    class NodeNameToVictimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Victims
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Victims, _Mapping]] = ...) -> None: ...
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_TO_VICTIMS_FIELD_NUMBER: _ClassVar[int]
    pod: bytes
    node_name_to_victims: _containers.MessageMap[str, Victims]
    def __init__(self, pod: _Optional[bytes] = ..., node_name_to_victims: _Optional[_Mapping[str, Victims]] = ...) -> None: ...

class PreemptResponse(_message.Message):
    __slots__ = ("node_name_to_victims",)
    class NodeNameToVictimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Victims
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Victims, _Mapping]] = ...) -> None: ...
    NODE_NAME_TO_VICTIMS_FIELD_NUMBER: _ClassVar[int]
    node_name_to_victims: _containers.MessageMap[str, Victims]
    def __init__(self, node_name_to_victims: _Optional[_Mapping[str, Victims]] = ...) -> None: ...

class PlanGangRequest(_message.Message):
    __slots__ = ("pods",)
    PODS_FIELD_NUMBER: _ClassVar[int]
    pods: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, pods: _Optional[_Iterable[bytes]] = ...) -> None: ...

class GangPlan(_message.Message):
    __slots__ = ("gang", "feasible", "level", "domain", "placement", "reason", "ranks", "slices", "origin")
    class PlacementEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GANG_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    gang: str
    feasible: bool
    level: str
    domain: _containers.RepeatedScalarFieldContainer[str]
    placement: _containers.ScalarMap[str, str]
    reason: str
    ranks: _containers.RepeatedCompositeFieldContainer[MemberAddress]
    slices: Slices
    origin: str
    def __init__(self, gang: _Optional[str] = ..., feasible: _Optional[bool] = ..., level: _Optional[str] = ..., domain: _Optional[_Iterable[str]] = ..., placement: _Optional[_Mapping[str, str]] = ..., reason: _Optional[str] = ..., ranks: _Optional[_Iterable[_Union[MemberAddress, _Mapping]]] = ..., slices: _Optional[_Union[Slices, _Mapping]] = ..., origin: _Optional[str] = ...) -> None: ...

class Slices(_message.Message):
    __slots__ = ("size", "level", "count")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    size: int
    level: str
    count: int
    def __init__(self, size: _Optional[int] = ..., level: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class MemberAddress(_message.Message):
    __slots__ = ("rank", "slice", "pod", "node", "domains", "rails")
    RANK_FIELD_NUMBER: _ClassVar[int]
    SLICE_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    RAILS_FIELD_NUMBER: _ClassVar[int]
    rank: int
    slice: int
    pod: str
    node: str
    domains: _containers.RepeatedCompositeFieldContainer[LevelDomain]
    rails: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, rank: _Optional[int] = ..., slice: _Optional[int] = ..., pod: _Optional[str] = ..., node: _Optional[str] = ..., domains: _Optional[_Iterable[_Union[LevelDomain, _Mapping]]] = ..., rails: _Optional[_Iterable[str]] = ...) -> None: ...

class LevelDomain(_message.Message):
    __slots__ = ("level", "name", "domain")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    level: str
    name: str
    domain: str
    def __init__(self, level: _Optional[str] = ..., name: _Optional[str] = ..., domain: _Optional[str] = ...) -> None: ...

class PlanGangResponse(_message.Message):
    __slots__ = ("gangs",)
    GANGS_FIELD_NUMBER: _ClassVar[int]
    gangs: _containers.RepeatedCompositeFieldContainer[GangPlan]
    def __init__(self, gangs: _Optional[_Iterable[_Union[GangPlan, _Mapping]]] = ...) -> None: ...

class ExplainPodRequest(_message.Message):
    __slots__ = ("namespace", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DomainFit(_message.Message):
    __slots__ = ("domain", "nodes", "gpus", "available_gpus", "fits", "blocked_nodes", "slices")
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_GPUS_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_NODES_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    domain: _containers.RepeatedScalarFieldContainer[str]
    nodes: int
    gpus: int
    available_gpus: int
    fits: int
    blocked_nodes: int
    slices: int
    def __init__(self, domain: _Optional[_Iterable[str]] = ..., nodes: _Optional[int] = ..., gpus: _Optional[int] = ..., available_gpus: _Optional[int] = ..., fits: _Optional[int] = ..., blocked_nodes: _Optional[int] = ..., slices: _Optional[int] = ...) -> None: ...

class ExplainPodResponse(_message.Message):
    __slots__ = ("pod", "gang", "phase", "reason", "plan", "quorum", "min_member", "at_bind", "deadline_in_seconds", "pods", "level", "fit", "ranks", "slices", "origin")
    class PlanEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    POD_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    QUORUM_FIELD_NUMBER: _ClassVar[int]
    MIN_MEMBER_FIELD_NUMBER: _ClassVar[int]
    AT_BIND_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    FIT_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    SLICES_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    pod: str
    gang: str
    phase: str
    reason: str
    plan: _containers.ScalarMap[str, str]
    quorum: int
    min_member: int
    at_bind: int
    deadline_in_seconds: float
    pods: int
    level: str
    fit: _containers.RepeatedCompositeFieldContainer[DomainFit]
    ranks: _containers.RepeatedCompositeFieldContainer[MemberAddress]
    slices: Slices
    origin: str
    def __init__(self, pod: _Optional[str] = ..., gang: _Optional[str] = ..., phase: _Optional[str] = ..., reason: _Optional[str] = ..., plan: _Optional[_Mapping[str, str]] = ..., quorum: _Optional[int] = ..., min_member: _Optional[int] = ..., at_bind: _Optional[int] = ..., deadline_in_seconds: _Optional[float] = ..., pods: _Optional[int] = ..., level: _Optional[str] = ..., fit: _Optional[_Iterable[_Union[DomainFit, _Mapping]]] = ..., ranks: _Optional[_Iterable[_Union[MemberAddress, _Mapping]]] = ..., slices: _Optional[_Union[Slices, _Mapping]] = ..., origin: _Optional[str] = ...) -> None: ...

class WatchGangsRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class GangEvent(_message.Message):
    __slots__ = ("gang", "phase", "previous", "event", "reason", "origin")
    GANG_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    gang: str
    phase: str
    previous: str
    event: str
    reason: str
    origin: str
    def __init__(self, gang: _Optional[str] = ..., phase: _Optional[str] = ..., previous: _Optional[str] = ..., event: _Optional[str] = ..., reason: _Optional[str] = ..., origin: _Optional[str] = ...) -> None: ...
