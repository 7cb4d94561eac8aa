"""Kueue's objects and configuration for the local cluster, without the binary or the module.

The module tree here is a miniature of Kueue v0.17.0's ``config/`` layout (same file names,
kustomization fields and patch shapes), so ``load_sources`` is checked without GOMODCACHE; the
e2e test (tests/e2e/test_kueue.py) runs the real one.
"""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

import pytest
import yaml

from extender.localcluster import binaries, cli, cluster, config, kueue, kustomize, pki
from extender.localcluster.errors import ClusterError

from .fakes import fake_cache, status_output, write

PORTS = config.Ports(etcd_client=1, etcd_peer=2, apiserver=3, scheduler=4, kwok=5, extender=6, extender_grpc=7,
                     kueue_webhook=9443, kueue_health=8081, kueue_metrics=8443)


@pytest.fixture
def module(tmp_path) -> Path:
    root = tmp_path / "kueue@v0.17.0"
    components = root / "config" / "components"
    write(components / "crd" / "kustomization.yaml", """\
        resources:
        - bases/kueue.x-k8s.io_workloads.yaml
        - bases/kueue.x-k8s.io_resourceflavors.yaml
        patches:
        - path: patches/webhook_in_workloads.yaml
        #- path: patches/webhook_in_resourceflavors.yaml
        """)
    for plural, kind in (("workloads", "Workload"), ("resourceflavors", "ResourceFlavor")):
        write(components / "crd" / "bases" / f"kueue.x-k8s.io_{plural}.yaml", f"""\
            ---
            apiVersion: apiextensions.k8s.io/v1
            kind: CustomResourceDefinition
            metadata:
              name: {plural}.kueue.x-k8s.io
            spec:
              group: kueue.x-k8s.io
              names: {{kind: {kind}, plural: {plural}}}
              scope: Namespaced
            """)
    write(components / "crd" / "patches" / "webhook_in_workloads.yaml", """\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          name: workloads.kueue.x-k8s.io
        spec:
          conversion:
            strategy: Webhook
            webhook:
              clientConfig:
                service: {namespace: system, name: webhook-service, path: /convert}
              conversionReviewVersions: [v1]
        """)
    write(components / "webhook" / "manifests.yaml", """\
        ---
        apiVersion: admissionregistration.k8s.io/v1
        kind: MutatingWebhookConfiguration
        metadata:
          name: mutating-webhook-configuration
        webhooks:
        - name: mjob.kb.io
          clientConfig:
            service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}
          failurePolicy: Fail
        - name: mpod.kb.io
          clientConfig:
            service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
          failurePolicy: Fail
        ---
        apiVersion: admissionregistration.k8s.io/v1
        kind: ValidatingWebhookConfiguration
        metadata:
          name: validating-webhook-configuration
        webhooks:
        - name: vpod.kb.io
          clientConfig:
            service: {name: webhook-service, namespace: system, path: /validate--v1-pod}
        """)
    write(components / "webhook" / "kustomization.yaml", """\
        resources:
        - manifests.yaml
        patches:
        - patch: |-
            apiVersion: admissionregistration.k8s.io/v1
            kind: MutatingWebhookConfiguration
            metadata:
              name: mutating-webhook-configuration
            webhooks:
            - name: mpod.kb.io
              namespaceSelector:
                matchExpressions:
                - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}
        """)
    write(root / "config" / "default" / "kustomization.yaml", "namespace: kueue-system\nnamePrefix: kueue-\n")
    return root


def test_sources_are_rendered_as_kueue_s_kustomize_config_would(module):
    sources = kueue.load_sources(module)
    crds = {c["metadata"]["name"]: c for c in sources.crds}
    assert list(crds) == ["workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io"]
    assert crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"]["strategy"] == "Webhook"
    assert "conversion" not in crds["resourceflavors.kueue.x-k8s.io"]["spec"]  # its patch is commented out
    configs = {c["metadata"]["name"]: c for c in sources.webhook_configurations}
    assert set(configs) == {"kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"}
    webhooks = {w["name"]: w for w in configs["kueue-mutating-webhook-configuration"]["webhooks"]}
    assert webhooks["mpod.kb.io"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert webhooks["mpod.kb.io"]["failurePolicy"] == "Fail"  # merged, not replaced
    assert "namespaceSelector" not in webhooks["mjob.kb.io"]


def test_every_webhook_is_pointed_at_loopback_with_the_cluster_ca(module):
    sources = kueue.load_sources(module)
    ca = b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    base = kueue.webhook_base(PORTS)
    assert base == "https://127.0.0.1:9443"
    bound = kustomize.bind_webhooks(sources.webhook_configurations, base, ca)
    client_configs = [w["clientConfig"] for c in bound for w in c["webhooks"]]
    assert [c["url"] for c in client_configs] == [
        "https://127.0.0.1:9443/mutate-batch-v1-job", "https://127.0.0.1:9443/mutate--v1-pod",
        "https://127.0.0.1:9443/validate--v1-pod"]
    assert all(base64.b64decode(c["caBundle"]) == ca and "service" not in c for c in client_configs)
    (workloads, _) = kustomize.bind_crds(sources.crds, base, ca)
    assert workloads["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:9443/convert"
    # The sources are left as read: one load serves any number of clusters.
    assert "service" in sources.webhook_configurations[0]["webhooks"][0]["clientConfig"]


def test_a_missing_file_names_it(module):
    (module / "config" / "components" / "webhook" / "manifests.yaml").unlink()
    with pytest.raises(ClusterError, match="cannot read Kueue's .*webhook/manifests.yaml"):
        kueue.load_sources(module)


def test_a_patch_for_an_object_that_is_not_there_is_an_error(module):
    patch = module / "config" / "components" / "crd" / "patches" / "webhook_in_workloads.yaml"
    patch.write_text(patch.read_text().replace("workloads.kueue", "cohorts.kueue"))
    with pytest.raises(ClusterError, match="targets CustomResourceDefinition cohorts.kueue.x-k8s.io"):
        kueue.load_sources(module)


def test_manager_config_is_loopback_only_single_and_without_internal_certs(tmp_path):
    cfg = kueue.manager_config(PORTS, tmp_path / "certs")
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and cfg["kind"] == "Configuration"
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path / "certs")}
    assert cfg["health"] == {"healthProbeBindAddress": "127.0.0.1:8081"}
    assert cfg["metrics"] == {"bindAddress": "127.0.0.1:8443"}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["integrations"] == {"frameworks": ["pod", "batch/job"]}
    assert cfg["namespace"] == "kueue-system"
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}


def test_tas_is_kueue_s_default_and_can_be_turned_off(tmp_path):
    assert kueue.tas_enabled(kueue.effective_gates({}))
    gates = kueue.manager_config(PORTS, tmp_path, {"TopologyAwareScheduling": False})["featureGates"]
    assert gates == {"TopologyAwareScheduling": False, "VisibilityOnDemand": False}
    assert not kueue.tas_enabled(gates)


def test_the_visibility_server_cannot_be_turned_on():
    assert kueue.gate_problems({"VisibilityOnDemand": False, "TopologyAwareScheduling": True}) == []
    (problem,) = kueue.gate_problems({"VisibilityOnDemand": True})
    assert "VisibilityOnDemand=true" in problem and "/visibility" in problem


def test_manager_args_give_gates_only_in_the_config(tmp_path):
    argv = kueue.manager_args(Path("/bin/kueue"), tmp_path / "c.yaml", tmp_path / "kubeconfig")
    assert argv == ["/bin/kueue", f"--config={tmp_path / 'c.yaml'}", f"--kubeconfig={tmp_path / 'kubeconfig'}"]


def test_the_probe_pod_is_what_the_pod_webhook_gates():
    pod = kueue.probe_pod()
    assert pod["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "railyard-probe"}
    assert not kueue.is_gated(pod)
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    assert kueue.is_gated(pod)


def test_metrics_cert_is_written_once_and_kept_while_valid(tmp_path):
    directory = tmp_path / "etc" / "kueue" / "metrics" / "certs"
    assert kueue.ensure_metrics_cert(directory) == directory
    cert = (directory / "tls.crt").read_bytes()
    assert pki.valid_pair(cert, (directory / "tls.key").read_bytes(), datetime.timedelta(days=365))
    assert (directory / "tls.key").stat().st_mode & 0o077 == 0
    kueue.ensure_metrics_cert(directory)
    assert (directory / "tls.crt").read_bytes() == cert
    (directory / "tls.key").write_text("garbage")
    kueue.ensure_metrics_cert(directory)
    assert (directory / "tls.crt").read_bytes() != cert


def test_an_unwritable_metrics_cert_dir_says_what_to_do(tmp_path):
    (tmp_path / "etc").write_text("a file, not a directory")
    with pytest.raises(ClusterError, match="fixed path.*sudo mkdir -p"):
        kueue.ensure_metrics_cert(tmp_path / "etc" / "kueue")


def test_webhook_serving_cert_is_issued_by_the_cluster_ca_for_loopback(tmp_path):
    from cryptography import x509
    import ipaddress

    files = pki.generate(tmp_path / "pki")
    pki.issue_serving_cert(files, tmp_path / "w" / "tls.crt", tmp_path / "w" / "tls.key", "kueue-webhooks")
    cert = x509.load_pem_x509_certificate((tmp_path / "w" / "tls.crt").read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(files.ca_cert.read_bytes()))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert (tmp_path / "w" / "tls.key").stat().st_mode & 0o077 == 0


def test_ports_list_kueue_s_only_when_it_runs():
    assert {"kueue_webhook", "kueue_health", "kueue_metrics"} <= set(PORTS.as_dict())
    plain = config.Ports(etcd_client=1, etcd_peer=2, apiserver=3, scheduler=4, kwok=5, extender=6, extender_grpc=7)
    assert not any(k.startswith("kueue") for k in plain.as_dict())


# -- binaries and the command line ----------------------------------------------------------

def test_kueue_is_pinned_in_its_helper_module_and_built_only_when_asked():
    assert binaries.KUEUE.version() == "v0.17.0"
    assert binaries.KUEUE not in binaries.COMPONENTS and binaries.KUEUE in binaries.OPTIONAL_COMPONENTS
    assert binaries.KUEUE.ldflags("v0.17.0") == ["-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0"]
    argv = binaries.build_command("go", binaries.KUEUE, "v0.17.0", Path("/out"))
    assert argv[-1] == "sigs.k8s.io/kueue/cmd/kueue" and argv[argv.index("-o") + 1] == "/out/kueue"


def test_build_info_names_the_pinned_module():
    info = ("/x/kueue: go1.26.8\n\tpath\tsigs.k8s.io/kueue/cmd/kueue\n"
            "\tmod\tsigs.k8s.io/kueue\tv0.17.0\th1:abc=\n\tdep\tcel.dev/expr\tv0.25.1\th1:x=\n")
    assert binaries.build_info_names(info, "sigs.k8s.io/kueue", "v0.17.0")
    assert not binaries.build_info_names(info, "sigs.k8s.io/kueue", "v0.16.0")
    assert not binaries.build_info_names(info, "sigs.k8s.io/kueue-extra", "v0.17.0")


def test_cached_kueue_is_reused_and_described(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    fake_cache(tmp_path, binaries.COMPONENTS + binaries.OPTIONAL_COMPONENTS)
    assert binaries.ensure(root=tmp_path).kueue is None
    found = binaries.ensure(root=tmp_path, with_kueue=True)
    assert found.kueue == binaries.cached_dir(binaries.KUEUE, tmp_path) / "kueue"
    assert any(line.startswith("kueue v0.17.0: cached") for line in binaries.describe(tmp_path))


def test_kueue_not_built_is_described_as_optional(tmp_path):
    (line,) = [line for line in binaries.describe(tmp_path) if line.startswith("kueue")]
    assert "not built yet (optional: --with-kueue)" in line


def _nodes(tmp_path) -> Path:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: NodeList\nitems: [{metadata: {name: g1}, status: {capacity: {nvidia.com/gpu: '8'}}}]\n")
    return nodes


def test_kueue_gates_without_kueue_are_refused(tmp_path):
    options = cluster.UpOptions(workdir=tmp_path / "w", nodes_file=_nodes(tmp_path), extender=False,
                                kueue_feature_gates={"TopologyAwareScheduling": False})
    with pytest.raises(ClusterError, match="without --with-kueue"):
        cluster.up(options)


def test_unsupported_kueue_gates_are_refused_before_anything_starts(tmp_path):
    options = cluster.UpOptions(workdir=tmp_path / "w", nodes_file=_nodes(tmp_path), extender=False,
                                kueue=True, kueue_feature_gates={"VisibilityOnDemand": True})
    with pytest.raises(ClusterError, match="VisibilityOnDemand=true is not supported"):
        cluster.up(options)
    assert not (tmp_path / "w").exists()


def test_given_binaries_without_kueue_are_refused(tmp_path):
    missing = tmp_path / "never-started"
    bins = binaries.Binaries(etcd=missing, kube_apiserver=missing, kube_scheduler=missing, kwok=missing,
                             kube_controller_manager=missing)
    options = cluster.UpOptions(workdir=tmp_path / "w", nodes_file=_nodes(tmp_path), extender=False,
                                kueue=True, binaries=bins)
    with pytest.raises(ClusterError, match="--with-kueue needs the Kueue binary"):
        cluster.up(options)


def test_cli_flags_reach_the_options():
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["cluster", "up", "--with-kueue", "--kueue-feature-gates",
                              "TopologyAwareScheduling=false"])
    assert args.kueue is True and args.kueue_feature_gates == {"TopologyAwareScheduling": False}
    assert parser.parse_args(["cluster", "build", "--with-kueue"]).with_kueue is True
    assert parser.parse_args(["cluster", "build"]).with_kueue is False


def test_status_shows_kueue_from_the_state_file(tmp_path):
    out = status_output(tmp_path / "w", "kueue", {"kueue": {
        "version": "v0.17.0", "webhooks": "https://127.0.0.1:9443", "health": "http://127.0.0.1:8081",
        "metrics": "https://127.0.0.1:8443/metrics", "topologyAwareScheduling": False}})
    assert "kueue           running" in out
    assert "kueue           v0.17.0  webhooks https://127.0.0.1:9443" in out and "TAS off" in out


def test_the_stored_kueue_config_is_yaml_kueue_can_read(tmp_path):
    text = config.dump_yaml(kueue.manager_config(PORTS, tmp_path))
    assert yaml.safe_load(text)["webhook"]["port"] == 9443
