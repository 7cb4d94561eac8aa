"""Controller managers run out of cluster: Kueue and the workload controllers, installed alike.

In a real cluster each of them runs as a Deployment behind a Service, with a certificate from
cert-manager or its own rotator. Here each runs as a local process with the admin kubeconfig,
serving its admission and conversion webhooks on 127.0.0.1, and ``start`` installs it in this
order:

1. its namespace (if it names one) and its CRDs, every conversion webhook pointed at
   ``https://127.0.0.1:<port>/convert`` with the cluster CA; waits until each is Established;
2. a serving cert for 127.0.0.1/localhost issued by the cluster CA, in its cert dir;
3. its configuration file, then the process (``logs/<name>.log``); waits for ``/readyz``;
4. only then its webhook configurations, by URL with the cluster CA as ``caBundle``: a webhook
   with ``failurePolicy: Fail`` registered before its server listens fails every request it
   matches. Last, waits until ``probe`` sees the API server call them (a new configuration
   takes the API server a moment to pick up), so the first object after ``up`` is never missed.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from extender.localcluster import config, kustomize, pki as pki_mod, processes
from extender.localcluster.apiclient import CRD_PATH, ApiClient, http_ok, wait_healthy
from extender.localcluster.errors import ClusterError

WEBHOOK_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}


@dataclass(frozen=True)
class Manager:
    """One controller manager, as ``start`` installs and runs it."""

    name: str
    """Process, pid and log file name."""
    title: str
    """For progress lines, e.g. ``JobSet v0.12.0``."""
    sources: kustomize.Sources
    webhook_port: int
    health_port: int
    """Its health probes, plain HTTP: ``/readyz`` must answer 200."""
    cert_dir: Path
    """Where its webhook server reads ``tls.crt`` and ``tls.key``."""
    config_file: Path
    config: dict[str, Any]
    argv: list[str]
    env: dict[str, str]
    probe: Callable[[ApiClient], bool]
    """True once the API server calls the manager's webhooks."""
    namespace: str | None = None
    """A namespace the manager expects to exist (Kueue's own), created first."""

    @property
    def webhook_base(self) -> str:
        return webhook_base(self.webhook_port)


def webhook_base(port: int) -> str:
    return f"https://{config.HOST}:{port}"


def start(workdir: Path, api: ApiClient, pki: pki_mod.Pki, manager: Manager,
          log: TextIO = sys.stderr, timeout: float = 180.0) -> processes.Running:
    """Install and run ``manager`` (module docstring); raise ClusterError if it fails."""
    base, ca = manager.webhook_base, pki.ca_cert.read_bytes()
    _say(log, f"installing {manager.title}: {len(manager.sources.crds)} CRDs"
              + (f", namespace {manager.namespace}" if manager.namespace else ""))
    if manager.namespace:
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": manager.namespace}})
    crds = kustomize.bind_crds(manager.sources.crds, base, ca)
    for crd in crds:
        api.create(CRD_PATH, crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while not api.crd_established(name):
            if time.monotonic() > deadline:
                raise ClusterError(f"{manager.title}: CRD {name} not Established after {timeout:.0f}s")
            time.sleep(0.2)

    pki_mod.issue_serving_cert(pki, manager.cert_dir / "tls.crt", manager.cert_dir / "tls.key",
                               f"{manager.name}-webhooks")
    manager.config_file.write_text(config.dump_yaml(manager.config))
    _say(log, f"starting {manager.title}: webhooks on {base}")
    proc = processes.start(workdir, manager.name, manager.argv, manager.env)
    wait_healthy(workdir, proc, lambda: http_ok(f"http://{config.HOST}:{manager.health_port}/readyz"), timeout)
    for webhook_config in kustomize.bind_webhooks(manager.sources.webhook_configurations, base, ca):
        api.create(WEBHOOK_PATHS[webhook_config["kind"]], webhook_config)
    wait_healthy(workdir, proc, lambda: manager.probe(api), timeout)
    return proc


def _say(log: TextIO, message: str) -> None:
    print(f"railyard: {message}", file=log, flush=True)
