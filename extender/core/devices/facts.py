"""GPUs as DRA devices (``resource.k8s.io/v1``): the facts, and the pure rules over them.

The adapters translate DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates
into the frozen facts below once, where they enter; ``core.devices.ledger`` keeps them and turns them
into the numbers the rest of the core already works on (GPUs per node, GPUs in use, GPUs per
pod). What railyard understands, and what it does not, is listed in docs/reference.md (DRA).

- A device is a GPU when it matches a GPU DeviceClass: one whose ``extendedResourceName`` is
  the GPU resource (``placement.gpu_resource``), or one named in ``dra.device_classes``. A
  class's CEL selectors are evaluated when they are conjunctions (``&&``) of ``==`` / ``!=``
  comparisons of ``device.driver`` or a device attribute with a literal; a part railyard cannot
  read is skipped and reported. A class with no readable ``device.driver == '...'`` selects
  nothing here: counting every device of every driver (NICs too) as GPUs would over-promise.
- A request counts GPUs when its ``deviceClassName`` is a GPU class: ``exactly.count`` with
  ``allocationMode: ExactCount``; ``All`` counts as the largest node's GPUs; ``adminAccess``
  counts 0 (such devices stay free for others); ``firstAvailable`` counts when every GPU
  alternative asks the same number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

Value = Union[str, int, bool]
DRIVER = "device.driver"
"""The field name of a selector comparison on the device's driver."""
DeviceId = tuple[str, str, str]
"""(driver, pool, device): how allocation results name a device."""


@dataclass(frozen=True)
class Match:
    """One comparison of a DeviceClass selector: ``device.driver`` or an attribute, against a literal."""

    field: str
    """``DRIVER`` or a qualified attribute name (``gpu.nvidia.com/type``)."""
    value: Value
    equal: bool = True
    """``==``; False: ``!=``."""


@dataclass(frozen=True)
class DeviceClassFacts:
    name: str
    extended_resource: str = ""
    """``spec.extendedResourceName``: pods asking this resource get devices of this class."""
    selectors: tuple[tuple[Match, ...], ...] = ()
    """Every selector must hold; each is a conjunction of comparisons."""
    unread: tuple[str, ...] = ()
    """Selector parts railyard could not evaluate (skipped), as written."""

    @property
    def drivers(self) -> frozenset[str]:
        """The drivers a ``device.driver == '...'`` comparison pins the class to."""
        return frozenset(str(m.value) for sel in self.selectors for m in sel if m.field == DRIVER and m.equal)


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    attributes: Mapping[str, Value] = field(default_factory=dict)
    """Qualified names (an attribute published without a domain gets the driver's)."""


@dataclass(frozen=True)
class SliceFacts:
    """A ResourceSlice: devices a driver publishes for one node (or none: not node-local)."""

    name: str
    driver: str
    pool: str
    generation: int = 0
    node: str = ""
    """``spec.nodeName``; empty for slices of ``allNodes`` or a node selector (not counted)."""
    devices: tuple[DeviceFacts, ...] = ()


@dataclass(frozen=True)
class DeviceRequest:
    """One request of a claim's ``spec.devices.requests``."""

    name: str
    device_class: str = ""
    count: int = 1
    all: bool = False
    """``allocationMode: All``."""
    admin: bool = False
    """``adminAccess: true``."""
    alternatives: tuple[DeviceRequest, ...] = ()
    """``firstAvailable``: the subrequests, tried in order by the scheduler."""
    unread: str = ""
    """What railyard could not read in this request."""


@dataclass(frozen=True)
class AllocatedDevice:
    request: str
    """The request it was allocated for (``<request>/<subrequest>`` for ``firstAvailable``)."""
    driver: str
    pool: str
    device: str
    admin: bool = False

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True)
class ClaimFacts:
    key: str
    """``<namespace>/<name>``"""
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    allocated: tuple[AllocatedDevice, ...] = ()
    node: str = ""
    """The one node ``status.allocation.nodeSelector`` names, if it names one by ``metadata.name``."""
    owner: str = ""
    """UID of the pod that controls the claim (made for it from a template, or for its
    extended resources)."""
    reserved: tuple[str, ...] = ()
    """``status.reservedFor``: UIDs of the pods the claim is reserved for."""
    extended: bool = False
    """Made by kube-scheduler for a pod's extended resources (annotation
    ``resource.kubernetes.io/extended-resource-claim``)."""
    resource_version: str = ""

    @property
    def holders(self) -> tuple[str, ...]:
        """Pods whose own GPU count covers this claim's devices."""
        return tuple(dict.fromkeys((*((self.owner,) if self.owner else ()), *self.reserved)))


@dataclass(frozen=True)
class ClaimTemplateFacts:
    key: str
    requests: tuple[DeviceRequest, ...] = ()


DraFacts = Union[DeviceClassFacts, SliceFacts, ClaimFacts, ClaimTemplateFacts]


def qualified(name: str, driver: str) -> str:
    """An attribute name with its domain (``index`` of driver ``gpu.nvidia.com`` ->
    ``gpu.nvidia.com/index``), as CEL's ``device.attributes[domain]`` sees it."""
    return name if "/" in name else f"{driver}/{name}"


def selects(cls: DeviceClassFacts, driver: str, device: DeviceFacts) -> bool:
    """The class selects the device: a pinned driver, and every readable comparison holds. A
    comparison on a missing attribute fails (CEL would not select the device either)."""
    if driver not in cls.drivers:
        return False
    for selector in cls.selectors:
        for m in selector:
            actual = driver if m.field == DRIVER else device.attributes.get(m.field)
            same = actual is not None and type(actual) is type(m.value) and actual == m.value
            if actual is None or same != m.equal:
                return False
    return True


def request_gpus(request: DeviceRequest, gpu_classes: frozenset[str], largest_node: int) -> tuple[int, str]:
    """(GPUs, problem) for one request; problem non-empty when railyard cannot size it."""
    if request.unread:
        return 0, f"request {request.name}: {request.unread}"
    if request.alternatives:
        sizes = set()
        for alt in request.alternatives:
            n, problem = request_gpus(alt, gpu_classes, largest_node)
            if problem:
                return 0, problem
            if alt.device_class in gpu_classes:
                sizes.add(n)
        if len(sizes) > 1:
            return 0, (f"request {request.name}: firstAvailable asks {' or '.join(map(str, sorted(sizes)))} GPUs; "
                       f"railyard cannot know which the scheduler will pick")
        return (sizes.pop() if sizes else 0), ""
    if request.device_class not in gpu_classes or request.admin:
        return 0, ""
    if request.all:
        if largest_node <= 0:
            return 0, f"request {request.name}: allocationMode All, but no node publishes GPU devices"
        return largest_node, ""
    return request.count, ""


def requests_gpus(requests: Iterable[DeviceRequest], gpu_classes: frozenset[str], largest_node: int) -> tuple[int, str]:
    total = 0
    for r in requests:
        n, problem = request_gpus(r, gpu_classes, largest_node)
        if problem:
            return 0, problem
        total += n
    return total, ""


def gpu_request_names(requests: Iterable[DeviceRequest], gpu_classes: frozenset[str]) -> frozenset[str]:
    """Names allocation results carry for GPU requests (``req``, or ``req/sub`` for an alternative)."""
    names = set()
    for r in requests:
        if r.device_class in gpu_classes and not r.admin:
            names.add(r.name)
        names.update(f"{r.name}/{a.name}" for a in r.alternatives if a.device_class in gpu_classes and not a.admin)
    return frozenset(names)
