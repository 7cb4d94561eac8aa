"""Upstream kustomize trees, rendered as far as the local cluster needs them.

Kueue, JobSet, LeaderWorkerSet and Kubeflow Trainer ship their CRDs and webhook configurations
as kubebuilder kustomize trees (``config/`` or ``manifests/`` of their Go module). The local
cluster reads them at ``cluster up`` from the pinned module's source in GOMODCACHE (the same
version as the binary; nothing of theirs is copied into this repository) and applies what their
own overlay would, limited to the features those trees use:

- ``resources``: YAML files (one or many documents each), in order;
- ``patches`` without ``target``: strategic merge by kind and name (maps merge, ``webhooks``
  merge by name, anything else is replaced). A patch's ``metadata`` only names its target: the
  only metadata these trees patch is cert-manager's CA-injection annotation, and no
  cert-manager runs here;
- ``patches`` with ``target`` (kind, optionally name): a JSON 6902 patch (a YAML list of
  ``add``/``replace``/``remove`` operations) or a strategic merge patch, on every match;
- the overlay's ``namePrefix`` on the webhook configurations (kustomize never prefixes CRDs).

Anything else (a directory resource, a ``move`` operation, a patch that matches nothing) is a
ClusterError naming the file: the rendering is never silently different from the project's.
Then ``bind_crds`` and ``bind_webhooks`` point every ``clientConfig.service`` at the manager's
loopback webhook server by URL, with the cluster CA as ``caBundle``: no Service routes here.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.localcluster.errors import ClusterError

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # Kueue's Workload CRD is 1.4 MB of YAML


@dataclass(frozen=True)
class Layout:
    """Where a project keeps its kustomizations, relative to its module root."""

    crds: str
    """The kustomization that lists the CRDs and their conversion-webhook patches."""
    webhooks: str
    """The kustomization that lists the webhook configurations and their patches."""
    overlay: str | None = None
    """The overlay whose ``namePrefix`` the webhook configurations get (None: no prefix)."""


@dataclass(frozen=True)
class Sources:
    """A project's objects as its kustomize config would render them, before binding to a cluster."""

    crds: list[dict[str, Any]]
    webhook_configurations: list[dict[str, Any]]


def load_sources(module_dir: Path, layout: Layout, project: str) -> Sources:
    """The CRDs and webhook configurations of ``project``'s module at ``module_dir``."""
    root = Path(module_dir)
    crds = [o for o in render(root / layout.crds, project) if o.get("kind") == "CustomResourceDefinition"]
    configs = [o for o in render(root / layout.webhooks, project) if o.get("kind") in WEBHOOK_KINDS]
    prefix = read_yaml(root / layout.overlay / "kustomization.yaml", project).get("namePrefix", "") \
        if layout.overlay else ""
    for config in configs:
        config["metadata"]["name"] = prefix + config["metadata"]["name"]
    if not crds or not configs:
        raise ClusterError(f"no {project} CRDs or webhook configurations found under {root}")
    return Sources(crds=crds, webhook_configurations=configs)


def render(directory: Path, project: str) -> list[dict[str, Any]]:
    """The resources of the kustomization in ``directory``, with its patches applied."""
    kustomization = read_yaml(directory / "kustomization.yaml", project)
    objects: list[dict[str, Any]] = []
    for name in kustomization.get("resources") or []:
        path = directory / name
        if path.is_dir():
            raise ClusterError(f"{directory}/kustomization.yaml: resource {name} is a directory (not supported)")
        objects += [d for d in read_yaml_all(path, project) if d]
    for entry in kustomization.get("patches") or []:
        for patch in _patch_documents(directory, entry, project):
            if "target" in entry:
                _apply_targeted(objects, entry["target"], patch, directory)
            else:
                _apply_named(objects, patch, project)
    return objects


def bind_crds(crds: list[dict[str, Any]], webhook_base: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The CRDs with every conversion webhook pointed at ``webhook_base`` (``https://host:port``)."""
    bound = copy.deepcopy(crds)
    for crd in bound:
        webhook = ((crd.get("spec") or {}).get("conversion") or {}).get("webhook")
        if webhook and "clientConfig" in webhook:
            webhook["clientConfig"] = _client_config(webhook["clientConfig"], webhook_base, ca_pem)
    return bound


def bind_webhooks(configs: list[dict[str, Any]], webhook_base: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The webhook configurations with every webhook pointed at ``webhook_base``."""
    bound = copy.deepcopy(configs)
    for config in bound:
        for webhook in config.get("webhooks") or []:
            webhook["clientConfig"] = _client_config(webhook["clientConfig"], webhook_base, ca_pem)
    return bound


def _client_config(client_config: dict[str, Any], webhook_base: str, ca_pem: bytes) -> dict[str, Any]:
    path = (client_config.get("service") or {}).get("path") or ""
    return {"url": webhook_base + path, "caBundle": base64.b64encode(ca_pem).decode()}


# ------------------------------------------------------------------------- patches

def _patch_documents(directory: Path, entry: dict[str, Any], project: str) -> list[Any]:
    """The patch documents of one ``patches`` entry: a file (``path``) or inline (``patch``)."""
    if "path" in entry:
        docs = read_yaml_all(directory / entry["path"], project)
    elif "patch" in entry:
        docs = list(yaml.load_all(entry["patch"], Loader=_Loader))
    else:
        raise ClusterError(f"{directory}/kustomization.yaml: a patch with neither path nor patch: {entry}")
    return [d for d in docs if d]  # a JSON 6902 patch is one document: a list of operations


def _apply_named(objects: list[dict[str, Any]], patch: dict[str, Any], project: str) -> None:
    key = (patch.get("kind"), patch["metadata"]["name"])
    matches = [o for o in objects if (o.get("kind"), o["metadata"]["name"]) == key]
    if not matches:
        raise ClusterError(f"a {project} kustomize patch targets {key[0]} {key[1]}, which is not there")
    for obj in matches:
        merge(obj, {k: v for k, v in patch.items() if k not in ("apiVersion", "kind", "metadata")})


def _apply_targeted(objects: list[dict[str, Any]], target: dict[str, Any], patch: Any, directory: Path) -> None:
    unsupported = set(target) - {"group", "version", "kind", "name"}
    if unsupported:
        raise ClusterError(f"{directory}/kustomization.yaml: unsupported patch target fields {sorted(unsupported)}")
    matches = [o for o in objects if o.get("kind") == target.get("kind")
               and ("name" not in target or o["metadata"]["name"] == target["name"])]
    if not matches:
        raise ClusterError(f"{directory}/kustomization.yaml: a patch targets {target}, which is not there")
    for obj in matches:
        if isinstance(patch, list):
            for operation in patch:
                json6902(obj, operation, directory)
        else:
            merge(obj, {k: v for k, v in patch.items() if k not in ("apiVersion", "kind", "metadata")})


def json6902(obj: Any, operation: dict[str, Any], where: Path) -> None:
    """Apply one ``add``, ``replace`` or ``remove`` operation (RFC 6902) to ``obj`` in place."""
    op, pointer = operation.get("op"), operation.get("path", "")
    if op not in ("add", "replace", "remove"):
        raise ClusterError(f"{where}: JSON patch operation {op!r} is not supported")
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    if not tokens:
        raise ClusterError(f"{where}: JSON patch path {pointer!r} names the whole object")
    value = copy.deepcopy(operation.get("value"))
    parent = obj
    try:
        for token in tokens[:-1]:
            parent = parent[_index(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if op == "add" and last == "-" else _index(last)
            if op == "add":
                if index > len(parent):
                    raise IndexError(last)
                parent.insert(index, value)
            elif op == "replace":
                parent[index] = value
            else:
                del parent[index]
        else:
            if op != "add" and last not in parent:
                raise KeyError(last)
            if op == "remove":
                del parent[last]
            else:
                parent[last] = value
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ClusterError(f"{where}: JSON patch {op} {pointer} does not apply: no {exc}") from None


def _index(token: str) -> int:
    index = int(token)
    if index < 0:
        raise IndexError(token)
    return index


def merge(base: dict[str, Any], patch: dict[str, Any]) -> None:
    """Strategic merge, as far as these objects need it: maps merge, ``webhooks`` merge by name."""
    for key, value in patch.items():
        if key == "webhooks" and isinstance(value, list):
            by_name = {w["name"]: w for w in base.get(key) or []}
            for item in value:
                if item["name"] in by_name:
                    merge(by_name[item["name"]], item)
                else:
                    base.setdefault(key, []).append(copy.deepcopy(item))
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


# ---------------------------------------------------------------------------- files

def read_yaml(path: Path, project: str) -> dict[str, Any]:
    docs = [d for d in read_yaml_all(path, project) if d]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ClusterError(f"{path}: expected one YAML mapping, found {len(docs)} documents")
    return docs[0]


def read_yaml_all(path: Path, project: str) -> list[Any]:
    try:
        return list(yaml.load_all(Path(path).read_text(), Loader=_Loader))
    except OSError as exc:
        raise ClusterError(f"cannot read {project}'s {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ClusterError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from exc
