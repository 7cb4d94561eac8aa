"""Command lines and configs of the local cluster, without any binary."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from extender.localcluster import config, pki

PORTS = config.Ports(etcd_client=2379, etcd_peer=2380, apiserver=6443, scheduler=10259, kwok=10247, extender=8888,
                     extender_grpc=8889)


def test_scheduler_config_serves_both_names_and_scores_every_node():
    cfg = config.scheduler_config(Path("/w/kubeconfig"), None)
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    # kube-scheduler alone: its stock profiles.
    assert cfg["profiles"] == [{"schedulerName": "default-scheduler"}, {"schedulerName": "railyard"}]
    assert cfg["percentageOfNodesToScore"] == 100
    assert cfg["clientConnection"] == {"kubeconfig": "/w/kubeconfig", "qps": 1000, "burst": 2000}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert "extenders" not in cfg


def test_scheduler_config_is_the_reference_one_from_manifests_bound_to_this_cluster():
    cfg = config.scheduler_config(Path("/w/kubeconfig"), "http://127.0.0.1:4321/scheduler")
    reference = yaml.safe_load((config.MANIFESTS / "base" / "scheduler-config.yaml").read_text())
    (ext,) = cfg["extenders"]
    (shipped,) = reference["extenders"]
    assert ext == {**shipped, "urlPrefix": "http://127.0.0.1:4321/scheduler"}
    assert ext["httpTimeout"] == "150s" and ext["bindVerb"] == "bind" and ext["nodeCacheCapable"] is True
    assert cfg["percentageOfNodesToScore"] == reference["percentageOfNodesToScore"]
    # default-scheduler is the reference's first profile (railyard: every node), then the reference's own.
    assert cfg["profiles"] == [{**reference["profiles"][0], "schedulerName": "default-scheduler"},
                               *reference["profiles"]]
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["default-scheduler", "railyard", "railyard-sampled"]
    # Round-trips through YAML as the scheduler will read it (strict decoding: exact keys).
    assert yaml.safe_load(config.dump_yaml(cfg)) == cfg


def test_the_extender_identity_comes_from_manifests():
    kinds = [(o["kind"], o["metadata"]["name"]) for o in config.extender_objects()]
    assert ("ServiceAccount", "railyard") in kinds and ("ClusterRole", "railyard-extender") in kinds
    assert kinds[0] == ("Namespace", "railyard-system")  # first, so the namespaced ones can follow


def test_token_kubeconfig_carries_the_token_and_the_ca(tmp_path):
    files = pki.generate(tmp_path)
    kc = config.token_kubeconfig(files.ca_cert, "https://127.0.0.1:6443", "tok")
    assert kc["users"][0] == {"name": "system:serviceaccount:railyard-system:railyard", "user": {"token": "tok"}}
    assert kc["clusters"][0]["cluster"]["certificate-authority-data"]


def test_everything_listens_on_loopback(tmp_path):
    files = pki.Pki.at(tmp_path)
    b = Path("/bin/x")
    etcd = config.etcd_args(b, tmp_path / "etcd", PORTS)
    api = config.apiserver_args(b, files, PORTS, tmp_path)
    sched = config.scheduler_args(b, tmp_path / "s.yaml", tmp_path / "k", PORTS)
    kwok = config.kwok_args(b, tmp_path / "k", tmp_path / "st.yaml", PORTS)
    for flag in etcd:
        if "-urls=" in flag or "--initial-cluster=" in flag:
            assert "//127.0.0.1:" in flag, flag
    assert "--bind-address=127.0.0.1" in api and "--advertise-address=127.0.0.1" in api
    assert "--bind-address=127.0.0.1" in sched
    assert "--server-address=127.0.0.1:10247" in kwok


def test_apiserver_flags_from_the_issue(tmp_path):
    api = config.apiserver_args(Path("/bin/x"), pki.Pki.at(tmp_path), PORTS, tmp_path)
    for flag in ("--authorization-mode=RBAC", "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                 "--max-requests-inflight=0", "--max-mutating-requests-inflight=0",
                 "--enable-priority-and-fairness=false", f"--client-ca-file={tmp_path / 'ca.crt'}"):
        assert flag in api
    assert "--unsafe-no-fsync" in config.etcd_args(Path("/bin/etcd"), tmp_path, PORTS)


def test_kwok_runs_without_leases_and_manages_all_nodes(tmp_path):
    kwok = config.kwok_args(Path("/bin/kwok"), tmp_path / "k", tmp_path / "st.yaml", PORTS)
    assert "--node-lease-duration-seconds=0" in kwok
    assert "--manage-all-nodes=true" in kwok
    assert "--cidr=10.244.0.1/16" in kwok


def test_kwok_stages_have_no_heartbeat_and_read_sim_runtime():
    docs = list(yaml.safe_load_all(config.kwok_stages_text()))
    assert all(d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and d["kind"] == "Stage" for d in docs)
    node_stages = [d for d in docs if d["spec"]["resourceRef"]["kind"] == "Node"]
    # At least one node stage, or kwok falls back to its defaults (with the heartbeat).
    assert [d["metadata"]["name"] for d in node_stages] == ["node-initialize"]
    complete = next(d for d in docs if d["metadata"]["name"] == "pod-sim-runtime-complete")
    assert complete["spec"]["delay"]["durationFrom"]["jq"]["expression"] == (
        f'.metadata.annotations["{config.SIM_RUNTIME_ANNOTATION}"]')
    assert "jitterDurationMilliseconds" not in complete["spec"]["delay"]
    keys = [e["jq"]["key"] for e in complete["spec"]["selector"]["matchExpressions"]]
    assert f'.metadata.annotations["{config.SIM_RUNTIME_ANNOTATION}"]' in keys


def test_kubeconfig_inlines_the_admin_cert(tmp_path):
    files = pki.generate(tmp_path)
    kc = config.kubeconfig(files, "https://127.0.0.1:6443")
    assert kc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    user = kc["users"][0]["user"]
    assert user["client-certificate-data"] and user["client-key-data"]
    assert kc["current-context"] == kc["contexts"][0]["name"]


def test_extender_command_is_railyard_serve():
    argv = config.extender_args(Path("/w/kubeconfig"), Path("/w/sched.yaml"), PORTS, python="/py")
    assert argv == ["/py", "-m", "extender", "serve", "--kubeconfig", "/w/kubeconfig", "--listen", "127.0.0.1:8888",
                    "--grpc-listen", "127.0.0.1:8889", "--scheduler-config", "/w/sched.yaml"]
    with_view = config.extender_args(Path("/w/k"), Path("/w/s.yaml"), dataclasses.replace(PORTS, extender_view=8890))
    assert with_view[-2:] == ["--view-listen", "127.0.0.1:8890"]


def test_a_given_scheduler_config_is_bound_to_this_cluster():
    template = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": "/elsewhere", "qps": 77},
        "profiles": [{"schedulerName": "railyard"}],
        "extenders": [
            {"urlPrefix": "$(EXTENDER_URL)/scheduler", "filterVerb": "filter"},
            {"urlPrefix": "http://other:1/x", "filterVerb": "f"},
        ],
    }
    on = config.render_scheduler_config(template, Path("/w/kubeconfig"), config.extender_base(PORTS))
    assert on["clientConnection"] == {"kubeconfig": "/w/kubeconfig", "qps": 77}
    assert [e["urlPrefix"] for e in on["extenders"]] == ["http://127.0.0.1:8888/scheduler", "http://other:1/x"]
    off = config.render_scheduler_config(template, Path("/w/kubeconfig"), None)
    assert [e["urlPrefix"] for e in off["extenders"]] == ["http://other:1/x"]
    assert template["extenders"][0]["urlPrefix"] == "$(EXTENDER_URL)/scheduler"  # not mutated


def test_without_a_given_config_the_generated_one_is_used():
    generated = config.render_scheduler_config(None, Path("/w/k"), config.extender_base(PORTS))
    assert generated == config.scheduler_config(Path("/w/k"), config.extender_url(PORTS))
    assert "extenders" not in config.render_scheduler_config(None, Path("/w/k"), None)


def test_feature_flags_go_to_both_components_runtime_config_to_the_api_server_only():
    api, sched = config.feature_flags(
        {"TopologyAwareWorkloadScheduling": True, "GenericWorkload": True}, ("scheduling.k8s.io/v1beta1=true",))
    gates = "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
    assert api == [gates, "--runtime-config=scheduling.k8s.io/v1beta1=true"]
    assert sched == [gates]
    assert config.feature_flags() == ([], [])


# -- --replicas and --extender-set ------------------------------------------------------------------

def test_a_second_replica_has_its_own_names_and_ports_and_points_at_its_own_railyard():
    second = config.Replica(2, dataclasses.replace(PORTS, scheduler=20259, extender=9888, extender_grpc=9889,
                                                   extender_view=9890))
    first = config.Replica(1, PORTS)
    assert (first.scheduler_name, first.extender_name, first.config_name) == (
        "kube-scheduler", "extender", "scheduler-config.yaml")  # the default cluster's names, unchanged
    assert (second.scheduler_name, second.extender_name, second.config_name) == (
        "kube-scheduler-2", "extender-2", "scheduler-config-2.yaml")
    assert second.as_dict() == {"index": 2, "scheduler": "kube-scheduler-2", "extender": "extender-2",
                                "schedulerUrl": "https://127.0.0.1:20259",
                                "extenderUrl": "http://127.0.0.1:9888/scheduler", "grpc": "127.0.0.1:9889",
                                "view": "http://127.0.0.1:9890/"}
    cfg = config.scheduler_config(Path("/w/k"), config.extender_url(second.ports))
    assert [e["urlPrefix"] for e in cfg["extenders"]] == ["http://127.0.0.1:9888/scheduler"]


def test_replicas_elect_a_leader_on_a_lease_in_kube_system_with_short_durations(tmp_path):
    cfg = config.leader_election(config.scheduler_config(Path("/w/k"), None))
    assert cfg["leaderElection"] == {"leaderElect": True, "resourceLock": "leases",
                                     "resourceName": "railyard-scheduler", "resourceNamespace": "kube-system",
                                     "leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}
    # The flag wins over the config in kube-scheduler, so it must say the same.
    assert "--leader-elect=true" in config.scheduler_args(Path("/b"), tmp_path / "s", tmp_path / "k", PORTS,
                                                          leader_elect=True)
    assert "--leader-elect=false" in config.scheduler_args(Path("/b"), tmp_path / "s", tmp_path / "k", PORTS)


def test_extender_settings_become_a_nested_settings_file_passed_with_config():
    assert config.extender_settings({"gangs.binding_pause_seconds": 2, "gangs.recovery_grace_seconds": 3,
                                     "server.prefix": "/x"}) == {
        "gangs": {"binding_pause_seconds": 2, "recovery_grace_seconds": 3}, "server": {"prefix": "/x"}}
    argv = config.extender_args(Path("/w/k"), Path("/w/s.yaml"), PORTS, python="/py", settings_file=Path("/w/r.yaml"))
    assert argv[-2:] == ["--config", "/w/r.yaml"]
    try:
        config.extender_settings({"gangs": 1, "gangs.x": 2})
    except ValueError as exc:
        assert "gangs" in str(exc)
    else:
        raise AssertionError("a setting that is both a value and a mapping must be refused")
    try:
        config.extender_settings({"gangs.x": 2, "gangs": 1})
    except ValueError as exc:
        assert "gangs" in str(exc)
    else:
        raise AssertionError("a setting that is both a value and a mapping must be refused, in either order")


# -- kube-controller-manager -----------------------------------------------------------------------

def test_controller_manager_runs_an_explicit_list_without_the_controllers_that_fight_kwok(tmp_path):
    ports = config.Ports(**{**PORTS.__dict__, "controller_manager": 10257})
    argv = config.controller_manager_args(Path("/bin/kcm"), tmp_path / "k", ports)
    (listed,) = [a.removeprefix("--controllers=") for a in argv if a.startswith("--controllers=")]
    controllers = listed.split(",")
    assert "*" not in controllers and not any(c.startswith("-") for c in controllers)  # nothing by default
    for needed in ("job-controller", "garbage-collector-controller", "pod-garbage-collector-controller",
                   "statefulset-controller"):
        assert needed in controllers
    # kwok nodes send no heartbeats: these would mark every node NotReady and evict its pods.
    assert "node-lifecycle-controller" not in controllers and "taint-eviction-controller" not in controllers
    for flag in ("--leader-elect=false", f"--kubeconfig={tmp_path / 'k'}", "--bind-address=127.0.0.1",
                 "--secure-port=10257", "--kube-api-qps=1000", "--kube-api-burst=2000",
                 "--use-service-account-credentials=false"):
        assert flag in argv
    assert argv[0] == "/bin/kcm"


def test_the_controller_manager_gets_the_same_feature_gates_as_the_scheduler():
    api, others = config.feature_flags({"GenericWorkload": True, "WorkloadWithJob": True},
                                       ("scheduling.k8s.io/v1beta1=true",))
    assert others == ["--feature-gates=GenericWorkload=true,WorkloadWithJob=true"]
    assert api == others + ["--runtime-config=scheduling.k8s.io/v1beta1=true"]


def test_the_controller_manager_port_is_recorded_only_when_it_runs():
    assert "controller_manager" not in PORTS.as_dict()
    assert config.Ports(**{**PORTS.__dict__, "controller_manager": 10257}).as_dict()["controller_manager"] == 10257


def _stage(name: str) -> dict:
    return next(d for d in yaml.safe_load_all(config.kwok_stages_text()) if d["metadata"]["name"] == name)


def _selector(stage: dict) -> dict[str, tuple[str, list[str] | None]]:
    return {e["jq"]["key"]: (e["jq"]["operator"], e["jq"].get("values"))
            for e in stage["spec"]["selector"]["matchExpressions"]}


def test_a_deleted_running_pod_fails_as_a_kubelet_would_stop_it():
    terminate = _stage("pod-terminate")
    assert _selector(terminate) == {".metadata.deletionTimestamp": ("Exists", None),
                                    ".status.phase": ("NotIn", ["Succeeded", "Failed"])}
    (patch,) = terminate["spec"]["next"]["patches"]
    assert patch["subresource"] == "status" and patch["root"] == "status"
    lines = [line.strip() for line in patch["template"].splitlines()]
    assert "phase: Failed" in lines and "exitCode: 137" in lines and "reason: Error" in lines
    assert "ready: false" in lines and 'status: "True"' not in lines  # Ready and ContainersReady False


def test_a_deleted_pod_is_removed_only_once_finished_and_without_finalizers():
    delete = _stage("pod-delete")
    assert _selector(delete) == {".metadata.deletionTimestamp": ("Exists", None),
                                 ".status.phase": ("In", ["Succeeded", "Failed"]),
                                 ".metadata.finalizers": ("DoesNotExist", None)}
    assert delete["spec"]["next"] == {"delete": True}  # no "finalizers: empty": a controller's finalizer stays
    # The two stages never match the same pod (kwok would pick one at random).
    terminate = _selector(_stage("pod-terminate"))[".status.phase"]
    assert set(terminate[1]) == set(_selector(delete)[".status.phase"][1]) and terminate[0] == "NotIn"
