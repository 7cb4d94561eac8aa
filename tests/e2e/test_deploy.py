"""What a platform team installs, checked against the real control plane.

- Every kustomization in ``manifests/`` passes the real API server's server-side dry run.
- kube-scheduler runs the reference configuration from ``manifests/`` (``cluster up`` loads
  it) and schedules through the extender with it.
- The extender runs under its own ServiceAccount with only the RBAC from ``manifests/``: it
  lists, watches, binds and sends Events as that identity, and cannot read Secrets.
- gRPC health answers SERVING and ``ExplainPod`` / ``railyard explain`` explain a waiting gang;
  ``/metrics`` shows its reservation.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import kubernetes
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes.dynamic import DynamicClient

from extender.api.v1 import extender_pb2 as pb
from extender.api.v1 import extender_pb2_grpc as pb_grpc
from extender.localcluster import pki, processes
from tests.manifests.render import MANIFESTS, kustomize_command, render, servicemonitor_kustomization

from .helpers import (api_client, create_pods, create_servicemonitor_crd, delete_pods, gang_pods, namespace,
                      run_railyard, wait_for, wait_for_phase)

pytestmark = pytest.mark.e2e

TOPOLOGY = "blocks=1 racks=2 nvl=2 nodes=2 gpus=8 scheme=topograph"
EXTENDER_USER = "system:serviceaccount:railyard-system:railyard"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    if kustomize_command() is None:
        pytest.fail("no kustomize: needs kubectl, kustomize or Go on PATH", pytrace=False)
    return local_cluster(topology=TOPOLOGY, extender=True)


@pytest.fixture(scope="module")
def state(cluster) -> dict[str, Any]:
    return json.loads((cluster.workdir / "cluster.json").read_text())


def dry_run_apply(dynamic: DynamicClient, objects: list[dict[str, Any]]) -> None:
    """Server-side apply with dryRun=All, as ``kubectl apply --server-side --force-conflicts
    --dry-run=server``: the local cluster made the admission policy itself, for its own profiles."""
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            dynamic.server_side_apply(resource, body=obj, name=obj["metadata"]["name"],
                                      namespace=obj["metadata"].get("namespace"),
                                      field_manager="railyard-e2e", dry_run="All", force_conflicts=True)
        except kubernetes.client.ApiException as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} refused by the API server: {exc.body}",
                        pytrace=False)


def test_every_kustomization_passes_server_side_dry_run(cluster, tmp_path):
    client = api_client(cluster.kubeconfig)
    dynamic = create_servicemonitor_crd(client)
    with_monitor = tmp_path / "with-servicemonitor"
    with_monitor.mkdir()
    (with_monitor / "kustomization.yaml").write_text(servicemonitor_kustomization(with_monitor))
    for directory in (MANIFESTS / "base", MANIFESTS / "overlays" / "https",
                      MANIFESTS / "overlays" / "main-scheduler", with_monitor):
        objects = render(directory)
        assert objects, directory
        dry_run_apply(dynamic, objects)
    # A dry run must not have created anything.
    assert not kubernetes.client.AppsV1Api(client).list_namespaced_deployment("railyard-system").items


def test_kube_scheduler_runs_the_reference_configuration(cluster):
    running = yaml.safe_load((cluster.workdir / "scheduler-config.yaml").read_text())
    reference = yaml.safe_load((MANIFESTS / "base" / "scheduler-config.yaml").read_text())
    (ext,) = running["extenders"]
    (shipped,) = reference["extenders"]
    assert {k: v for k, v in ext.items() if k != "urlPrefix"} == {k: v for k, v in shipped.items() if k != "urlPrefix"}
    assert "railyard" in [p["schedulerName"] for p in running["profiles"]]
    assert running["percentageOfNodesToScore"] == reference["percentageOfNodesToScore"]


def test_the_extender_runs_as_its_service_account_and_binds_a_gang(cluster, state):
    # The extender's kubeconfig holds the ServiceAccount's token, and the API server agrees who it is.
    argv = Path(f"/proc/{state_pid(cluster)}/cmdline").read_bytes().split(b"\0")
    kubeconfig = Path(argv[argv.index(b"--kubeconfig") + 1].decode())
    ext_client = api_client(kubeconfig)
    review = kubernetes.client.AuthenticationV1Api(ext_client).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review.status.user_info.username == EXTENDER_USER
    # Least privilege: what it uses is allowed, Secrets and cluster-admin-ish things are not.
    authz = kubernetes.client.AuthorizationV1Api(api_client(cluster.kubeconfig))

    def allowed(verb: str, resource: str, group: str = "", subresource: str = "") -> bool:
        return authz.create_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": EXTENDER_USER, "groups": ["system:serviceaccounts", "system:authenticated"],
                     "resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                            "subresource": subresource, "namespace": "ml"}}}).status.allowed

    assert allowed("watch", "pods") and allowed("list", "nodes") and allowed("create", "pods", subresource="binding")
    assert allowed("list", "podgroups", group="scheduling.x-k8s.io") and allowed("create", "events")
    assert not allowed("get", "secrets") and not allowed("update", "nodes") and not allowed("create", "pods")
    # And it does its job under that identity: a gang of 2 is bound whole, with Events sent.
    ns = namespace(cluster.core)
    try:
        names = create_pods(cluster.core, ns, gang_pods("g", 2, 8))
        wait_for_phase(cluster.core, ns, names, "Running", timeout=120)
        nodes = {cluster.core.read_namespaced_pod(n, ns).spec.node_name for n in names}
        assert len(nodes) == 2
    finally:
        delete_pods(cluster.core, ns)
    log = (cluster.workdir / "logs" / "extender.log").read_text()
    assert not re.search(r"\b403\b", log) and "forbidden" not in log.lower(), log[-2000:]


def state_pid(cluster) -> int:
    text = (cluster.workdir / "pids" / "extender.pid").read_text().split()
    return int(text[0])


def test_grpc_health_and_explain_a_waiting_gang(cluster, state):
    target = f"127.0.0.1:{state['ports']['extender_grpc']}"
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
            health_pb2.HealthCheckResponse.SERVING
        ns = namespace(cluster.core)
        try:
            # One member of a gang of two: it is planned and held at bind, waiting for the other.
            pods = gang_pods("w", 2, 8, timeout_seconds=120)
            create_pods(cluster.core, ns, pods[:1])
            stub = pb_grpc.ExtenderStub(channel)

            def waiting() -> pb.ExplainPodResponse | None:
                try:
                    got = stub.ExplainPod(pb.ExplainPodRequest(namespace=ns, name="w-0"), timeout=10)
                except grpc.RpcError:
                    return None
                return got if got.phase == "waiting" else None

            got = wait_for(waiting, 60, "ExplainPod to show w-0 waiting at bind")
            assert (got.gang, got.at_bind, got.quorum, got.pods) == (f"{ns}/w", 1, 2, 2)
            assert got.reason.startswith(f"gang {ns}/w: 2 pods, 16 GPUs on 2 nodes")
            assert got.fit and got.fit[0].fits == 2 and got.deadline_in_seconds > 0
            out = run_railyard("explain", f"{ns}/w-0", "--grpc", target).stdout
            assert out.startswith(f"pod {ns}/w-0: gang {ns}/w is waiting (1/2 GPU members at bind)")
            metrics_url = state["extender"].rsplit("/scheduler", 1)[0] + "/metrics"
            with urllib.request.urlopen(metrics_url, timeout=5) as reply:
                text = reply.read().decode()
            reserved = re.search(r"^railyard_reserved_gpus (\S+)$", text, re.M)
            assert reserved and float(reserved.group(1)) >= 16, text
        finally:
            delete_pods(cluster.core, ns)


def test_the_https_variant_is_accepted_and_used_by_kube_scheduler(local_cluster, tmp_path):
    """manifests/overlays/https's scheduler configuration (enableHTTPS, tlsConfig) on the real
    kube-scheduler, calling a railyard that serves HTTPS: a gang is bound through it."""
    certs = pki.generate(tmp_path / "pki")  # serving cert for localhost / 127.0.0.1
    # Hold the extender's port while the cluster starts, so none of its components takes it.
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    cfg = yaml.safe_load((MANIFESTS / "overlays" / "https" / "scheduler-config.yaml").read_text())
    (ext,) = cfg["extenders"]
    assert ext["enableHTTPS"] is True and ext["urlPrefix"].startswith("https://")
    # Only what ties it to this machine changes: the port, the CA file, the name in the cert.
    ext["urlPrefix"] = f"https://127.0.0.1:{port}/scheduler"
    ext["tlsConfig"] = {**ext["tlsConfig"], "caFile": str(certs.ca_cert), "serverName": "localhost"}
    cfg["leaderElection"] = {"leaderElect": False}
    config_file = tmp_path / "scheduler-config.yaml"
    config_file.write_text(yaml.safe_dump(cfg))
    cluster = local_cluster(topology=TOPOLOGY, extender=False, scheduler_config=config_file)
    settings = yaml.safe_load((MANIFESTS / "overlays" / "https" / "railyard.yaml").read_text())
    settings["server"].update(listen=f"127.0.0.1:{port}", tls_cert_file=str(certs.apiserver_cert),
                              tls_key_file=str(certs.apiserver_key))
    settings["server"].pop("metrics_listen")
    settings["grpc"] = {"listen": ""}
    settings_file = tmp_path / "railyard.yaml"
    settings_file.write_text(yaml.safe_dump(settings))
    log = open(tmp_path / "railyard-https.log", "w")
    holder.close()
    server = subprocess.Popen([sys.executable, "-m", "extender", "serve", "--config", str(settings_file),
                               "--kubeconfig", str(cluster.kubeconfig), "--scheduler-config", str(config_file)],
                              stdout=log, stderr=subprocess.STDOUT, env=processes.clean_env())
    try:
        context = ssl.create_default_context(cafile=str(certs.ca_cert))

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"https://localhost:{port}/readyz", timeout=2, context=context) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, 60, "railyard to serve HTTPS")
        ns = namespace(cluster.core)
        pods = gang_pods("t", 2, 8)
        for p in pods:
            p["spec"]["schedulerName"] = "railyard"  # the shipped config's profile for gangs
        names = create_pods(cluster.core, ns, pods)
        wait_for_phase(cluster.core, ns, names, "Running", timeout=120)
        delete_pods(cluster.core, ns)
    finally:
        server.terminate()
        server.wait(10)
        log.close()
