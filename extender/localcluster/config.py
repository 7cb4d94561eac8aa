"""What the local cluster's processes are told: command lines, kubeconfig, scheduler config.

Pure functions over paths and ports, no I/O beyond reading the shipped kwok stages, so that
unit tests check every flag without the binaries. Flag facts are from the 1.37.2 / 3.6.16 /
v0.7.0 sources (KUBE-FACTS.md section 3); where a flag is here for a reason that is not
obvious, the comment says which.
"""

from __future__ import annotations

import base64
import copy
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from extender.adapters.kubeobjects.admission import managed_resources
from extender.localcluster.pki import Pki

HOST = "127.0.0.1"
#: The Services range; its first address is the ``kubernetes`` Service IP (in the serving cert).
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
#: kwok's pool of fake pod IPs (first address, prefix length).
POD_CIDR = "10.244.0.1/16"
#: Scheduler names served by the one local kube-scheduler without the extender; with it, the
#: reference configuration's profiles too (extenders apply to every profile).
SCHEDULER_NAMES = ("default-scheduler", "railyard")
#: The shipped manifests: the local cluster runs kube-scheduler with their reference
#: configuration and the extender under their ServiceAccount and RBAC (issue 6), so the e2e
#: tests prove what a user installs. The local cluster runs from a checkout (editable install).
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
REFERENCE_SCHEDULER_CONFIG = MANIFESTS / "base" / "scheduler-config.yaml"
EXTENDER_RBAC = MANIFESTS / "base" / "extender-rbac"
#: The extender's identity in the manifests: (namespace, ServiceAccount).
EXTENDER_SERVICE_ACCOUNT = ("railyard-system", "railyard")
#: Where the reference configuration's extender listens; rebound to the local extender's port.
REFERENCE_EXTENDER_BASE = "http://127.0.0.1:8888"
#: The scheduler's own client; the default qps 50 caps binds and events (KUBE-FACTS 2).
SCHEDULER_QPS = 1000
SCHEDULER_BURST = 2000
#: Annotation read by the kwok pod stage: Go duration after which a Running pod Succeeds.
SIM_RUNTIME_ANNOTATION = "railyard.io/sim-runtime"


@dataclass(frozen=True)
class Ports:
    """Every port the cluster listens on, all on 127.0.0.1."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    kwok: int
    extender: int
    extender_grpc: int
    """The extender's gRPC API (``railyard explain``); its default 8889 would clash."""
    extender_view: int = 0
    """The extender's live topology view (docs/view.md); 0 = off (``--no-extender``)."""
    kueue_webhook: int = 0
    """Kueue's admission and conversion webhooks (HTTPS); 0 = no Kueue (``--with-kueue``)."""
    kueue_health: int = 0
    """Kueue's ``/healthz`` and ``/readyz`` (HTTP)."""
    kueue_metrics: int = 0
    """Kueue's ``/metrics`` (HTTPS, bearer token)."""
    controller_manager: int = 0
    """kube-controller-manager's ``/healthz`` and ``/metrics`` (HTTPS); 0 = not running
    (``--no-controllers``)."""

    def as_dict(self) -> dict[str, int]:
        """Every port in use (Kueue's and the controller manager's only when they run)."""
        optional = ("kueue_", "controller_manager", "extender_view")
        return {k: v for k, v in self.__dict__.items() if v or not k.startswith(optional)}


#: kube-controller-manager's controllers (``--controllers``, canonical names; kubernetes@v1.37.2
#: ``cmd/kube-controller-manager/names/controller_names.go``). An explicit list, so nothing else
#: starts: what a training cluster needs, and nothing that fights kwok. Left out on purpose:
#: ``node-lifecycle-controller`` (kwok nodes send no heartbeats here: after its 50 s grace
#: period it would mark every node NotReady and taint it unreachable) and
#: ``taint-eviction-controller`` (it would then evict every pod), ``disruption-controller``
#: (without it a PodDisruptionBudget allows no eviction at all, which tests/e2e/test_preemption.py
#: relies on); the rest (Deployments, Services, volumes, certificates, ServiceAccounts...) is not
#: needed by any test or workload railyard places. docs/local-cluster.md says why each one runs.
CONTROLLERS = (
    "job-controller",                        # Indexed Jobs (JobSet, Trainer) create and replace pods
    "garbage-collector-controller",          # a deleted owner's pods go; foreground deletion (JobSet restarts)
    "pod-garbage-collector-controller",      # pods of deleted nodes; unscheduled terminating pods
    "statefulset-controller",                # LeaderWorkerSet's leader and worker sets
    "namespace-controller",                  # deleting a namespace deletes what it holds
    "ttl-after-finished-controller",         # Job ttlSecondsAfterFinished
    "resourceclaim-controller",              # DRA: claims from templates, released when their pods go
    "podgroup-protection-controller",        # Workload API: a PodGroup's finalizer goes with its last pod
)
#: Its client: the default qps 20 / burst 30 would throttle a 1,000-pod Job (KUBE-FACTS 3).
CONTROLLER_MANAGER_QPS = 1000
CONTROLLER_MANAGER_BURST = 2000
#: What ``up`` waits for in its ``/healthz?verbose``: each controller's check appears there once
#: the controllers are built (kubernetes@v1.37.2 cmd/kube-controller-manager/app/controllermanager.go
#: ``BuildControllers``); before that ``/healthz`` alone already answers ok.
CONTROLLER_MANAGER_READY = "[+]job-controller ok"

#: ``cluster up --replicas N`` (N > 1): kube-scheduler's leader election on a Lease in
#: kube-system, with durations short enough for a failover test (defaults: 15 s / 10 s / 2 s).
LEADER_LEASE = ("kube-system", "railyard-scheduler")
LEADER_ELECTION_DURATIONS = {"leaseDuration": "6s", "renewDeadline": "4s", "retryPeriod": "1s"}


@dataclass(frozen=True)
class Replica:
    """One kube-scheduler and the railyard extender beside it: replica 1 is the only one by
    default; ``--replicas N`` runs N pairs (the HA shape of the manifests), each scheduler's
    config pointing at its own railyard."""

    index: int
    ports: Ports
    """The cluster's ports with this pair's ``scheduler``, ``extender`` and ``extender_grpc``."""

    @property
    def suffix(self) -> str:
        return "" if self.index == 1 else f"-{self.index}"

    @property
    def scheduler_name(self) -> str:
        """Its kube-scheduler's process name (pid and log file)."""
        return "kube-scheduler" + self.suffix

    @property
    def extender_name(self) -> str:
        return "extender" + self.suffix

    @property
    def config_name(self) -> str:
        return f"scheduler-config{self.suffix}.yaml"

    def as_dict(self, extender: bool = True) -> dict[str, Any]:
        """What ``cluster.json`` records of it (``extender``: False with ``--no-extender``)."""
        return {"index": self.index, "scheduler": self.scheduler_name, "extender": self.extender_name,
                "schedulerUrl": f"https://{HOST}:{self.ports.scheduler}",
                "extenderUrl": extender_url(self.ports) if extender else None,
                "grpc": f"{HOST}:{self.ports.extender_grpc}", "view": view_url(self.ports) if extender else None}


def leader_election(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with kube-scheduler's leader election on (``--replicas`` above 1)."""
    namespace, name = LEADER_LEASE
    return {**config, "leaderElection": {"leaderElect": True, "resourceLock": "leases", "resourceName": name,
                                         "resourceNamespace": namespace, **LEADER_ELECTION_DURATIONS}}


#: In a ``--scheduler-config`` file, stands for ``http://127.0.0.1:<extender port>``.
EXTENDER_URL_PLACEHOLDER = "$(EXTENDER_URL)"


def extender_base(ports: Ports) -> str:
    """Scheme, host and port of the local extender."""
    return f"http://{HOST}:{ports.extender}"


def extender_url(ports: Ports) -> str:
    """The extender's ``urlPrefix`` (its verbs are served under ``/scheduler``)."""
    return extender_base(ports) + "/scheduler"


def view_url(ports: Ports) -> str | None:
    """The extender's live topology view, if it serves one."""
    return f"http://{HOST}:{ports.extender_view}/" if ports.extender_view else None


def render_scheduler_config(
    template: dict[str, Any] | None, kubeconfig: Path, extender_base_url: str | None
) -> dict[str, Any]:
    """The scheduler config to run: generated, or a given one bound to this cluster.

    A given config (``--scheduler-config``, later the reference one in ``manifests/``) is
    used as is, except that ``clientConnection.kubeconfig`` becomes this cluster's and
    ``$(EXTENDER_URL)`` in an extender's ``urlPrefix`` becomes the local extender. With the
    extender off (``extender_base_url`` None), those extender entries are dropped, so one
    file serves both arms of a comparison.
    """
    if template is None:
        return scheduler_config(kubeconfig, None if extender_base_url is None else extender_base_url + "/scheduler")
    config = copy.deepcopy(template)
    connection = config.get("clientConnection") or {}
    connection["kubeconfig"] = str(kubeconfig)
    config["clientConnection"] = connection
    extenders = []
    for extender in config.get("extenders") or []:
        url = str(extender.get("urlPrefix", ""))
        if EXTENDER_URL_PLACEHOLDER in url:
            if extender_base_url is None:
                continue
            extender = {**extender, "urlPrefix": url.replace(EXTENDER_URL_PLACEHOLDER, extender_base_url)}
        extenders.append(extender)
    if extenders:
        config["extenders"] = extenders
    else:
        config.pop("extenders", None)
    return config


def steer_lone_pods(config: dict[str, Any], gpu_resource: str) -> dict[str, Any]:
    """``config`` with every extender's ``managedResources`` as docs/reference.md's "Steering
    lone GPU pods" has it: the marker and ``gpu_resource``, so pods of no gang that ask for GPUs
    reach railyard too."""
    config = copy.deepcopy(config)
    for extender in config.get("extenders") or []:
        extender["managedResources"] = managed_resources(gpu_resource)
    return config


def reference_scheduler_config() -> dict[str, Any]:
    """``manifests/base/scheduler-config.yaml``, the configuration users deploy."""
    return yaml.safe_load(REFERENCE_SCHEDULER_CONFIG.read_text())


def scheduler_config(kubeconfig: Path, extender_url: str | None) -> dict[str, Any]:
    """The reference KubeSchedulerConfiguration from ``manifests/``, bound to this cluster.

    Every extender field (verbs, nodeCacheCapable, managedResources, httpTimeout...) is the
    shipped one; only what a loopback test cluster needs differs:
    - ``clientConnection``: this cluster's admin kubeconfig, and qps/burst high enough for
      benchmarks that bind thousands of pods;
    - leader election off: one scheduler, no Lease to wait for at start;
    - the profiles: ``default-scheduler`` as the reference's first profile (no other scheduler
      runs here, and extenders apply to every profile of a process anyway), then the
      reference's own (``railyard``, ``railyard-sampled``);
    - the extender's ``urlPrefix`` points at the local extender's port; with ``extender_url``
      None (``--no-extender``) the extenders are dropped and the profiles are kube-scheduler's
      stock ones for ``SCHEDULER_NAMES``.
    """
    config = reference_scheduler_config()
    config["clientConnection"] = {"kubeconfig": str(kubeconfig), "qps": SCHEDULER_QPS, "burst": SCHEDULER_BURST}
    config["leaderElection"] = {"leaderElect": False}
    shipped = [p for p in config.get("profiles") or [{"schedulerName": "railyard"}] if p["schedulerName"] != "default-scheduler"]
    config["profiles"] = [{**copy.deepcopy(shipped[0]), "schedulerName": "default-scheduler"}, *shipped]
    if extender_url is None:
        # kube-scheduler alone runs its stock plugins: the reference profile's best-fit
        # scoring on GPUs stands in for railyard's scores, so it goes with the extender.
        config.pop("extenders", None)
        config["profiles"] = [{"schedulerName": name} for name in SCHEDULER_NAMES]
        return config
    base = extender_url.removesuffix("/scheduler")
    config["extenders"] = [
        {**e, "urlPrefix": str(e["urlPrefix"]).replace(REFERENCE_EXTENDER_BASE, base)}
        for e in config.get("extenders") or []
    ]
    return config


def extender_objects() -> list[dict[str, Any]]:
    """The extender's Namespace, ServiceAccount, token Secret and RBAC from ``manifests/``, in
    the order their kustomization lists them (plain YAML files, every namespace spelled out).
    """
    kustomization = yaml.safe_load((EXTENDER_RBAC / "kustomization.yaml").read_text())
    objects = []
    for name in kustomization["resources"]:
        objects += [d for d in yaml.safe_load_all((EXTENDER_RBAC / name).read_text()) if d]
    return objects


def token_kubeconfig(ca_cert: Path, server: str, token: str) -> dict[str, Any]:
    """A kubeconfig that authenticates with the extender ServiceAccount's token, as the
    in-cluster configuration of the sidecar would."""
    namespace, name = EXTENDER_SERVICE_ACCOUNT
    user = f"system:serviceaccount:{namespace}:{name}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "railyard-local", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "railyard-local", "context": {"cluster": "railyard-local", "user": user}}],
        "current-context": "railyard-local",
        "preferences": {},
    }


def kubeconfig(pki: Pki, server: str, user: str = "railyard-admin") -> dict[str, Any]:
    """An admin kubeconfig with the certs inlined, so the file can be copied anywhere."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "railyard-local", "cluster": {
            "server": server, "certificate-authority-data": b64(pki.ca_cert)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(pki.admin_cert), "client-key-data": b64(pki.admin_key)}}],
        "contexts": [{"name": "railyard-local", "context": {"cluster": "railyard-local", "user": user}}],
        "current-context": "railyard-local",
        "preferences": {},
    }


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


def kwok_stages_text() -> str:
    """The shipped kwok stage documents (``kwok-stages.yaml``, package data)."""
    return resources.files("extender.localcluster").joinpath("kwok-stages.yaml").read_text()


def etcd_args(binary: Path, data_dir: Path, ports: Ports) -> list[str]:
    client = f"http://{HOST}:{ports.etcd_client}"
    peer = f"http://{HOST}:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=railyard",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=railyard={peer}",
        # Test data only: skipping fsync makes every API write several times faster.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def feature_flags(feature_gates: dict[str, bool] | None = None,
                  runtime_config: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """Extra flags for (kube-apiserver, the other Kubernetes components): ``--feature-gates``
    on all of them, so the API fields, the scheduler plugins and the controllers agree (e.g.
    ``GenericWorkload`` gates the ``scheduling.k8s.io`` Workload/PodGroup fields, the
    GangScheduling plugin and the PodGroup protection controller; ``WorkloadWithJob`` the Job
    controller's PodGroups), and ``--runtime-config`` (e.g. ``scheduling.k8s.io/v1beta1=true``:
    beta APIs are off by default) on the API server only."""
    common = []
    if feature_gates:
        gates = ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(feature_gates.items()))
        common.append(f"--feature-gates={gates}")
    api = list(common)
    if runtime_config:
        api.append(f"--runtime-config={','.join(runtime_config)}")
    return api, list(common)


def apiserver_args(binary: Path, pki: Pki, ports: Ports, cert_dir: Path) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://{HOST}:{ports.etcd_client}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-account-key-file={pki.sa_pub}",
        # RBAC, so a later ServiceAccount for the extender proves its Role is enough;
        # the admin cert is in system:masters, which RBAC always allows.
        "--authorization-mode=RBAC",
        # No serviceaccount controller (CONTROLLERS): no default ServiceAccount for the
        # ServiceAccount plugin; no node lifecycle controller to lift the not-ready taint
        # TaintNodesByCondition puts on every new node (nodes.py taints the nodes that are not
        # Ready instead).
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        # The kubernetes Service's Endpoints would get 127.0.0.1, which validation rejects.
        "--endpoint-reconciler-type=none",
        # Benchmarks drive thousands of writes per second: no inflight caps, no APF queueing.
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=0",
        "--enable-priority-and-fairness=false",
    ]


def scheduler_args(binary: Path, config_file: Path, kubeconfig_file: Path, ports: Ports,
                   leader_elect: bool = False) -> list[str]:
    return [
        str(binary),
        f"--config={config_file}",
        # A set flag wins over the config's leaderElection.leaderElect (ApplyLeaderElectionTo).
        f"--leader-elect={'true' if leader_elect else 'false'}",
        f"--bind-address={HOST}",
        f"--secure-port={ports.scheduler}",
        # Delegated authn/authz of its own endpoints goes to our API server. Skip the lookup of
        # the request-header CA, which this API server (no front proxy) does not publish.
        f"--authentication-kubeconfig={kubeconfig_file}",
        f"--authorization-kubeconfig={kubeconfig_file}",
        "--authentication-skip-lookup=true",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]


def controller_manager_args(binary: Path, kubeconfig_file: Path, ports: Ports,
                            controllers: tuple[str, ...] = CONTROLLERS) -> list[str]:
    """kube-controller-manager out of cluster, as admin (kubernetes@v1.37.2
    ``cmd/kube-controller-manager/app/options/options.go``)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig_file}",
        f"--controllers={','.join(controllers)}",
        # One instance: no Lease kube-system/kube-controller-manager to win first.
        "--leader-elect=false",
        # Every controller as admin: per-controller ServiceAccount credentials need the token
        # controller, a signing key and the ServiceAccount admission this cluster turns off.
        "--use-service-account-credentials=false",
        f"--kube-api-qps={CONTROLLER_MANAGER_QPS}",
        f"--kube-api-burst={CONTROLLER_MANAGER_BURST}",
        # Loopback only; the port serves /healthz (what `up` waits for) and /metrics.
        f"--bind-address={HOST}",
        f"--secure-port={ports.controller_manager}",
        f"--authentication-kubeconfig={kubeconfig_file}",
        f"--authorization-kubeconfig={kubeconfig_file}",
        "--authentication-skip-lookup=true",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]


def kwok_args(binary: Path, kubeconfig_file: Path, stages_file: Path, ports: Ports) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig_file}",
        f"--config={stages_file}",
        # Every node in this cluster is fake; no annotation to forget on a hand-written node.
        "--manage-all-nodes=true",
        # 0 = no node leases: kwok then holds no per-node lease and renews nothing.
        "--node-lease-duration-seconds=0",
        # Serves /healthz; without it kwok would listen nowhere (nodePort defaults to 0).
        f"--server-address={HOST}:{ports.kwok}",
        # Fake pod IPs; kwok's default 10.0.0.1/24 overlaps the Service range (SERVICE_CIDR)
        # and holds 254 addresses.
        f"--cidr={POD_CIDR}",
    ]


def extender_args(kubeconfig_file: Path, scheduler_config_file: Path, ports: Ports,
                  python: str = sys.executable, settings_file: Path | None = None) -> list[str]:
    """``railyard serve`` on our ports; it checks the scheduler config's httpTimeout itself.
    ``settings_file``: railyard settings (``cluster up --extender-set``)."""
    return [python, "-m", "extender", "serve", "--kubeconfig", str(kubeconfig_file),
            "--listen", f"{HOST}:{ports.extender}", "--grpc-listen", f"{HOST}:{ports.extender_grpc}",
            "--scheduler-config", str(scheduler_config_file),
            *(["--view-listen", f"{HOST}:{ports.extender_view}"] if ports.extender_view else []),
            *(["--config", str(settings_file)] if settings_file is not None else [])]


def extender_settings(assignments: dict[str, Any]) -> dict[str, Any]:
    """Dotted ``{"gangs.binding_pause_seconds": 2}`` as the nested mapping a settings file holds."""
    doc: dict[str, Any] = {}
    for path, value in assignments.items():
        *parents, leaf = path.split(".")
        here = doc
        for part in parents:
            here = here.setdefault(part, {})
            if not isinstance(here, dict):
                raise ValueError(f"setting {path}: {part} is given a value and also has sub-settings")
        if isinstance(here.get(leaf), dict):
            raise ValueError(f"setting {path} is given a value and also has sub-settings")
        here[leaf] = value
    return doc
