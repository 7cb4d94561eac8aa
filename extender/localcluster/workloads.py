"""JobSet, LeaderWorkerSet and Kubeflow Trainer on the local cluster (``up --with-jobset`` ...).

Each is a controller-runtime manager built from the Go module proxy at the version its helper
module pins (``tools/jobset``, ``tools/lws``, ``tools/trainer``) and installed like Kueue
(``managers.py``): CRDs and webhook configurations read from that module's own kustomize tree in
GOMODCACHE, webhooks on 127.0.0.1 registered by URL with the cluster CA, a serving cert from
that CA, internal certificate management off, leader election off, metrics and health probes
on free loopback ports, client QPS raised. They create Jobs, StatefulSets and Services; the
pods come from kube-controller-manager's job and statefulset controllers.

Facts from their sources that shape this module (checked at the pinned tags):

- JobSet v0.12.0 (``main.go``, ``api/config/v1alpha1``, ``pkg/config/config.go``): a
  ``config.jobset.x-k8s.io/v1alpha1`` Configuration with ``webhook.{host,port,certDir}``,
  ``metrics.{bindAddress,certDir}``, ``health``, ``leaderElection``,
  ``internalCertManagement.enable`` and ``clientConnection``. With cert management off and no
  ``metrics.certDir`` its metrics server reads ``/tmp/k8s-metrics-server/serving-certs``, a
  path every cluster would share: it gets the webhook cert dir. Its pod webhooks
  (``mpod``/``vpod``, objectSelector ``jobset.sigs.k8s.io/jobset-name``) and the JobSet
  defaulter (``mjobset``: Indexed completion, ``restartPolicy: OnFailure``...) have
  ``failurePolicy: Fail``; the CRD has a conversion webhook (``/convert``).
- LeaderWorkerSet v0.9.0 (``cmd/main.go``, ``api/config/v1alpha1``): the same Configuration
  shape (``config.lws.x-k8s.io/v1alpha1``) without ``metrics.certDir`` (its metrics server makes
  a self-signed cert in memory). Two CRDs with controllers, LeaderWorkerSet and
  DisaggregatedSet: both are installed, or the manager cannot start. Its pod webhook writes the
  group labels (``group-index``, ``worker-index``, ``group-key``). v0.9.0, not the newest
  v0.10.0: the Go module proxy refuses v0.10.0's zip (403 "This module version is not
  available"); v0.10.0 changed no label, annotation or config field this module uses.
- Kubeflow Trainer v2.3.0 (``cmd/trainer-controller-manager/main.go``, ``pkg/config``,
  ``pkg/apis/config/v1alpha1``): a ``config.trainer.kubeflow.org/v1alpha1`` Configuration with
  ``webhook.{host,port}``, ``certManagement.enable`` and no cert dir: the webhook server takes
  controller-runtime's default, ``os.TempDir()/k8s-webhook-server/serving-certs``, and Go's
  ``os.TempDir`` is ``$TMPDIR``. So each cluster runs its Trainer with
  ``TMPDIR=<workdir>/trainer/tmp`` and puts the cert there: concurrent clusters never share
  ``/tmp/k8s-webhook-server``. (The fixed ``/tmp/k8s-webhook-server/serving-certs`` of its
  ``pkg/util/cert`` is used only by its cert rotator, off here, and by the status server of
  the alpha gate ``TrainJobStatus``, off by default.) It watches JobSets (JobSet starts first)
  and, when their CRDs exist, scheduler-plugins and Volcano PodGroups (not installed here: it
  logs "PodGroup CRDs must be installed in advance" and runs without those plugins).

Every manager also gets ``TMPDIR=<workdir>/<name>/tmp``, so no default path under ``/tmp``
is shared between clusters.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from extender.localcluster import binaries as binaries_mod, kustomize, managers, pki as pki_mod, processes
from extender.localcluster.apiclient import ApiClient
from extender.localcluster.config import HOST
from extender.localcluster.errors import ClusterError

#: The managers' own clients: JobSet's and LWS's default 500 / 500, Trainer's 50 / 100.
CLIENT_QPS = 1000
CLIENT_BURST = 2000
#: The namespace the readiness probes dry-run their objects in (it always exists).
PROBE_NAMESPACE = "default"
_PROBE_CONTAINER = {"name": "c", "image": "registry.k8s.io/pause:3.10"}


@dataclass(frozen=True)
class Ports:
    """One manager's loopback ports."""

    webhook: int
    health: int
    metrics: int


@dataclass(frozen=True)
class Controller:
    """One workload controller: where its files are and how it is configured and probed."""

    name: str
    """The flag (``--with-<name>``), binary, process and workdir name."""
    title: str
    layout: kustomize.Layout
    configure: Callable[[Ports, Path], dict[str, Any]]
    """Its Configuration, given its ports and webhook cert dir."""
    probe: Callable[[ApiClient], bool]
    """True once the API server calls its webhooks (a dry-run the webhook changes or denies)."""
    needs: tuple[str, ...] = ()
    """Controllers that must run too, and start first."""
    cert_dir_in_tmpdir: bool = False
    """Its webhook cert dir cannot be configured: controller-runtime's default under $TMPDIR."""

    @property
    def component(self) -> binaries_mod.Component:
        return binaries_mod.WORKLOAD_COMPONENTS[self.name]


def _common(ports: Ports, api_version: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version, "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.health}"},
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"qps": CLIENT_QPS, "burst": CLIENT_BURST},
    }


def jobset_config(ports: Ports, cert_dir: Path) -> dict[str, Any]:
    return {
        **_common(ports, "config.jobset.x-k8s.io/v1alpha1"),
        "webhook": {"host": HOST, "port": ports.webhook, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"{HOST}:{ports.metrics}", "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
    }


def lws_config(ports: Ports, cert_dir: Path) -> dict[str, Any]:
    return {
        **_common(ports, "config.lws.x-k8s.io/v1alpha1"),
        "webhook": {"host": HOST, "port": ports.webhook, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"{HOST}:{ports.metrics}"},
        "internalCertManagement": {"enable": False},
    }


def trainer_config(ports: Ports, cert_dir: Path) -> dict[str, Any]:
    # cert_dir is where the manager will look anyway ($TMPDIR/k8s-webhook-server/serving-certs).
    return {
        **_common(ports, "config.trainer.kubeflow.org/v1alpha1"),
        "webhook": {"host": HOST, "port": ports.webhook},
        "metrics": {"bindAddress": f"{HOST}:{ports.metrics}", "secureServing": True},
        "certManagement": {"enable": False},
    }


def jobset_defaulted(api: ApiClient) -> bool:
    """The JobSet defaulter sets an unset pod ``restartPolicy`` to OnFailure (the CRD does not)."""
    status, obj = api.dry_run(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{PROBE_NAMESPACE}/jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "railyard-probe"},
        "spec": {"replicatedJobs": [{"name": "r", "template": {"spec": {"template": {"spec": {
            "containers": [_PROBE_CONTAINER]}}}}}]}})
    jobs = (obj.get("spec") or {}).get("replicatedJobs") or [{}]
    pod_spec = ((((jobs[0].get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {})
    return status in (200, 201) and pod_spec.get("restartPolicy") == "OnFailure"


def lws_defaulted(api: ApiClient) -> bool:
    """The LeaderWorkerSet defaulter sets ``networkConfig.subdomainPolicy: Shared`` (the CRD does not)."""
    status, obj = api.dry_run(
        f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{PROBE_NAMESPACE}/leaderworkersets", {
            "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "railyard-probe"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [_PROBE_CONTAINER]}}}}})
    return status in (200, 201) and ((obj.get("spec") or {}).get("networkConfig") or {}).get("subdomainPolicy") == "Shared"


def trainer_validates(api: ApiClient) -> bool:
    """Trainer's TrainJob validator refuses a TrainJob whose ClusterTrainingRuntime does not exist."""
    status, obj = api.dry_run(f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{PROBE_NAMESPACE}/trainjobs", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "railyard-probe"},
        "spec": {"runtimeRef": {"name": "railyard-probe-no-such-runtime"}}})
    return status >= 400 and 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied' in obj.get("message", "")


CONTROLLERS = {c.name: c for c in (
    Controller("jobset", "JobSet", kustomize.Layout(
        crds="config/components/crd", webhooks="config/components/webhook", overlay="config/default"),
        jobset_config, jobset_defaulted),
    Controller("lws", "LeaderWorkerSet", kustomize.Layout(
        crds="config/crd", webhooks="config/webhook", overlay="config/default"),
        lws_config, lws_defaulted),
    Controller("trainer", "Kubeflow Trainer", kustomize.Layout(
        crds="manifests/base/crds", webhooks="manifests/base/webhook"),
        trainer_config, trainer_validates, needs=("jobset",), cert_dir_in_tmpdir=True),
)}


def resolve(names: Iterable[str]) -> tuple[str, ...]:
    """The controllers to run, with those they need, in start order (JobSet before Trainer)."""
    wanted = set(names)
    unknown = sorted(wanted - set(CONTROLLERS))
    if unknown:
        raise ClusterError(f"unknown workload controller {unknown[0]!r}; known: {', '.join(CONTROLLERS)}")
    for name in list(wanted):
        wanted.update(CONTROLLERS[name].needs)
    return tuple(name for name in CONTROLLERS if name in wanted)


def load_sources(names: Iterable[str], bins: binaries_mod.Binaries) -> dict[str, kustomize.Sources]:
    """Each controller's CRDs and webhook configurations, read from its module before anything
    starts; ClusterError if a binary or a file is missing."""
    sources = {}
    for name in names:
        controller = CONTROLLERS[name]
        if name not in bins.workload_controllers:
            raise ClusterError(f"--with-{name} needs the {controller.title} binary; the binaries given have none")
        sources[name] = kustomize.load_sources(
            binaries_mod.module_dir(controller.component), controller.layout, controller.title)
    return sources


def manager(controller: Controller, workdir: Path, binary: Path, sources: kustomize.Sources, ports: Ports,
            kubeconfig_file: Path, env: dict[str, str]) -> managers.Manager:
    """What ``managers.start`` needs for ``controller`` in ``workdir``."""
    home = workdir / controller.name
    tmpdir = home / "tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    cert_dir = tmpdir / "k8s-webhook-server" / "serving-certs" if controller.cert_dir_in_tmpdir else home / "certs"
    config_file = workdir / f"{controller.name}-config.yaml"
    return managers.Manager(
        name=controller.name, title=f"{controller.title} {controller.component.version()}", sources=sources,
        webhook_port=ports.webhook, health_port=ports.health, cert_dir=cert_dir, config_file=config_file,
        config=controller.configure(ports, cert_dir),
        argv=[str(binary), f"--config={config_file}", f"--kubeconfig={kubeconfig_file}"],
        env={**env, "TMPDIR": str(tmpdir)}, probe=controller.probe)


def start(workdir: Path, api: ApiClient, pki: pki_mod.Pki, bins: binaries_mod.Binaries,
          sources: dict[str, kustomize.Sources], kubeconfig_file: Path, taken_ports: Iterable[int],
          env: dict[str, str], log: TextIO = sys.stderr, timeout: float = 180.0) -> dict[str, dict[str, Any]]:
    """Install and run each controller of ``sources`` in order; return what ``cluster.json``
    records of them (version and URLs, by name)."""
    taken = set(taken_ports)
    state = {}
    for name, controller_sources in sources.items():
        controller = CONTROLLERS[name]
        ports = Ports(*(_free_port(taken) for _ in range(3)))
        managers.start(workdir, api, pki, manager(controller, workdir, bins.workload_controllers[name], controller_sources,
                                                  ports, kubeconfig_file, env), log, timeout)
        state[name] = {
            "version": controller.component.version(),
            "webhooks": managers.webhook_base(ports.webhook),
            "health": f"http://{HOST}:{ports.health}",
            "metrics": f"https://{HOST}:{ports.metrics}/metrics",
        }
    return state


def _free_port(taken: set[int]) -> int:
    while True:
        port = processes.free_port()
        if port not in taken:
            taken.add(port)
            return port
