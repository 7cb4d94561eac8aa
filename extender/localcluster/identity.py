"""The extender's own identity on the local cluster: the ServiceAccount and RBAC from
``manifests/`` and a token for it, so the extender runs as users run it, not as admin.

The API server authorizes with RBAC (``config.apiserver_args``), so any permission the
manifests forgot fails the e2e tests the way it would fail in a real cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from extender.localcluster import config
from extender.localcluster.errors import ClusterError

#: A week: longer than any test run or benchmark; the cluster is recreated by every ``up``.
TOKEN_SECONDS = 7 * 24 * 3600

# kind -> (API path prefix, resource, namespaced): the kinds extender-rbac/ holds.
_PATHS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
}


class Api(Protocol):
    """The admin client ``apiclient.ApiClient`` offers."""

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]: ...
    def create(self, path: str, obj: dict[str, Any]) -> None: ...


def collection_path(obj: dict[str, Any]) -> str:
    """Where to POST ``obj``."""
    kind = obj.get("kind", "")
    if kind not in _PATHS:
        raise ClusterError(f"manifests/base/extender-rbac has a {kind} the local cluster cannot create; "
                           f"add it to localcluster/identity.py")
    prefix, resource, namespaced = _PATHS[kind]
    if namespaced:
        return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{resource}"
    return f"{prefix}/{resource}"


def create_extender_identity(api: Api, ca_cert: Path, api_url: str, kubeconfig_file: Path) -> str:
    """Create the extender's objects from ``manifests/`` (as admin), write a kubeconfig with its
    ServiceAccount token to ``kubeconfig_file``; return the username the API server sees."""
    for obj in config.extender_objects():
        api.create(collection_path(obj), obj)
    namespace, name = config.EXTENDER_SERVICE_ACCOUNT
    status, data = api.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": TOKEN_SECONDS}})
    if status != 201:
        raise ClusterError(f"requesting a token for ServiceAccount {namespace}/{name} failed: HTTP {status}: "
                           f"{data[:300].decode('utf-8', 'replace')}")
    token = json.loads(data)["status"]["token"]
    kubeconfig_file.write_text(config.dump_yaml(config.token_kubeconfig(ca_cert, api_url, token)))
    kubeconfig_file.chmod(0o600)
    return f"system:serviceaccount:{namespace}:{name}"
