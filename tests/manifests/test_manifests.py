"""manifests/ rendered with kustomize, and charts/railyard rendered with helm: what ships is
least-privilege, non-root, and carries the reference scheduler configuration railyard itself
accepts. Tests taking ``base`` run on both renderings of the default install; the least-privilege
rules run on both renderings of every variant (``rendered``). The real API server and
kube-scheduler check them too (tests/e2e/test_deploy.py, tests/e2e/test_helm.py)."""

from __future__ import annotations

import pytest
import yaml

from extender import app
from tests.manifests.render import MANIFESTS, VARIANTS, find, helm_variant, kustomize_command, kustomize_variant, render

pytestmark = pytest.mark.skipif(kustomize_command() is None, reason="no kustomize: needs kubectl, kustomize or Go")

NAMESPACED = {"ServiceAccount", "Secret", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
              "Role", "RoleBinding", "ServiceMonitor"}


RENDERERS = {"kustomize": kustomize_variant, "helm": helm_variant}


@pytest.fixture(scope="module", params=RENDERERS)
def base(request) -> list[dict]:
    """The default install, as kustomize renders manifests/base and helm the chart's defaults."""
    return RENDERERS[request.param]("base")


@pytest.fixture(scope="module")
def kustomize_base() -> list[dict]:
    return kustomize_variant("base")


@pytest.fixture(params=[(tool, variant) for tool in RENDERERS for variant in VARIANTS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def rendered(request) -> list[dict]:
    """Every install variant, both ways."""
    tool, variant = request.param
    return RENDERERS[tool](variant)


def scheduler_config(objects: list[dict]) -> dict:
    return yaml.safe_load(find(objects, "ConfigMap", "railyard-scheduler-config")["data"]["scheduler-config.yaml"])


def test_every_namespaced_object_names_its_namespace(base):
    for obj in base:
        if obj["kind"] in NAMESPACED:
            assert obj["metadata"].get("namespace") in ("railyard-system", "kube-system"), obj["metadata"]


def test_the_reference_scheduler_config(base):
    cfg = scheduler_config(base)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["railyard", "railyard-sampled"]
    assert cfg["percentageOfNodesToScore"] == 100  # gang members: their planned node must reach railyard
    sampled = cfg["profiles"][1]
    assert sampled["percentageOfNodesToScore"] == 5  # single pods: 5% of the nodes, at least 100
    assert sampled["pluginConfig"] == cfg["profiles"][0]["pluginConfig"]
    assert cfg["leaderElection"]["leaderElect"] is True
    assert "kubeconfig" not in cfg["clientConnection"]  # in-cluster credentials
    # Best fit is kube-scheduler's own scoring in railyard's profile, not a prioritize verb.
    assert cfg["profiles"][0]["pluginConfig"] == [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": "MostAllocated", "resources": [{"name": "nvidia.com/gpu", "weight": 1}]}}}]
    (ext,) = cfg["extenders"]
    assert ext == {
        "urlPrefix": "http://127.0.0.1:8888/scheduler",
        "filterVerb": "filter", "preemptVerb": "preempt", "bindVerb": "bind",
        "nodeCacheCapable": True, "enableHTTPS": False,
        "managedResources": [{"name": "railyard.io/gang-member", "ignoredByScheduler": True}],
        "ignorable": False, "httpTimeout": "150s",
    }


def test_railyard_accepts_its_settings_and_the_scheduler_config_together(base, tmp_path):
    settings_file = tmp_path / "railyard.yaml"
    settings_file.write_text(find(base, "ConfigMap", "railyard-settings")["data"]["railyard.yaml"])
    config_file = tmp_path / "scheduler-config.yaml"
    config_file.write_text(yaml.safe_dump(scheduler_config(base)))
    settings = app.load_settings(str(settings_file), {"scheduler_config": str(config_file)})
    assert settings.server.listen == "127.0.0.1:8888" and settings.grpc.listen == "127.0.0.1:8889"
    assert settings.server.metrics_listen == "0.0.0.0:9090"
    timeout = app.parse_duration(scheduler_config(base)["extenders"][0]["httpTimeout"])
    assert timeout > settings.gangs.default_timeout_seconds + 60


def test_the_extender_role_is_exactly_what_railyard_uses(rendered):
    role = find(rendered, "ClusterRole", "railyard-extender")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"),
        ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
        ("scheduling.x-k8s.io", "podgroups", "get"), ("scheduling.x-k8s.io", "podgroups", "list"),
        ("scheduling.x-k8s.io", "podgroups", "watch"),
        *((group, "podgroups", verb) for group in ("scheduling.k8s.io", "scheduling.volcano.sh", "scheduling.run.ai")
          for verb in ("list", "watch")),
        ("", "pods/binding", "create"),
        ("", "pods", "delete"),  # the compensating eviction after a failed gang bind
        ("", "pods", "patch"),  # the Binding round on each member before its Binding (recovery)
        ("", "pods/eviction", "create"),  # a gang's preemption victims (Eviction API)
        ("", "pods/status", "patch"),  # a planned member's nominatedNodeName, before its gate is lifted
        ("", "events", "create"),
        *((("resource.k8s.io", r, v) for r in ("deviceclasses", "resourceslices", "resourceclaims",
                                                "resourceclaimtemplates") for v in ("get", "list", "watch"))),
        ("resource.k8s.io", "resourceclaims/status", "patch"),  # deallocating a leftover of a failed bind
        ("resource.k8s.io", "resourceclaims/binding", "patch"),  # what changing status.allocation needs
        # the workload kinds whose objects size a gang (docs/workloads.md)
        *((group, kind, verb) for group, kind in (("jobset.x-k8s.io", "jobsets"),
                                                  ("leaderworkerset.x-k8s.io", "leaderworkersets"), ("batch", "jobs"))
          for verb in ("list", "watch")),
    }
    binding = find(rendered, "ClusterRoleBinding", "railyard-extender")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "railyard", "namespace": "railyard-system"}]


def test_no_wildcards_no_secrets_no_cluster_admin(rendered):
    for obj in rendered:
        for rule in obj.get("rules", []):
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], obj["metadata"]["name"]
            assert "secrets" not in rule["resources"], obj["metadata"]["name"]
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert obj["roleRef"]["name"] != "cluster-admin"
    bindings = [b for b in rendered if b["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert all(len(b["subjects"]) == 1 for b in bindings)
    scheduler_roles = {b["roleRef"]["name"] for b in bindings if b["subjects"][0]["name"] == "railyard-scheduler"}
    second_scheduler = any(o["kind"] == "Deployment" for o in rendered)
    assert scheduler_roles == ({"system:kube-scheduler", "system:volume-scheduler",
                                "extension-apiserver-authentication-reader", "railyard-scheduler-leader-election"}
                               if second_scheduler else set())


def test_the_deployment_runs_non_root_read_only_with_two_identities(rendered):
    if not any(o["kind"] == "Deployment" for o in rendered):
        assert {o["kind"] for o in rendered} <= {"Namespace", "ServiceAccount", "Secret", "ClusterRole",
                                                 "ClusterRoleBinding", "MutatingAdmissionPolicy",
                                                 "MutatingAdmissionPolicyBinding"}  # main-scheduler: the identity only
        return
    base = rendered
    deploy = find(base, "Deployment", "railyard-scheduler")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "railyard-scheduler"
    assert pod["securityContext"]["runAsNonRoot"] is True
    containers = {c["name"]: c for c in pod["containers"]}
    assert containers["kube-scheduler"]["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"
    for c in containers.values():
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert c["livenessProbe"] and c["readinessProbe"] and c["resources"]["requests"]
    mounts = {m["mountPath"]: m for m in containers["railyard"]["volumeMounts"]}
    assert mounts["/var/run/secrets/kubernetes.io/serviceaccount"]["name"] == "extender-token"
    # Writable: only /tmp, an emptyDir; everything else it mounts is read-only.
    assert [path for path, m in mounts.items() if not m.get("readOnly")] == ["/tmp"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["extender-token"]["secret"]["secretName"] == "railyard-extender-token"
    token = find(base, "Secret", "railyard-extender-token")
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "railyard"
    # The generated ConfigMap names (with their hash) are the ones mounted.
    names = {o["metadata"]["name"] for o in base if o["kind"] == "ConfigMap"}
    assert {v["configMap"]["name"] for v in volumes.values() if "configMap" in v} == names
    assert "emptyDir" in volumes["tmp"]


def test_railyards_kube_scheduler_runs_without_pod_group_cycles(base):
    """The reference for the Workload API (docs/reference.md): GenericWorkload stays off on
    railyard's own kube-scheduler, so railyard alone gates Kubernetes PodGroups' pods, and no
    profile is left with GangScheduling enabled explicitly."""
    deploy = find(base, "Deployment", "railyard-scheduler")
    (scheduler,) = [c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler"]
    argv = scheduler["command"] + scheduler.get("args", [])
    assert not [a for a in argv if a.startswith("--feature-gates")], argv
    for profile in scheduler_config(base)["profiles"]:
        enabled = (profile.get("plugins") or {}).get("multiPoint", {}).get("enabled") or []
        assert "GangScheduling" not in [p["name"] for p in enabled], profile


def test_pdb_and_metrics_service_select_the_scheduler_pods(base):
    labels = find(base, "Deployment", "railyard-scheduler")["spec"]["template"]["metadata"]["labels"]
    for kind, selector in (("PodDisruptionBudget", lambda o: o["spec"]["selector"]["matchLabels"]),
                           ("Service", lambda o: o["spec"]["selector"])):
        obj = find(base, kind, "railyard")
        assert selector(obj).items() <= labels.items()
    ports = {p["name"]: p["port"] for p in find(base, "Service", "railyard-metrics")["spec"]["ports"]}
    assert ports["metrics"] == 9090


def test_https_overlay_differs_from_the_reference_only_in_tls():
    https = render(MANIFESTS / "overlays" / "https")
    cfg = scheduler_config(https)
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "https://127.0.0.1:8888/scheduler" and ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {"caFile": "/etc/railyard/tls/ca.crt",
                                "serverName": "railyard-extender.railyard-system.svc"}
    reference = yaml.safe_load((MANIFESTS / "base" / "scheduler-config.yaml").read_text())
    for key in ("urlPrefix", "enableHTTPS", "tlsConfig"):
        ext.pop(key)
        reference["extenders"][0].pop(key, None)
    cfg.pop("extenders")
    assert ext == reference.pop("extenders")[0] and cfg == reference
    settings = yaml.safe_load(find(https, "ConfigMap", "railyard-settings")["data"]["railyard.yaml"])
    assert settings["grpc"]["client_ca_file"] == "/etc/railyard/tls/ca.crt"
    pod = find(https, "Deployment", "railyard-scheduler")["spec"]["template"]["spec"]
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}["tls"] == "railyard-tls"


def test_the_manifests_root_is_the_base():
    assert render(MANIFESTS) == render(MANIFESTS / "base")


def test_main_scheduler_overlay_is_the_extender_identity_only_and_its_snippet_matches():
    objs = render(MANIFESTS / "overlays" / "main-scheduler")
    assert sorted(o["kind"] for o in objs) == ["ClusterRole", "ClusterRoleBinding", "MutatingAdmissionPolicy",
                                               "MutatingAdmissionPolicyBinding", "Namespace", "Secret",
                                               "ServiceAccount"]
    snippet = yaml.safe_load((MANIFESTS / "overlays" / "main-scheduler" / "scheduler-extender.yaml").read_text())
    reference = yaml.safe_load((MANIFESTS / "base" / "scheduler-config.yaml").read_text())
    # The same extender, plus the prioritize verb: the main scheduler's profiles keep their own
    # scoring, so railyard scores the GPU pods (the base uses its profile's MostAllocated).
    (ext,) = snippet["extenders"]
    assert {k: v for k, v in ext.items() if k not in ("prioritizeVerb", "weight")} == reference["extenders"][0]
    assert ext["prioritizeVerb"] == "prioritize" and ext["weight"] == 1
    assert snippet["percentageOfNodesToScore"] == 100


@pytest.mark.parametrize("tool", RENDERERS)
def test_servicemonitor_selects_the_metrics_service(tool):
    objs = RENDERERS[tool]("servicemonitor")
    monitor = find(objs, "ServiceMonitor", "railyard")
    service = find(objs, "Service", "railyard-metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}


def test_kueue_overlay_is_the_base_with_kube_schedulers_preemption_off_for_railyard(kustomize_base):
    base = kustomize_base
    kueue = render(MANIFESTS / "overlays" / "kueue")
    cfg = scheduler_config(kueue)
    reference = scheduler_config(base)
    off = {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}}
    assert cfg["profiles"] == [{**p, "plugins": off} for p in reference["profiles"]]
    cfg.pop("profiles"), reference.pop("profiles")
    assert cfg == reference
    # Kueue's side (Configuration, queues) is for Kueue's install, not applied with railyard's.
    assert not [o for o in kueue if o.get("apiVersion", "").startswith(("kueue.x-k8s.io", "config.kueue.x-k8s.io"))]
    def names(objects):  # a ConfigMap's name ends in its content hash
        return sorted((o["kind"], o["metadata"]["name"].rsplit("-", 1)[0] if o["kind"] == "ConfigMap"
                       else o["metadata"]["name"]) for o in objects)

    assert names(kueue) == names(base)
