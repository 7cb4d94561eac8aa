"""charts/railyard installed by the real helm (tools/helm, v4) onto the local cluster.

Every variant is installed for real, not with ``helm install --dry-run=server``: Helm's server
dry run renders with the cluster's lookups but checks the objects only against the cluster's
OpenAPI schema on the client, while a real install sends each object to the API server
(server-side apply, ``fieldValidation=Strict``), which runs admission, strict decoding and every
validation, and the test then reads each object back. The local cluster has no kubelets for these
pods and no kube-controller-manager, so the Deployment makes no pods and the token Secret stays
empty: validation is the point. Each release is uninstalled before the next.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from tests.manifests.render import CHART, NAMESPACE, RELEASE, VARIANTS, helm, require_helm, values_file

from .helpers import api_client, create_servicemonitor_crd, wait_for

TOPOLOGY = "blocks=1 racks=1 nvl=1 nodes=2 gpus=8 scheme=topograph"
EXTENDER = f"system:serviceaccount:{NAMESPACE}:railyard"
SCHEDULER = f"system:serviceaccount:{NAMESPACE}:railyard-scheduler"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    require_helm()
    # No extender: the chart must create the extender's identity itself, not find the one
    # `cluster up` makes from manifests/.
    return local_cluster(topology=TOPOLOGY, extender=False)


@pytest.fixture(scope="module")
def dynamic(cluster) -> DynamicClient:
    return create_servicemonitor_crd(api_client(cluster.kubeconfig))


def install(cluster, values: dict[str, Any], tmp_path: Path, check: bool = True):
    return helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                "--kubeconfig", str(cluster.kubeconfig), "--values", str(values_file(values, tmp_path)),
                check=check)


def uninstall(cluster) -> None:
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--kubeconfig", str(cluster.kubeconfig))


def live(dynamic: DynamicClient, obj: dict[str, Any]) -> dict[str, Any] | None:
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        return dynamic.get(resource, name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace")).to_dict()
    except NotFoundError:
        return None


def allowed(cluster, user: str, verb: str, resource: str, *, group: str = "", subresource: str = "",
            namespace: str = "ml", name: str = "") -> bool:
    review = kubernetes.client.AuthorizationV1Api(api_client(cluster.kubeconfig)).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "name": name,
                                        "subresource": subresource, "namespace": namespace}}})
    return review.status.allowed


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_installs_into_the_cluster(cluster, dynamic, variant, tmp_path):
    """The API server takes every object of the variant; each is there, labelled as Helm's; the
    release is deployed; uninstall removes every one."""
    install(cluster, VARIANTS[variant], tmp_path)
    try:
        manifest = helm("get", "manifest", RELEASE, "--namespace", NAMESPACE, "--kubeconfig", str(cluster.kubeconfig))
        objects = [o for o in yaml.safe_load_all(manifest.stdout) if o]
        kinds = {o["kind"] for o in objects}
        assert "ClusterRole" in kinds and ("Deployment" in kinds) == (variant != "main-scheduler")
        assert ("ServiceMonitor" in kinds) == (variant == "servicemonitor")
        for obj in objects:
            stored = live(dynamic, obj)
            assert stored is not None, f"{obj['kind']} {obj['metadata']['name']} not in the cluster"
            assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
            assert stored["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
        status = helm("status", RELEASE, "--namespace", NAMESPACE, "--kubeconfig", str(cluster.kubeconfig),
                      "--output", "json")
        assert yaml.safe_load(status.stdout)["info"]["status"] == "deployed"
    finally:
        uninstall(cluster)
    for obj in objects:
        wait_for(lambda obj=obj: live(dynamic, obj) is None, 30, f"{obj['kind']} {obj['metadata']['name']} to go")


def test_the_installed_identities_have_what_they_need_and_no_more(cluster, dynamic, tmp_path):
    """The chart's RBAC as the API server's authorizer applies it (the default install)."""
    install(cluster, {}, tmp_path)
    try:
        # The extender: its watch cache, Bindings, Events, evictions; never Secrets or pod creation.
        assert allowed(cluster, EXTENDER, "watch", "pods") and allowed(cluster, EXTENDER, "list", "nodes")
        assert allowed(cluster, EXTENDER, "create", "pods", subresource="binding")
        assert allowed(cluster, EXTENDER, "create", "pods", subresource="eviction")
        assert allowed(cluster, EXTENDER, "list", "podgroups", group="scheduling.x-k8s.io")
        assert allowed(cluster, EXTENDER, "create", "events")
        assert not allowed(cluster, EXTENDER, "get", "secrets") and not allowed(cluster, EXTENDER, "create", "pods")
        assert not allowed(cluster, EXTENDER, "update", "nodes")
        # kube-scheduler: the bootstrap system:kube-scheduler role the chart binds (so the binding
        # names a role that exists), its own Lease, the authentication reader; not the extender's.
        assert allowed(cluster, SCHEDULER, "create", "pods", subresource="binding")
        lease = {"resource": "leases", "group": "coordination.k8s.io", "namespace": NAMESPACE}
        assert allowed(cluster, SCHEDULER, "update", name="railyard-scheduler", **lease)
        assert not allowed(cluster, SCHEDULER, "update", name="some-other-lease", **lease)
        assert allowed(cluster, SCHEDULER, "get", "configmaps", namespace="kube-system",
                       name="extension-apiserver-authentication")
        assert not allowed(cluster, SCHEDULER, "get", "secrets", namespace=NAMESPACE)
    finally:
        uninstall(cluster)


def test_the_api_server_refuses_what_the_chart_cannot_check(cluster, tmp_path):
    """Proof that the installs above reach the server's validation: an annotation key the schema
    lets through (it cannot check annotation keys) is refused by the API server, naming it.
    (``helm install --dry-run=server`` with the same values exits 0 with helm v4.3.2.)"""
    out = install(cluster, {"podAnnotations": {"not a key!": "x"}}, tmp_path, check=False)
    try:
        assert out.returncode != 0
        assert "server-side apply failed" in out.stderr and "is invalid" in out.stderr, out.stderr
        assert 'spec.template.annotations: Invalid value: "not a key!"' in out.stderr, out.stderr
    finally:
        uninstall(cluster)
