"""JobSet, LeaderWorkerSet and Kubeflow Trainer configuration for the local cluster, without
the binaries or the modules (tests/e2e/test_workload_controllers.py runs the real ones).

Field names are those of each project's Configuration type at its pinned tag: JobSet v0.12.0
and LeaderWorkerSet v0.9.0 ``api/config/v1alpha1/configuration_types.go``, Trainer v2.3.0
``pkg/apis/config/v1alpha1/configuration_types.go``; all three decode strictly, so a field
that is not there fails the manager at start.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from extender.localcluster import binaries, cli, cluster, workloads
from extender.localcluster.errors import ClusterError

from .fakes import fake_cache, status_output

PORTS = workloads.Ports(webhook=9443, health=8081, metrics=8443)


def test_trainer_brings_jobset_and_the_order_is_fixed():
    assert workloads.resolve(["trainer"]) == ("jobset", "trainer")
    assert workloads.resolve(["lws", "trainer", "jobset", "lws"]) == ("jobset", "lws", "trainer")
    assert workloads.resolve([]) == ()
    with pytest.raises(ClusterError, match="unknown workload controller 'mpi'; known: jobset, lws, trainer"):
        workloads.resolve(["mpi"])


@pytest.mark.parametrize("name, api_version", [
    ("jobset", "config.jobset.x-k8s.io/v1alpha1"),
    ("lws", "config.lws.x-k8s.io/v1alpha1"),
    ("trainer", "config.trainer.kubeflow.org/v1alpha1"),
])
def test_every_manager_is_loopback_only_single_and_without_its_own_certificates(tmp_path, name, api_version):
    cfg = workloads.CONTROLLERS[name].configure(PORTS, tmp_path / "certs")
    assert cfg["apiVersion"] == api_version and cfg["kind"] == "Configuration"
    assert cfg["webhook"]["host"] == "127.0.0.1" and cfg["webhook"]["port"] == 9443
    assert cfg["health"] == {"healthProbeBindAddress": "127.0.0.1:8081"}
    assert cfg["metrics"]["bindAddress"] == "127.0.0.1:8443"
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["clientConnection"] == {"qps": 1000, "burst": 2000}
    management = "certManagement" if name == "trainer" else "internalCertManagement"
    assert cfg[management] == {"enable": False}


def test_jobset_reads_its_metrics_cert_from_the_cluster_s_cert_dir_not_tmp(tmp_path):
    cfg = workloads.jobset_config(PORTS, tmp_path / "certs")
    assert cfg["webhook"]["certDir"] == cfg["metrics"]["certDir"] == str(tmp_path / "certs")


def test_trainer_has_no_cert_dir_field_so_its_tmpdir_is_the_cluster_s(tmp_path):
    assert "certDir" not in workloads.trainer_config(PORTS, tmp_path)["webhook"]
    bins = tmp_path / "bin"
    manager = workloads.manager(workloads.CONTROLLERS["trainer"], tmp_path / "w", bins / "trainer",
                                sources=None, ports=PORTS, kubeconfig_file=tmp_path / "kc", env={"PATH": "/bin"})
    tmpdir = tmp_path / "w" / "trainer" / "tmp"
    assert manager.env == {"PATH": "/bin", "TMPDIR": str(tmpdir)}
    # controller-runtime's default: filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
    assert manager.cert_dir == tmpdir / "k8s-webhook-server" / "serving-certs"
    assert tmpdir.is_dir()


def test_a_manager_runs_with_its_config_and_the_admin_kubeconfig(tmp_path):
    manager = workloads.manager(workloads.CONTROLLERS["lws"], tmp_path / "w", Path("/bin/lws"), sources=None,
                                ports=PORTS, kubeconfig_file=tmp_path / "kc", env={})
    assert manager.argv == ["/bin/lws", f"--config={tmp_path / 'w' / 'lws-config.yaml'}", f"--kubeconfig={tmp_path / 'kc'}"]
    assert manager.cert_dir == tmp_path / "w" / "lws" / "certs"
    assert manager.env["TMPDIR"] == str(tmp_path / "w" / "lws" / "tmp")
    assert manager.config["webhook"]["certDir"] == str(manager.cert_dir)
    assert manager.title == "LeaderWorkerSet v0.9.0" and manager.webhook_base == "https://127.0.0.1:9443"


class _DryRun:
    """Answers ``dry_run`` as the API server did (the probes only read the answer)."""

    def __init__(self, status: int, answer: dict) -> None:
        self.status, self.answer, self.paths = status, answer, []

    def dry_run(self, path: str, obj: dict) -> tuple[int, dict]:
        self.paths.append((path, obj["kind"]))
        return self.status, self.answer


def test_the_jobset_probe_wants_the_defaulter_s_restart_policy():
    undefaulted = {"spec": {"replicatedJobs": [{"template": {"spec": {"template": {"spec": {}}}}}]}}
    assert not workloads.jobset_defaulted(_DryRun(201, undefaulted))
    defaulted = json.loads(json.dumps(undefaulted).replace('"spec": {}', '"spec": {"restartPolicy": "OnFailure"}'))
    api = _DryRun(201, defaulted)
    assert workloads.jobset_defaulted(api)
    assert api.paths == [("/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets", "JobSet")]
    assert not workloads.jobset_defaulted(_DryRun(0, {}))


def test_the_lws_probe_wants_the_defaulter_s_subdomain_policy():
    assert workloads.lws_defaulted(_DryRun(201, {"spec": {"networkConfig": {"subdomainPolicy": "Shared"}}}))
    assert not workloads.lws_defaulted(_DryRun(201, {"spec": {}}))


def test_the_trainer_probe_wants_its_validator_s_denial_not_any_error():
    denied = {"message": 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
                         'spec.RuntimeRef: Invalid value: ...'}
    assert workloads.trainer_validates(_DryRun(422, denied))
    assert not workloads.trainer_validates(_DryRun(201, {}))  # stored without the webhook
    assert not workloads.trainer_validates(_DryRun(500, {"message": 'failed calling webhook "validator.trainjob'}))


# -- binaries and the command line ----------------------------------------------------------

@pytest.mark.parametrize("component, version, package, binary", [
    (binaries.JOBSET, "v0.12.0", "sigs.k8s.io/jobset", "jobset"),
    (binaries.LWS, "v0.9.0", "sigs.k8s.io/lws/cmd", "lws"),
    (binaries.TRAINER, "v2.3.0", "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager", "trainer"),
])
def test_pinned_in_their_helper_modules_and_optional(component, version, package, binary):
    assert component.version() == version
    assert component in binaries.OPTIONAL_COMPONENTS and component not in binaries.COMPONENTS
    argv = binaries.build_command("go", component, version, Path("/out"))
    assert argv[-1] == package and argv[argv.index("-o") + 1] == f"/out/{binary}"


def test_version_ldflags_follow_each_project_s_makefile():
    assert binaries.JOBSET.ldflags("v0.12.0") == ["-X sigs.k8s.io/jobset/pkg/version.GitVersion=v0.12.0"]
    assert binaries.LWS.ldflags("v0.9.0") == ["-X sigs.k8s.io/lws/pkg/version.GitVersion=v0.9.0"]
    assert binaries.TRAINER.ldflags("v2.3.0") == []
    assert binaries.LWS.answers_version and not binaries.JOBSET.answers_version


def test_cached_controllers_are_reused_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    fake_cache(tmp_path, binaries.COMPONENTS + binaries.OPTIONAL_COMPONENTS)
    assert binaries.ensure(root=tmp_path).workload_controllers == {}
    found = binaries.ensure(root=tmp_path, workload_controllers=("jobset", "trainer"))
    assert found.workload_controllers == {"jobset": binaries.cached_dir(binaries.JOBSET, tmp_path) / "jobset",
                                 "trainer": binaries.cached_dir(binaries.TRAINER, tmp_path) / "trainer"}
    with pytest.raises(binaries.BuildError, match="unknown workload controller 'mpi'"):
        binaries.ensure(root=tmp_path, workload_controllers=("mpi",))


def test_not_built_is_described_with_its_flag(tmp_path):
    lines = {line.split()[0]: line for line in binaries.describe(tmp_path)}
    assert "not built yet (optional: --with-lws)" in lines["lws"]
    assert "not built yet (optional: --with-trainer)" in lines["trainer"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    return parser


def test_cli_flags_reach_the_options():
    args = _parser().parse_args(["cluster", "up", "--with-trainer", "--with-lws"])
    assert args.workload_controllers == ["trainer", "lws"]
    assert _parser().parse_args(["cluster", "up"]).workload_controllers == []
    assert _parser().parse_args(["cluster", "build", "--with-jobset"]).workload_controllers == ["jobset"]


def _up(tmp_path: Path, **options) -> cluster.UpOptions:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: NodeList\nitems: [{metadata: {name: g1}, status: {capacity: {nvidia.com/gpu: '8'}}}]\n")
    return cluster.UpOptions(workdir=tmp_path / "w", nodes_file=nodes, extender=False, **options)


def test_given_binaries_without_a_controller_are_refused_before_anything_starts(tmp_path):
    missing = tmp_path / "never-started"
    bins = binaries.Binaries(etcd=missing, kube_apiserver=missing, kube_scheduler=missing, kwok=missing,
                             kube_controller_manager=missing, workload_controllers={"jobset": missing})
    with pytest.raises(ClusterError, match="--with-trainer needs the Kubeflow Trainer binary"):
        cluster.up(_up(tmp_path, workload_controllers=("trainer",), binaries=bins))
    assert not (tmp_path / "w").exists()


def test_workload_controllers_without_kube_controller_manager_are_refused(tmp_path):
    with pytest.raises(ClusterError, match="--with-lws needs kube-controller-manager .*drop --no-controllers"):
        cluster.up(_up(tmp_path, workload_controllers=("lws",), controllers=False))
    assert not (tmp_path / "w").exists()


def test_status_shows_each_controller_from_the_state_file(tmp_path):
    out = status_output(tmp_path / "w", "jobset", {"workloadControllers": {"jobset": {
        "version": "v0.12.0", "webhooks": "https://127.0.0.1:9443", "health": "http://127.0.0.1:8081",
        "metrics": "https://127.0.0.1:8443/metrics"}}})
    assert "jobset          running" in out
    assert ("jobset          v0.12.0  webhooks https://127.0.0.1:9443, health http://127.0.0.1:8081, "
            "metrics https://127.0.0.1:8443/metrics") in out
