"""DRA objects (``resource.k8s.io/v1``) to facts: DeviceClass, ResourceSlice, ResourceClaim,
ResourceClaimTemplate, and a pod's ``spec.resourceClaims``.

Field names are those of ``k8s.io/api/resource/v1/types.go`` at v0.37.2 (v1 flattened the
devices and requests: ``devices[].attributes``, ``requests[].exactly`` / ``firstAvailable``).
Shapes as kube-scheduler 1.37.2 writes them, read back from its local control plane (tests/e2e/test_dra.py).

CEL selectors of a DeviceClass are read when they are ``&&`` chains of ``==`` / ``!=`` between
``device.driver`` or ``device.attributes['<domain>'].<name>`` (also ``['<name>']``) and a string,
integer or boolean literal; any other part is kept as text in ``unread`` (docs/reference.md).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from extender.adapters.kubeobjects.fields import annotations_of, dict_at, list_at, str_at
from extender.core.devices.facts import (
    DRIVER,
    AllocatedDevice,
    ClaimFacts,
    ClaimTemplateFacts,
    DeviceClassFacts,
    DeviceFacts,
    DeviceRequest,
    Match,
    SliceFacts,
    Value,
    qualified,
)
from extender.core.model import PodClaim

EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"
"""Annotation kube-scheduler puts on the claim it makes for a pod's extended resources."""

_STR = r"""'(?P<s1>[^'\\]*)'|"(?P<s2>[^"\\]*)\""""
_LITERAL = re.compile(rf"^(?:{_STR}|(?P<int>-?\d+)|(?P<bool>true|false))$")
_DRIVER = re.compile(r"^device\.driver$")
_ATTRIBUTE = re.compile(
    r"""^device\.attributes\[\s*(?:'(?P<d1>[^']+)'|"(?P<d2>[^"]+)")\s*\]"""
    r"""(?:\.(?P<n1>[A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:'(?P<n2>[^']+)'|"(?P<n3>[^"]+)")\s*\])$""")
_COMPARISON = re.compile(r"^(?P<left>.+?)\s*(?P<op>==|!=)\s*(?P<right>.+)$")


def _literal(text: str) -> Value | None:
    m = _LITERAL.match(text.strip())
    if not m:
        return None
    if m.group("int") is not None:
        return int(m.group("int"))
    if m.group("bool") is not None:
        return m.group("bool") == "true"
    return m.group("s1") if m.group("s1") is not None else m.group("s2")


def _operand(text: str) -> str | None:
    text = text.strip()
    if _DRIVER.match(text):
        return DRIVER
    m = _ATTRIBUTE.match(text)
    if not m:
        return None
    domain = m.group("d1") or m.group("d2")
    name = m.group("n1") or m.group("n2") or m.group("n3")
    return qualified(name, domain)


def parse_selector(expression: str) -> tuple[tuple[Match, ...], tuple[str, ...]]:
    """(the comparisons railyard reads, the parts it cannot) of one CEL expression."""
    text = " ".join(expression.split())
    if "||" in text or "?" in text:
        return (), (expression.strip(),)
    matches, unread = [], []
    for part in text.split("&&"):
        part = part.strip()
        while part.startswith("(") and part.endswith(")"):
            part = part[1:-1].strip()
        m = _COMPARISON.match(part)
        field = value = None
        if m:
            field, value = _operand(m.group("left")), _literal(m.group("right"))
            if field is None and value is None:  # literal on the left
                field, value = _operand(m.group("right")), _literal(m.group("left"))
        if m is None or field is None or value is None:
            unread.append(part)
            continue
        matches.append(Match(field, value, m.group("op") == "=="))
    return tuple(matches), tuple(unread)


def device_class_facts(obj: Mapping[str, Any]) -> DeviceClassFacts:
    spec = dict_at(obj, "spec")
    selectors, unread = [], []
    for sel in list_at(spec, "selectors"):
        expression = str_at(dict_at(sel, "cel"), "expression")
        if not expression:
            unread.append(repr(sel)[:80])
            continue
        matches, parts = parse_selector(expression)
        if matches:
            selectors.append(matches)
        unread.extend(parts)
    return DeviceClassFacts(str_at(dict_at(obj, "metadata"), "name"), str_at(spec, "extendedResourceName"),
                            tuple(selectors), tuple(unread))


def _attribute_value(raw: Any) -> Value | None:
    if not isinstance(raw, dict):
        return None
    for key in ("string", "version"):
        if isinstance(raw.get(key), str):
            return raw[key]
    if isinstance(raw.get("bool"), bool):
        return raw["bool"]
    value = raw.get("int")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def resource_slice_facts(obj: Mapping[str, Any]) -> SliceFacts:
    spec = dict_at(obj, "spec")
    driver = str_at(spec, "driver")
    pool = dict_at(spec, "pool")
    generation = pool.get("generation")
    devices = []
    for d in list_at(spec, "devices"):
        name = str_at(d, "name")
        if not name:
            continue
        attrs = {}
        for key, raw in dict_at(d, "attributes").items():
            value = _attribute_value(raw)
            if value is not None:
                attrs[qualified(key, driver)] = value
        devices.append(DeviceFacts(name, attrs))
    return SliceFacts(
        name=str_at(dict_at(obj, "metadata"), "name"), driver=driver, pool=str_at(pool, "name"),
        generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        node=str_at(spec, "nodeName"), devices=tuple(devices))


def _request(raw: Mapping[str, Any], exact: Mapping[str, Any]) -> DeviceRequest:
    mode = str_at(exact, "allocationMode") or "ExactCount"
    count = exact.get("count", 1)
    unread = ""
    if mode not in ("ExactCount", "All"):
        unread = f"allocationMode {mode!r} is not ExactCount or All"
    elif not isinstance(count, int) or isinstance(count, bool) or count < 0:
        unread, count = f"count {count!r} is not a non-negative integer", 0
    return DeviceRequest(name=str_at(raw, "name"), device_class=str_at(exact, "deviceClassName"), count=count,
                         all=mode == "All", admin=exact.get("adminAccess") is True, unread=unread)


def device_requests(devices: Mapping[str, Any]) -> tuple[DeviceRequest, ...]:
    """``spec.devices.requests`` of a claim (or a template's ``spec.spec``)."""
    out = []
    for r in list_at(devices, "requests"):
        if not isinstance(r, dict):
            continue
        if "firstAvailable" in r:
            alts = tuple(_request(a, a) for a in list_at(r, "firstAvailable") if isinstance(a, dict))
            out.append(DeviceRequest(name=str_at(r, "name"), alternatives=alts,
                                     unread="" if alts else "firstAvailable is empty"))
        elif "exactly" in r:
            out.append(_request(r, dict_at(r, "exactly")))
        else:
            out.append(DeviceRequest(name=str_at(r, "name"), unread="neither exactly nor firstAvailable "
                                                                      "(the v1beta1 shape is refused by v1)"))
    return tuple(out)


def _node_of(selector: Mapping[str, Any]) -> str:
    """The node a node selector names by ``metadata.name In [one]`` (how allocations pin)."""
    for term in list_at(selector, "nodeSelectorTerms"):
        for f in list_at(term, "matchFields"):
            values = list_at(f, "values")
            if str_at(f, "key") == "metadata.name" and str_at(f, "operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""


def resource_claim_facts(obj: Mapping[str, Any]) -> ClaimFacts:
    meta, status = dict_at(obj, "metadata"), dict_at(obj, "status")
    allocation = dict_at(status, "allocation")
    owner = next((str_at(o, "uid") for o in list_at(meta, "ownerReferences")
                  if o.get("controller") is True and str_at(o, "kind") == "Pod"), "")
    allocated = tuple(
        AllocatedDevice(str_at(r, "request"), str_at(r, "driver"), str_at(r, "pool"), str_at(r, "device"),
                        r.get("adminAccess") is True)
        for r in list_at(dict_at(allocation, "devices"), "results") if isinstance(r, dict))
    reserved = tuple(str_at(r, "uid") for r in list_at(status, "reservedFor")
                     if isinstance(r, dict) and str_at(r, "resource") == "pods" and str_at(r, "uid"))
    return ClaimFacts(
        key=f"{str_at(meta, 'namespace') or 'default'}/{str_at(meta, 'name')}",
        uid=str_at(meta, "uid"),
        requests=device_requests(dict_at(dict_at(obj, "spec"), "devices")),
        allocated=allocated,
        node=_node_of(dict_at(allocation, "nodeSelector")),
        owner=owner,
        reserved=reserved,
        extended=annotations_of(obj).get(EXTENDED_CLAIM) == "true",
        resource_version=str_at(meta, "resourceVersion"),
    )


def claim_template_facts(obj: Mapping[str, Any]) -> ClaimTemplateFacts:
    meta = dict_at(obj, "metadata")
    devices = dict_at(dict_at(dict_at(obj, "spec"), "spec"), "devices")
    return ClaimTemplateFacts(f"{str_at(meta, 'namespace') or 'default'}/{str_at(meta, 'name')}",
                              device_requests(devices))


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """``spec.resourceClaims``, each with the claim's name: given, or (for a template) as
    ``status.resourceClaimStatuses`` names the claim made from it."""
    made = {str_at(s, "name"): str_at(s, "resourceClaimName")
            for s in list_at(dict_at(pod, "status"), "resourceClaimStatuses") if isinstance(s, dict)}
    out = []
    for c in list_at(dict_at(pod, "spec"), "resourceClaims"):
        if not isinstance(c, dict):
            continue
        name, template = str_at(c, "name"), str_at(c, "resourceClaimTemplateName")
        out.append(PodClaim(name, str_at(c, "resourceClaimName") or made.get(name, ""), template))
    return tuple(out)
