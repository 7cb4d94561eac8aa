"""Kueue on the local cluster: its manager's configuration, CRDs and webhook configurations.

What ``cluster up --with-kueue`` needs, as functions over the Kueue module's own files (its
source tree in GOMODCACHE, ``binaries.module_dir(KUEUE)``: the same version as the binary, never
copied into this repository) and the cluster's ports and CA. Facts from the v0.17.0 source
that shape this module (``cmd/kueue/main.go``, ``pkg/config``, ``pkg/visibility``, ``config/``):

- The manager serves its admission webhooks (``/mutate-...``, ``/validate-...``) and the CRD
  conversion webhook (``/convert``) itself. Nothing routes Services here, so every
  ``clientConfig.service`` becomes ``url: https://127.0.0.1:<port><path>`` with the cluster CA
  as ``caBundle``, and the serving cert is issued by that CA. ``internalCertManagement`` is off:
  its rotator would issue a cert for ``kueue-webhook-service.kueue-system.svc`` only and rewrite
  the bundles.
- With internal cert management off, the manager reads its metrics serving cert from the fixed
  path ``/etc/kueue/metrics/certs/tls.{crt,key}`` (no flag, no field) and exits when the files
  are missing, even with metrics disabled. ``ensure_metrics_cert`` provides them.
- The visibility API server (gate ``VisibilityOnDemand``, on by default) reads its cert from the
  fixed path ``/visibility`` the same way; it is an aggregated API nothing here uses: off.
- ``TopologyAwareScheduling`` is Beta and on by default (since v0.14). With it on, the pod
  webhook adds a second scheduling gate, ``kueue.x-k8s.io/topology``, which admission removes
  too when the workload's flavor has no topology.
- The pod webhook (``mpod.kb.io``, ``failurePolicy: Fail``) sees every pod created outside
  ``kube-system`` and ``kueue-system``: the webhook configurations are created only once the
  manager is ready, and ``cluster up`` waits until the API server calls it.
"""

from __future__ import annotations

import datetime
import fcntl
import os
from pathlib import Path
from typing import Any

from extender.adapters.kubeobjects import MARKER
from extender.localcluster import kustomize, managers, pki as pki_mod
from extender.localcluster.apiclient import ApiClient
from extender.localcluster.config import HOST, Ports
from extender.localcluster.errors import ClusterError

#: The namespace the manager calls its own (``Configuration.namespace``; its default too).
NAMESPACE = "kueue-system"
#: Integrations enabled: plain pods and pod groups, and batch/v1 Jobs (Kueue's default; a
#: built-in API). JobSet, Kubeflow, Ray... need CRDs this cluster does not install.
FRAMEWORKS = ("pod", "batch/job")
#: Fixed in cmd/kueue/main.go for ``internalCertManagement.enable: false``.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
#: The gate for topology-aware scheduling, and gates this cluster always sets.
TAS_GATE = "TopologyAwareScheduling"
FORCED_GATES = {"VisibilityOnDemand": False}
#: Kueue's own client; its defaults (20 / 30) throttle a benchmark's thousands of pods.
CLIENT_QPS = 1000
CLIENT_BURST = 2000
#: Scheduling gates the pod webhook adds (``pkg/controller/jobs/pod/constants``,
#: ``apis/kueue/v1beta2/topology_types.go``).
ADMISSION_GATE = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

#: Where Kueue v0.17.0 keeps its kustomizations (``config/default`` gives the ``kueue-`` prefix).
LAYOUT = kustomize.Layout(crds="config/components/crd", webhooks="config/components/webhook",
                          overlay="config/default")


def load_sources(module_dir: Path) -> kustomize.Sources:
    """Kueue's CRDs and webhook configurations as ``config/default`` would render them: the CRD
    conversion patches, the webhook patches (namespace selectors) and the ``kueue-`` prefix."""
    return kustomize.load_sources(module_dir, LAYOUT, "Kueue")


def webhook_base(ports: Ports) -> str:
    return managers.webhook_base(ports.kueue_webhook)


def effective_gates(requested: dict[str, bool] | None) -> dict[str, bool]:
    """The ``featureGates`` of the Configuration: ``FORCED_GATES`` plus what was asked for."""
    return {**FORCED_GATES, **(requested or {})}


def gate_problems(requested: dict[str, bool] | None) -> list[str]:
    """Requested Kueue feature gates this cluster cannot run (checked before anything starts)."""
    problems = []
    asked = requested or {}
    for name, forced in FORCED_GATES.items():
        if name in asked and asked[name] != forced:
            problems.append(
                f"Kueue feature gate {name}={str(asked[name]).lower()} is not supported here: the "
                "visibility server reads its certificate from the fixed path /visibility (v0.17.0)")
    return problems


def tas_enabled(gates: dict[str, bool]) -> bool:
    """Whether TAS runs with these gates (unset = Kueue's default, on since v0.14)."""
    return gates.get(TAS_GATE, True)


MARKER_PREFIX = MARKER.split("/", 1)[0] + "/"
"""Kueue leaves resources with this prefix out of quota (``resources.excludeResourcePrefixes``,
apis/config/v1beta2/configuration_types.go, v0.17.0): the gang members' marker."""


def manager_config(ports: Ports, cert_dir: Path, feature_gates: dict[str, bool] | None = None,
                   frameworks: tuple[str, ...] = FRAMEWORKS) -> dict[str, Any]:
    """Kueue's ``Configuration`` (config.kueue.x-k8s.io/v1beta2) for this cluster.

    Loopback only: webhooks on ``ports.kueue_webhook`` (cert in ``cert_dir``: ``tls.crt``,
    ``tls.key``), health probes (``/healthz``, ``/readyz``) over HTTP on ``ports.kueue_health``,
    metrics over HTTPS on ``ports.kueue_metrics`` (bearer token, authorized by the API server).
    One manager: leader election off. Unknown fields fail Kueue's strict decoding, so only
    fields of v1beta2 are set.
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.kueue_health}"},
        "metrics": {"bindAddress": f"{HOST}:{ports.kueue_metrics}"},
        "webhook": {"host": HOST, "port": ports.kueue_webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": CLIENT_QPS, "burst": CLIENT_BURST},
        "integrations": {"frameworks": list(frameworks)},
        # railyard's admission policy marks gang members with railyard.io/gang-member, which no
        # ClusterQueue covers: Kueue would refuse to admit them (manifests/overlays/kueue).
        "resources": {"excludeResourcePrefixes": [MARKER_PREFIX]},
        "featureGates": dict(sorted(effective_gates(feature_gates).items())),
    }


def manager_args(binary: Path, config_file: Path, kubeconfig_file: Path) -> list[str]:
    # Feature gates go in the Configuration only: Kueue refuses --feature-gates and
    # featureGates together.
    return [str(binary), f"--config={config_file}", f"--kubeconfig={kubeconfig_file}"]


def probe_pod() -> dict[str, Any]:
    """A pod the pod webhook must gate; created with ``dryRun=All`` to see whether the API
    server calls the webhook yet (the queue need not exist for the gate to be added)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "railyard-kueue-probe", "labels": {QUEUE_LABEL: "railyard-probe"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }


def is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == ADMISSION_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def gates_pods(api: ApiClient) -> bool:
    """True once a dry-run pod with a queue name comes back gated: the API server calls
    Kueue's pod webhook (it picks up new webhook configurations within a second or so)."""
    status, pod = api.dry_run("/api/v1/namespaces/default/pods", probe_pod())
    return status in (200, 201) and is_gated(pod)


def ensure_metrics_cert(directory: Path = METRICS_CERT_DIR) -> Path:
    """Make sure ``directory`` holds a valid ``tls.crt``/``tls.key`` pair; return ``directory``.

    A pair already there (ours from an earlier run, or anyone's) is kept while it is valid for
    another day. Otherwise a self-signed one for 127.0.0.1/localhost is written (every local
    cluster shares it: the path is fixed, one per machine). Raises ClusterError with what to
    do when the directory cannot be written.
    """
    cert, key = directory / "tls.crt", directory / "tls.key"
    if _valid_files(cert, key):
        return directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".railyard.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _valid_files(cert, key):
                cert_pem, key_pem = pki_mod.self_signed_serving_cert("railyard-local kueue metrics", days=3650)
                _replace(key, key_pem, 0o600)
                _replace(cert, cert_pem, 0o644)
    except OSError as exc:
        raise ClusterError(
            f"Kueue v0.17 with internalCertManagement off reads its metrics certificate from "
            f"{cert} and {key} (a fixed path) and railyard cannot write them ({exc.strerror or exc}); "
            f"create them once, e.g. `sudo mkdir -p {directory} && sudo openssl req -x509 -newkey "
            f"ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj /CN=localhost "
            f"-addext subjectAltName=IP:127.0.0.1 -keyout {key} -out {cert} && sudo chmod a+r {key}`"
        ) from exc
    return directory


def _valid_files(cert: Path, key: Path) -> bool:
    try:
        return pki_mod.valid_pair(cert.read_bytes(), key.read_bytes(), datetime.timedelta(days=1))
    except OSError:
        return False


def _replace(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    tmp.replace(path)
