"""The MutatingAdmissionPolicy that lets only gang members reach railyard (issue 21 items 2 and 4),
generated from the membership table (``pods.MEMBERSHIP``) so the two never disagree.

A pod that names a gang by any convention railyard reads, asks for GPUs (``placement.gpu_resource``
in a container's requests or limits, or a ResourceClaim) and is scheduled by one of railyard's
kube-scheduler profiles gets, at creation:

- one ``railyard.io/gang-member`` (``resources.MARKER``) in its first container's requests and limits:
  the scheduler config's ``managedResources`` lists only that marker, with ``ignoredByScheduler:
  true``, so kube-scheduler calls the extender for these pods only (``IsInterested``,
  pkg/scheduler/extender.go) and skips the marker in its own fit check (``ignoredExtendedResources``,
  pkg/scheduler/scheduler.go and noderesources/fit.go). The kubelet drops a requested extended
  resource its node does not advertise before its admission check (``removeMissingExtendedResources``,
  pkg/kubelet/lifecycle/predicate.go) and its device manager allocates only resources a device
  plugin registered (``isDevicePluginResource``, pkg/kubelet/cm/devicemanager/manager.go): nodes
  need not advertise the marker. All kubernetes v1.37.2.
- the scheduling gate ``railyard.io/gang`` (``pods.GATE``): kube-scheduler keeps the pod out of its
  active queue until railyard lifts the gate for the whole gang (``service.release``).

MutatingAdmissionPolicy is ``admissionregistration.k8s.io/v1``, GA and on by default since 1.36
(feature gate MutatingAdmissionPolicy, k8s.io/apiserver pkg/features/kube_features.go; the
admission plugin is default-on, pkg/kubeapiserver/options/plugins.go; v1.37.2).

``python -m extender.adapters.kubeobjects.admission`` rewrites the shipped copies
(``manifests/``, ``charts/railyard``); a test fails when they drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from extender.adapters.kubeobjects.pods import GATE, MEMBERSHIP
from extender.adapters.kubeobjects.resources import MARKER
from extender.adapters.kubeobjects.workloads import LABELS as WORKLOAD_LABELS

POLICY_NAME = "railyard-gang-members"


def member_condition() -> str:
    """CEL: the pod names a gang, by any row of ``MEMBERSHIP`` (a non-empty value), or belongs to
    a workload's gang (``workloads.LABELS``: every label of a row present)."""
    terms = []
    for where, key, _ in MEMBERSHIP:
        if where == "field":
            path, parts = "object", key.split(".")
            guards = []
            for part in parts:
                path += f".{part}"
                guards.append(f"has({path})")
            terms.append(f"({' && '.join(guards)} && {path} != '')")
        else:
            field = {"label": "labels", "annotation": "annotations"}[where]
            m = f"object.metadata.{field}"
            terms.append(f"(has({m}) && {json.dumps(key)} in {m} && {m}[{json.dumps(key)}] != '')")
    for _, keys in WORKLOAD_LABELS:
        terms.append("(has(object.metadata.labels) && "
                     + " && ".join(f"{json.dumps(k)} in object.metadata.labels" for k in keys) + ")")
    return " ||\n".join(terms)


def gpu_condition(gpu_resource: str) -> str:
    """CEL: a container or init container requests or limits ``gpu_resource``, or the pod has
    ResourceClaims (GPUs as DRA devices)."""
    r = json.dumps(gpu_resource)
    asks = (f"has(c.resources) && ((has(c.resources.requests) && {r} in c.resources.requests) || "
            f"(has(c.resources.limits) && {r} in c.resources.limits))")
    return (f"object.spec.containers.exists(c, {asks}) ||\n"
            f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {asks})) ||\n"
            f"(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)")


def mutation() -> str:
    """CEL apply configuration: the marker on the first container, the gate on the pod."""
    one = json.dumps({MARKER: "1"}, separators=(", ", ": "))
    return ("Object{spec: Object.spec{\n"
            "  containers: [Object.spec.containers{name: object.spec.containers[0].name,\n"
            f"    resources: Object.spec.containers.resources{{requests: {one}, limits: {one}}}}}],\n"
            f"  schedulingGates: [Object.spec.schedulingGates{{name: {json.dumps(GATE)}}}]}}}}")


def policy_objects(scheduler_names: Sequence[str], gpu_resource: str) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding, for the pods of ``scheduler_names`` (the
    profiles of the kube-scheduler railyard extends)."""
    if not scheduler_names:
        raise ValueError("at least one scheduler name is needed")
    names = json.dumps(sorted(set(scheduler_names)), separators=(",", ":"))  # as helm's toJson
    labels = {"app.kubernetes.io/name": "railyard", "app.kubernetes.io/component": "admission"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            # Fail: a member created without its marker would be bound one pod at a time by
            # kube-scheduler alone; refused, its controller creates it again.
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConditions": [
                {"name": "railyard-scheduler", "expression": f"object.spec.schedulerName in {names}"},
                # A pod created bound (spec.nodeName) may not carry scheduling gates.
                {"name": "not-bound", "expression": "!has(object.spec.nodeName) || object.spec.nodeName == ''"},
                {"name": "names-a-gang", "expression": member_condition()},
                {"name": "asks-for-gpus", "expression": gpu_condition(gpu_resource)},
            ],
            "mutations": [{"patchType": "ApplyConfiguration",
                           "applyConfiguration": {"expression": mutation()}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {"policyName": POLICY_NAME},
    }
    return [policy, binding]


def managed_resources(steered_gpu_resource: str | None = None) -> list[dict[str, Any]]:
    """The scheduler config's ``extenders[].managedResources``: the marker, which only gang
    members carry; with ``steered_gpu_resource``, also that resource, checked by kube-scheduler
    too (``ignoredByScheduler: false``), so every pod asking for it reaches railyard as well
    (lone GPU pods steered: docs/reference.md, "Steering lone GPU pods")."""
    steered = [{"name": steered_gpu_resource, "ignoredByScheduler": False}] if steered_gpu_resource else []
    return [{"name": MARKER, "ignoredByScheduler": True}, *steered]


ROOT = Path(__file__).resolve().parents[3]
SHIPPED = {
    # file -> the scheduler config whose profiles it serves
    ROOT / "manifests/base/admission-policy.yaml": ROOT / "manifests/base/scheduler-config.yaml",
    ROOT / "manifests/overlays/main-scheduler/admission-policy.yaml": None,
}
"""The generated copies; the main scheduler serves ``default-scheduler``."""
HEADER = ("# Generated by `python -m extender.adapters.kubeobjects.admission` from the membership table\n"
          "# (extender/adapters/kubeobjects/pods.py MEMBERSHIP); do not edit. Why: docs/reference.md,\n"
          "# \"Only gang members reach railyard\".\n")


def profile_names(config: Path | None) -> list[str]:
    if config is None:
        return ["default-scheduler"]
    doc = yaml.safe_load(config.read_text())
    return [p["schedulerName"] for p in doc.get("profiles") or [{"schedulerName": "default-scheduler"}]]


CHART = ROOT / "charts/railyard/templates/admission-policy.yaml"
CHART_NAMES = "@SCHEDULER_NAMES@"
CHART_TEMPLATE = (
    "{{- /* Generated by `python -m extender.adapters.kubeobjects.admission` (do not edit): what\n"
    "manifests/base/admission-policy.yaml installs, for this release's scheduler profiles. */}}\n"
    "{{- $names := list .Values.schedulerName (printf \"%s-sampled\" .Values.schedulerName) }}\n"
    "{{- if eq .Values.mode \"main-scheduler\" }}{{- $names = list \"default-scheduler\" }}{{- end }}\n")


class _Cel(str):
    """A CEL expression, written as a YAML block so it reads as code."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Cel, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", str(s), style="|"))


def _blocks(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _Cel(v) if k == "expression" else _blocks(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_blocks(v) for v in obj]
    return obj


def rendered(path: Path, gpu_resource: str = "nvidia.com/gpu") -> str:
    """The text of a generated file (``SHIPPED`` or ``CHART``)."""
    if path == CHART:
        text = yaml.dump_all(_blocks(policy_objects([CHART_NAMES], gpu_resource)), Dumper=_Dumper,
                             sort_keys=False, width=120)
        text = text.replace(json.dumps([CHART_NAMES]), "{{ $names | toJson }}")
        text = text.replace(f"  name: {POLICY_NAME}\n  labels:\n    app.kubernetes.io/name: railyard\n",
                            "  name: {{ include \"railyard.fullname\" . }}-gang-members\n  labels:\n"
                            "    {{- include \"railyard.labels\" . | nindent 4 }}\n"
                            "    app.kubernetes.io/name: {{ include \"railyard.name\" . }}\n")
        text = text.replace(f"policyName: {POLICY_NAME}", "policyName: {{ include \"railyard.fullname\" . }}-gang-members")
        return CHART_TEMPLATE + "---\n" + text
    objects = policy_objects(profile_names(SHIPPED[path]), gpu_resource)
    return HEADER + yaml.dump_all(_blocks(objects), Dumper=_Dumper, sort_keys=False, width=120)


def main() -> int:
    for path in (*SHIPPED, CHART):
        path.write_text(rendered(path))
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
