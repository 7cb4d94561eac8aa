"""Rendering upstream kustomize trees, without GOMODCACHE.

The trees here are miniatures of the real ones (same file names, kustomization fields and patch
shapes): JobSet v0.12.0's ``config/components/webhook`` (JSON 6902 patches that replace a
webhook by index, targeted by kind and name) and Kubeflow Trainer v2.3.0's
``manifests/base/webhook`` (patches targeted by kind alone that rename the configuration and
add object selectors). Kueue's strategic-merge patches are tests/localcluster/test_kueue.py.
The e2e tests install the real trees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.localcluster import kustomize
from extender.localcluster.errors import ClusterError

from .fakes import write


WEBHOOKS = """\
    ---
    apiVersion: admissionregistration.k8s.io/v1
    kind: MutatingWebhookConfiguration
    metadata:
      name: mutating-webhook-configuration
    webhooks:
    - name: mjobset.kb.io
      clientConfig:
        service: {name: webhook-service, namespace: system, path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}
    - name: mpod.kb.io
      clientConfig:
        service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
    ---
    apiVersion: admissionregistration.k8s.io/v1
    kind: ValidatingWebhookConfiguration
    metadata:
      name: validating-webhook-configuration
    webhooks:
    - name: vjobset.kb.io
      clientConfig:
        service: {name: webhook-service, namespace: system, path: /validate-jobset-x-k8s-io-v1alpha2-jobset}
    """


@pytest.fixture
def jobset(tmp_path) -> Path:
    root = tmp_path / "jobset@v0.12.0"
    components = root / "config" / "components"
    write(components / "crd" / "kustomization.yaml", """\
        resources:
        - bases/jobset.x-k8s.io_jobsets.yaml
        patches:
        - path: patches/webhook_in_jobsets.yaml
        - path: patches/cainjection_in_jobsets.yaml
        configurations:
        - kustomizeconfig.yaml
        """)
    write(components / "crd" / "bases" / "jobset.x-k8s.io_jobsets.yaml", """\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          name: jobsets.jobset.x-k8s.io
        spec:
          group: jobset.x-k8s.io
        """)
    write(components / "crd" / "patches" / "webhook_in_jobsets.yaml", """\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          name: jobsets.jobset.x-k8s.io
        spec:
          conversion:
            strategy: Webhook
            webhook:
              clientConfig:
                service: {namespace: system, name: webhook-service, path: /convert}
              conversionReviewVersions: [v1]
        """)
    write(components / "crd" / "patches" / "cainjection_in_jobsets.yaml", """\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          annotations:
            cert-manager.io/inject-ca-from: $(CERTIFICATE_NAMESPACE)/$(CERTIFICATE_NAME)
          name: jobsets.jobset.x-k8s.io
        """)
    write(components / "webhook" / "manifests.yaml", WEBHOOKS)
    write(components / "webhook" / "service.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: webhook-service}\n")
    write(components / "webhook" / "kustomization.yaml", """\
        resources:
        - manifests.yaml
        - service.yaml
        patches:
        - path: patches/mutating-patch.yaml
          target:
            group: admissionregistration.k8s.io
            version: v1
            kind: MutatingWebhookConfiguration
            name: mutating-webhook-configuration
        """)
    write(components / "webhook" / "patches" / "mutating-patch.yaml", """\
        - op: replace
          path: /webhooks/1
          value:
            clientConfig:
              service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
            failurePolicy: Fail
            name: mpod.kb.io
            objectSelector:
              matchExpressions:
              - {key: jobset.sigs.k8s.io/jobset-name, operator: Exists}
        """)
    write(root / "config" / "default" / "kustomization.yaml", "namespace: jobset-system\nnamePrefix: jobset-\n")
    return root


JOBSET = kustomize.Layout(crds="config/components/crd", webhooks="config/components/webhook",
                          overlay="config/default")


def test_json6902_patches_replace_a_webhook_by_index_and_the_overlay_prefixes_names(jobset):
    sources = kustomize.load_sources(jobset, JOBSET, "JobSet")
    (crd,) = sources.crds
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    assert [c["metadata"]["name"] for c in sources.webhook_configurations] == [
        "jobset-mutating-webhook-configuration", "jobset-validating-webhook-configuration"]
    mutating = sources.webhook_configurations[0]["webhooks"]
    assert [w["name"] for w in mutating] == ["mjobset.kb.io", "mpod.kb.io"]
    assert mutating[1]["objectSelector"]["matchExpressions"] == [
        {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    assert "objectSelector" not in sources.webhook_configurations[1]["webhooks"][0]  # not a target
    # A patch's metadata only names its target: cert-manager's annotation is not copied.
    assert "annotations" not in crd["metadata"]


def test_a_kind_only_target_patches_every_object_of_that_kind(tmp_path):
    webhook = tmp_path / "manifests" / "base" / "webhook"
    write(webhook / "manifests.yaml", WEBHOOKS)
    write(webhook / "kustomization.yaml", """\
        resources:
          - manifests.yaml
        patches:
          - path: patch_validating.yaml
            target:
              group: admissionregistration.k8s.io
              version: v1
              kind: ValidatingWebhookConfiguration
        """)
    write(webhook / "patch_validating.yaml", """\
        - op: replace
          path: /metadata/name
          value: validator.trainer.kubeflow.org
        - op: add
          path: /webhooks/0/objectSelector
          value:
            matchExpressions:
              - {key: trainer.kubeflow.org/webhook-validation, operator: NotIn, values: [disabled]}
        """)
    objects = kustomize.render(webhook, "Trainer")
    assert [o["metadata"]["name"] for o in objects] == ["mutating-webhook-configuration",
                                                         "validator.trainer.kubeflow.org"]
    assert objects[1]["webhooks"][0]["objectSelector"]["matchExpressions"][0]["values"] == ["disabled"]
    assert "objectSelector" not in objects[0]["webhooks"][0]


@pytest.mark.parametrize("operation, expected", [
    ({"op": "add", "path": "/a/1", "value": 9}, {"a": [1, 9, 2], "m": {"k": "v"}}),
    ({"op": "add", "path": "/a/-", "value": 9}, {"a": [1, 2, 9], "m": {"k": "v"}}),
    ({"op": "replace", "path": "/a/0", "value": 9}, {"a": [9, 2], "m": {"k": "v"}}),
    ({"op": "remove", "path": "/a/0"}, {"a": [2], "m": {"k": "v"}}),
    ({"op": "add", "path": "/m/new", "value": 1}, {"a": [1, 2], "m": {"k": "v", "new": 1}}),
    ({"op": "replace", "path": "/m/k", "value": "w"}, {"a": [1, 2], "m": {"k": "w"}}),
    ({"op": "remove", "path": "/m/k"}, {"a": [1, 2], "m": {}}),
    ({"op": "add", "path": "/m/a~1b", "value": 1}, {"a": [1, 2], "m": {"k": "v", "a/b": 1}}),
])
def test_json6902_operations(operation, expected):
    obj = {"a": [1, 2], "m": {"k": "v"}}
    kustomize.json6902(obj, operation, Path("p.yaml"))
    assert obj == expected


@pytest.mark.parametrize("operation, message", [
    ({"op": "replace", "path": "/m/missing", "value": 1}, "JSON patch replace /m/missing does not apply"),
    ({"op": "remove", "path": "/a/5"}, "JSON patch remove /a/5 does not apply"),
    ({"op": "add", "path": "/a/7", "value": 1}, "JSON patch add /a/7 does not apply"),
    ({"op": "replace", "path": "/a/-1", "value": 1}, "does not apply"),
    ({"op": "move", "from": "/a/0", "path": "/a/1"}, "operation 'move' is not supported"),
    ({"op": "replace", "path": "", "value": 1}, "names the whole object"),
])
def test_json6902_refuses_what_it_cannot_apply(operation, message):
    obj = {"a": [1, 2], "m": {"k": "v"}}
    with pytest.raises(ClusterError, match=message):
        kustomize.json6902(obj, operation, Path("p.yaml"))
    assert obj == {"a": [1, 2], "m": {"k": "v"}}


def test_a_targeted_patch_that_matches_nothing_is_an_error(jobset):
    kustomization = jobset / "config" / "components" / "webhook" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("name: mutating-webhook", "name: renamed-webhook"))
    with pytest.raises(ClusterError, match="a patch targets .*renamed-webhook-configuration.*which is not there"):
        kustomize.load_sources(jobset, JOBSET, "JobSet")


def test_a_directory_resource_is_refused(jobset):
    kustomization = jobset / "config" / "components" / "crd" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("- bases/jobset.x-k8s.io_jobsets.yaml", "- bases"))
    with pytest.raises(ClusterError, match="resource bases is a directory"):
        kustomize.load_sources(jobset, JOBSET, "JobSet")


def test_a_missing_tree_names_the_project_and_file(tmp_path):
    with pytest.raises(ClusterError, match="cannot read JobSet's .*config/components/crd/kustomization.yaml"):
        kustomize.load_sources(tmp_path, JOBSET, "JobSet")
