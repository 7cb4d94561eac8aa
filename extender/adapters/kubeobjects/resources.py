"""Resource quantities of pods and nodes, read as Kubernetes reads them.

A pod's effective request of each resource (k8s.io/component-helpers resource.PodRequests):

    max(sum over app containers + every restartable init container (sidecar),
        each plain init container + the sidecars started before it) + pod overhead

A container that states only a limit requests its limit (the API server's defaulting). CPU is
counted in millicores (rounded up, as MilliValue), every other resource in whole units
(rounded up, as Value).

One rule for every request and limit, in every container kind (init, sidecar, app) and the
overhead, the API server's own (ValidateResourceQuantityValue): unreadable or negative is a
problem, and so is a fraction of an integer resource (``integer_resource``: ``500m`` GPUs is
neither 0 nor 1 GPU). The problem names the container and quotes the value; a pod with a
problem is placed nowhere. Every value is bounded before it is used (``adapters.quantity``):
a pod's creator is untrusted.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping

from extender.adapters.kubeobjects.fields import dict_at, list_at, str_at
from extender.adapters.quantity import QuantityError, json_quantity, pod_quantity
from extender.core.model import PODS, Resources

MARKER = "railyard.io/gang-member"
"""The extended resource (1 per pod) the admission policy (``admission.py``) gives each gang
member: kube-scheduler calls the extender only for pods that request a ``managedResources``
entry (``IsInterested``, pkg/scheduler/extender.go, kubernetes v1.37.2), so every other pod is
filtered and bound by kube-scheduler alone. No node advertises it: kube-scheduler skips it
(``ignoredByScheduler``) and so does railyard (never a request)."""
MAX_GPUS = 4096
"""More GPUs than any node has: a larger count is a problem of the pod, not a plan."""
MAX_RESOURCES = 64
"""Distinct resource names read from one container (the API server allows far fewer in practice)."""


def integer_resource(name: str, gpu_resource: str) -> bool:
    """Counted in whole units only, as Kubernetes' IsIntegerResourceName says of the names a
    container may request: extended resources (a domain other than kubernetes.io, such as
    nvidia.com/gpu) and ``pods``; and the GPU resource railyard places, whatever its name."""
    return name in (gpu_resource, PODS) or ("/" in name and "kubernetes.io/" not in name
                                            and not name.startswith("requests."))


def units(name: str, q: Fraction) -> int:
    """A quantity in railyard's units for that resource (millicores for cpu)."""
    return math.ceil(q * 1000) if name == "cpu" else math.ceil(q)


def pod_requests(pod: Mapping[str, Any], gpu_resource: str) -> tuple[int, Resources, tuple[str, ...]]:
    """(GPUs, every other effective request with ``pods: 1``, problems)."""
    spec = dict_at(pod, "spec")
    problems: list[str] = []

    def container(c: Any, where: str) -> dict[str, Fraction]:
        res = dict_at(c, "resources")
        requests, limits = dict_at(res, "requests"), dict_at(res, "limits")
        out: dict[str, Fraction] = {}
        names = list(dict.fromkeys([*requests, *limits]))
        if len(names) > MAX_RESOURCES:
            problems.append(f"{where} names {len(names)} resources; railyard reads at most {MAX_RESOURCES}")
            names = names[:MAX_RESOURCES]
        for name in names:
            if name == MARKER:
                continue
            whole = integer_resource(name, gpu_resource)
            try:
                if name in requests and name in limits:  # the request is read; the limit must pass too
                    pod_quantity(limits[name], f"{where} {name} limit", whole)
                value = requests[name] if name in requests else limits[name]
                out[name] = pod_quantity(value, f"{where} {name}", whole)
            except QuantityError as exc:
                problems.append(str(exc))
        return out

    def add(into: dict[str, Fraction], more: dict[str, Fraction]) -> None:
        for k, v in more.items():
            into[k] = into.get(k, Fraction(0)) + v

    def peak(into: dict[str, Fraction], more: dict[str, Fraction]) -> None:
        for k, v in more.items():
            if v > into.get(k, Fraction(0)):
                into[k] = v

    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, c in enumerate(list_at(spec, "initContainers")):
        if not isinstance(c, dict):
            continue
        amounts = container(c, f"init container {str_at(c, 'name') or i}")
        if c.get("restartPolicy") == "Always":
            add(sidecars, amounts)
            peak(init_peak, sidecars)
        else:
            total = dict(sidecars)
            add(total, amounts)
            peak(init_peak, total)
    app: dict[str, Fraction] = dict(sidecars)
    for i, c in enumerate(list_at(spec, "containers")):
        if isinstance(c, dict):
            add(app, container(c, f"container {str_at(c, 'name') or i}"))
    peak(app, init_peak)
    add(app, container({"resources": {"requests": dict_at(spec, "overhead")}}, "overhead"))

    gpus = 0
    if gpu_resource in app:
        q = app.pop(gpu_resource)  # a sum of whole numbers: each value was checked where it was read
        if q > MAX_GPUS:
            problems.append(f"{gpu_resource} must be at most {MAX_GPUS}, got {q}")
        else:
            gpus = int(q)
    app[PODS] = app.get(PODS, Fraction(0)) + 1
    requests = tuple(sorted((name, units(name, q)) for name, q in app.items() if q > 0))
    return gpus, requests, tuple(problems)


def node_allocatable(node: Mapping[str, Any], gpu_resource: str) -> tuple[int, Resources]:
    """(allocatable GPUs, every other allocatable resource). Unreadable values, and fractions of
    an integer resource, count as 0, as a node the API server accepted never has them."""
    status = dict_at(node, "status")
    allocatable = dict_at(status, "allocatable") or dict_at(status, "capacity")
    gpus = 0
    out = []
    for name, value in list(allocatable.items())[: MAX_RESOURCES * 4]:
        try:
            q = json_quantity(value)
        except QuantityError:
            continue
        if q <= 0 or (q.denominator != 1 and integer_resource(name, gpu_resource)):
            continue
        if name == gpu_resource:
            gpus = min(int(q), MAX_GPUS)
        else:
            out.append((name, units(name, q)))
    return gpus, tuple(sorted(out))
