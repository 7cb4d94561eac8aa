"""charts/railyard with the real helm (tools/helm): it lints, renders every variant the kustomize
manifests offer, installs the same objects as they do, and refuses bad values with the reason.
The least-privilege rules run over its output too (test_manifests.py); the real API server
takes it in tests/e2e/test_helm.py."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
import yaml

from extender import app, settings as settings_mod
from extender.localcluster import binaries, config as localconfig
from tests.manifests.render import (CHART, NAMESPACE, VARIANTS, find, helm, helm_template, helm_template_run,
                                    helm_variant, kustomize_command, kustomize_variant, require_helm, values_file)

SECOND_SCHEDULER = [v for v in VARIANTS if v != "main-scheduler"]
#: The labels Helm's conventions add to the chart's objects and selectors; kustomize adds none of them.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")
#: kustomize's configMapGenerator appends a hash of the content to the name.
KUSTOMIZE_HASH = re.compile(r"-[a-z0-9]{10}$")


@pytest.fixture(scope="module", autouse=True)
def helm_binary():
    return require_helm()


def test_helm_is_the_pinned_build():
    assert helm("version", "--short").stdout.strip() == binaries.HELM.version()


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint_is_clean_for_every_variant(variant, tmp_path):
    out = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE,
               "--values", str(values_file(VARIANTS[variant], tmp_path)))
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def comparable(objects: list[dict[str, Any]], *, chart: bool) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Objects by (kind, namespace, name), normalised as test_the_chart_installs_what_kustomize_installs
    says, and in no other way."""
    out = {}
    for obj in objects:
        if obj["kind"] == "Namespace" and not chart:
            continue
        obj = _strip(obj, chart)
        meta = obj["metadata"]
        if obj["kind"] == "ConfigMap":
            if not chart:
                meta["name"] = KUSTOMIZE_HASH.sub("", meta["name"])
            obj["data"] = {key: yaml.safe_load(text) for key, text in obj["data"].items()}
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            if chart:
                annotations = template["metadata"].pop("annotations")
                assert list(annotations) == ["checksum/config"], annotations
            pod = template["spec"]
            for volume in pod["volumes"]:
                if "configMap" in volume and not chart:
                    volume["configMap"]["name"] = KUSTOMIZE_HASH.sub("", volume["configMap"]["name"])
            pod["volumes"].sort(key=lambda v: v["name"])
            for container in pod["containers"]:
                container["volumeMounts"].sort(key=lambda m: m["mountPath"])
        out[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
    return out


def _strip(node: Any, chart: bool, key: str = "") -> Any:
    """A copy without Helm's labels in any label map or selector (chart objects only)."""
    if isinstance(node, dict):
        copied = {k: _strip(v, chart, k) for k, v in node.items()}
        if chart and key in ("labels", "matchLabels", "selector"):
            for label in HELM_LABELS:
                copied.pop(label, None)
        return copied
    if isinstance(node, list):
        return [_strip(v, chart, key) for v in node]
    return node


@pytest.mark.skipif(kustomize_command() is None, reason="no kustomize: needs kubectl, kustomize or Go")
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_chart_installs_what_kustomize_installs(variant):
    """Equivalent, for each variant (the chart's values in render.VARIANTS against the matching
    kustomization): ``helm template railyard charts/railyard -n railyard-system`` and ``kustomize
    build`` give the same set of objects, by (kind, namespace, name), and every object is equal
    field by field (RBAC rules and subjects, the Deployment's whole pod spec, the Service, PDB,
    ServiceMonitor and token Secret, the KubeSchedulerConfiguration and railyard's settings),
    after exactly these normalisations:

    1. kustomize's Namespace is left out: the chart does not own its namespace (``helm install
       --create-namespace``, as Helm charts do), and so neither creates nor deletes it.
    2. kustomize's content hash is cut from generated ConfigMap names (and the volumes that
       mount them); the chart's pod-template annotation ``checksum/config``, which rolls the
       Deployment when a config changes as that hash does, is removed (and must be its only one).
    3. The labels Helm's conventions add (``helm.sh/chart``, ``app.kubernetes.io/managed-by``,
       ``instance``, ``version``) are removed from the chart's labels and selectors; every other
       label, kustomize's ``app.kubernetes.io/part-of`` included, must match.
    4. ConfigMap data is compared as parsed YAML: comments and key order differ, content does not.
    5. A pod's volumes (by name) and volume mounts (by path) are compared in sorted order: their
       order means nothing, and kustomize's HTTPS patch puts its volume first.
    """
    want = comparable(kustomize_variant(variant), chart=False)
    got = comparable(helm_variant(variant), chart=True)
    assert sorted(got) == sorted(want)
    assert len(got) >= 4  # main-scheduler: the extender's ServiceAccount, token, ClusterRole, binding
    for key in want:
        assert got[key] == want[key], f"{key} differs"


@pytest.mark.parametrize("variant", SECOND_SCHEDULER)
def test_railyard_accepts_the_settings_and_scheduler_config_the_chart_renders(variant, tmp_path):
    objects = helm_variant(variant)
    settings_file = tmp_path / "railyard.yaml"
    settings_file.write_text(find(objects, "ConfigMap", "railyard-settings")["data"]["railyard.yaml"])
    config_file = tmp_path / "scheduler-config.yaml"
    config_file.write_text(find(objects, "ConfigMap", "railyard-scheduler-config")["data"]["scheduler-config.yaml"])
    settings = app.load_settings(str(settings_file), {"scheduler_config": str(config_file)})
    assert settings.server.listen == "127.0.0.1:8888" and bool(settings.server.tls_cert_file) == (variant == "https")


def test_values_reach_the_objects_they_name():
    objects = helm_template({
        "image": {"repository": "registry.example/railyard", "tag": "0.2.0", "pullPolicy": "Always"},
        "kubeScheduler": {"image": {"tag": "v1.36.3"}, "resources": {"requests": {"cpu": "1"}},
                          "clientConnection": {"qps": 50, "burst": 100}},
        "railyard": {"resources": {"limits": {"memory": "4Gi"}},
                     "settings": {"gangs": {"default_timeout_seconds": 90}, "preemption": {"enabled": False}}},
        "extender": {"httpTimeout": "200s"},
        "replicas": 3, "schedulerName": "gpu", "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "imagePullSecrets": [{"name": "registry"}], "podAnnotations": {"team": "ml-platform"},
        "podDisruptionBudget": {"minAvailable": "50%"},
        "metrics": {"serviceMonitor": {"enabled": True, "interval": "1m", "labels": {"release": "prometheus"}}},
    })
    deploy = find(objects, "Deployment", "railyard-scheduler")
    pod = deploy["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert containers["railyard"]["image"] == "registry.example/railyard:0.2.0"
    assert containers["railyard"]["imagePullPolicy"] == "Always"
    assert containers["railyard"]["resources"]["limits"] == {"memory": "4Gi"}
    assert "imagePullPolicy" not in containers["kube-scheduler"]
    assert containers["kube-scheduler"]["image"] == "registry.k8s.io/kube-scheduler:v1.36.3"
    assert containers["kube-scheduler"]["resources"]["requests"]["cpu"] == "1"
    assert deploy["spec"]["replicas"] == 3
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["tolerations"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert deploy["spec"]["template"]["metadata"]["annotations"]["team"] == "ml-platform"
    assert find(objects, "PodDisruptionBudget", "railyard")["spec"]["minAvailable"] == "50%"
    monitor = find(objects, "ServiceMonitor", "railyard")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["interval"] == "1m"
    cfg = yaml.safe_load(find(objects, "ConfigMap", "railyard-scheduler-config")["data"]["scheduler-config.yaml"])
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["gpu", "gpu-sampled"]
    assert cfg["clientConnection"] == {"qps": 50, "burst": 100}
    assert cfg["extenders"][0]["httpTimeout"] == "200s"
    settings = yaml.safe_load(find(objects, "ConfigMap", "railyard-settings")["data"]["railyard.yaml"])
    # The user's settings are merged over the chart's: listeners stay.
    assert settings == {"gangs": {"default_timeout_seconds": 90}, "preemption": {"enabled": False},
                        "server": {"listen": "127.0.0.1:8888", "prefix": "/scheduler", "metrics_listen": "0.0.0.0:9090"},
                        "grpc": {"listen": "127.0.0.1:8889"}}


def test_steer_lone_pods_adds_the_gpu_resource_the_local_cluster_adds():
    """``extender.steerLonePods`` renders the managedResources of docs/reference.md's "Steering lone
    GPU pods", the same as ``cluster up --steer-lone-pods`` runs (tests/e2e/test_lone_pods.py);
    off, the marker alone."""
    def managed(values: dict[str, Any]) -> list[dict[str, Any]]:
        cfg = yaml.safe_load(find(helm_template(values), "ConfigMap", "railyard-scheduler-config")["data"]["scheduler-config.yaml"])
        return cfg["extenders"][0]["managedResources"]

    reference = localconfig.reference_scheduler_config()
    steered = localconfig.steer_lone_pods(reference, "nvidia.com/gpu")
    assert managed({"extender": {"steerLonePods": True}}) == steered["extenders"][0]["managedResources"] == [
        {"name": "railyard.io/gang-member", "ignoredByScheduler": True},
        {"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert managed({}) == reference["extenders"][0]["managedResources"] == [
        {"name": "railyard.io/gang-member", "ignoredByScheduler": True}]


def test_another_release_name_and_namespace_keep_every_reference_whole():
    """Names follow the release (``<release>-railyard`` unless it contains "railyard") and the
    namespace; whatever names one object gives another must follow with it."""
    objects = helm_template({"tls": {"enabled": True}}, release="gpu", namespace="sched")
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Deployment", "gpu-railyard-scheduler") in names and ("ClusterRole", "gpu-railyard-extender") in names
    assert {o["metadata"].get("namespace") for o in objects} == {"sched", "kube-system", None}
    cfg = yaml.safe_load(find(objects, "ConfigMap", "gpu-railyard-scheduler-config")["data"]["scheduler-config.yaml"])
    assert cfg["leaderElection"]["resourceName"] == "gpu-railyard-scheduler"
    assert cfg["leaderElection"]["resourceNamespace"] == "sched"
    assert cfg["extenders"][0]["tlsConfig"]["serverName"] == "gpu-railyard-extender.sched.svc"
    role = find(objects, "Role", "gpu-railyard-scheduler-leader-election")
    assert role["rules"][1]["resourceNames"] == ["gpu-railyard-scheduler"]
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert [s["namespace"] for s in binding["subjects"]] == ["sched"], binding["metadata"]["name"]
    # The admission policy's binding names the policy of this release.
    policy = find(objects, "MutatingAdmissionPolicy", "gpu-railyard-gang-members")
    assert find(objects, "MutatingAdmissionPolicyBinding", "gpu-railyard-gang-members")["spec"] == {
        "policyName": policy["metadata"]["name"]}


@pytest.mark.parametrize("values, message", [
    ({"tsl": {"enabled": True}}, "at '': additional properties 'tsl' not allowed"),
    ({"mode": "sidecar"}, "at '/mode'"),
    ({"replicas": 0}, "at '/replicas': minimum: got 0, want 1"),
    ({"extender": {"httpTimeout": "150"}}, "at '/extender/httpTimeout'"),
    ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, "at '/metrics/serviceMonitor/interval'"),
    ({"railyard": {"settings": {"gang": {"default_timeout_seconds": 90}}}},
     "at '/railyard/settings': additional properties 'gang' not allowed"),
    ({"podDisruptionBudget": {"minAvailable": "half"}}, "at '/podDisruptionBudget/minAvailable'"),
])
def test_the_schema_refuses_bad_values_naming_them(values, message):
    out = helm_template_run(values)
    assert out.returncode != 0
    assert "values don't meet the specifications of the schema" in out.stderr, out.stderr
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("option", ["tls", "kueue", "metrics.serviceMonitor"])
def test_main_scheduler_refuses_the_second_schedulers_options(option):
    values: dict[str, Any] = {"mode": "main-scheduler"}
    target = values
    *parents, last = option.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = {"enabled": True}
    out = helm_template_run(values)
    assert out.returncode != 0
    assert f"{option}.enabled=true needs mode=second-scheduler" in out.stderr, out.stderr


def test_metrics_off_leaves_no_listener_and_no_service():
    objects = helm_template({"metrics": {"enabled": False}})
    assert not [o for o in objects if o["kind"] in ("Service", "ServiceMonitor")]
    settings = yaml.safe_load(find(objects, "ConfigMap", "railyard-settings")["data"]["railyard.yaml"])
    assert "metrics_listen" not in settings["server"]
    pod = find(objects, "Deployment", "railyard-scheduler")["spec"]["template"]["spec"]
    assert "ports" not in {c["name"]: c for c in pod["containers"]}["railyard"]
    out = helm_template_run({"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}})
    assert "metrics.serviceMonitor.enabled=true needs metrics.enabled=true" in out.stderr, out.stderr


def test_the_schema_knows_every_settings_section():
    """railyard.settings refuses unknown sections, so it must list every one railyard reads."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    sections = schema["properties"]["railyard"]["properties"]["settings"]["properties"]
    wanted = {f.name for f in dataclasses.fields(settings_mod.Settings) if f.default_factory is not dataclasses.MISSING}
    assert set(sections) == wanted  # the sections are the fields with a settings dataclass of their own


def test_every_value_is_in_the_readme():
    """The chart's README documents every leaf value of values.yaml, by its dotted path."""
    readme = (CHART / "README.md").read_text()

    def leaves(node: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value and path != "railyard.settings" and not path.endswith("resources"):
                out += leaves(value, path + ".")
            else:
                out.append(path)
        return out

    missing = [path for path in leaves(yaml.safe_load((CHART / "values.yaml").read_text()))
               if f"`{path}`" not in readme]
    assert not missing
