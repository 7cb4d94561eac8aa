"""Talking to the local cluster while ``up`` builds it: the admin API client and health polls.

Shared by ``cluster.py`` (the control plane), ``managers.py`` (Kueue and the workload
controllers) and ``replicas.py``; it knows no component of its own.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import urllib3

from extender.localcluster import nodes as nodes_mod, pki as pki_mod, processes
from extender.localcluster.errors import ClusterError

#: Concurrent node/pod creations: enough to keep the API server busy on 2 cores.
CREATE_PARALLELISM = 16
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class ApiClient:
    """Just enough of the Kubernetes API for setup, over one pooled urllib3 connection pool.

    The kubernetes package's models cost about a millisecond per Node to (de)serialize;
    creating 1,000 nodes from 16 threads is bound by the API server only this way.
    """

    def __init__(self, api_url: str, pki: pki_mod.Pki, maxsize: int = CREATE_PARALLELISM) -> None:
        self._pool = urllib3.PoolManager(
            num_pools=2, maxsize=maxsize, block=True,
            cert_reqs="CERT_REQUIRED", ca_certs=str(pki.ca_cert),
            cert_file=str(pki.admin_cert), key_file=str(pki.admin_key),
            timeout=urllib3.Timeout(connect=2, read=30), retries=False,
        )
        self._url = api_url

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        data = None if body is None else nodes_mod.dumps(body)
        response = self._pool.request(
            method, self._url + path, body=data,
            headers={"Content-Type": content_type, "Accept": "application/json"})
        return response.status, response.data

    def ok(self, path: str) -> bool:
        try:
            return self.request("GET", path)[0] == 200
        except urllib3.exceptions.HTTPError:
            return False

    def create(self, path: str, obj: dict[str, Any]) -> None:
        """POST ``obj``; an object that already exists is fine (a retried create)."""
        status, data = self.request("POST", path, obj)
        if status not in (200, 201, 202, 409):
            name = obj.get("metadata", {}).get("name")
            raise ClusterError(f"creating {obj.get('kind')} {name} failed: HTTP {status}: {api_message(data)}")

    def dry_run(self, path: str, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST ``obj`` with ``dryRun=All``: admission webhooks run, nothing is stored. Returns the
        status and the decoded answer (the object, or a Status); a transport error is (0, {})."""
        try:
            status, data = self.request("POST", f"{path}?dryRun=All", obj)
            return status, json.loads(data)
        except (urllib3.exceptions.HTTPError, ValueError):
            return 0, {}

    def crd_established(self, name: str) -> bool:
        status, data = self.request("GET", f"{CRD_PATH}/{name}")
        if status != 200:
            return False
        conditions = json.loads(data).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def missing_nodes(self, names: list[str]) -> list[str]:
        status, data = self.request("GET", "/api/v1/nodes")
        if status != 200:
            raise ClusterError(f"listing nodes failed: HTTP {status}: {api_message(data)}")
        present = {item["metadata"]["name"] for item in json.loads(data)["items"]}
        return [n for n in names if n not in present]


def api_message(data: bytes) -> str:
    try:
        return json.loads(data).get("message", "")
    except ValueError:
        return data[:200].decode("utf-8", "replace")


def wait_healthy(workdir: Path, proc: processes.Running, check: Callable[[], bool], timeout: float) -> None:
    """Poll ``check`` until it passes; fail at once if the process dies, with its log tail."""
    deadline = time.monotonic() + timeout
    while True:
        if not processes.is_alive(proc):
            raise ClusterError(
                f"{proc.name} exited during startup; last lines of {processes.log_path(workdir, proc.name)}:\n"
                + processes.tail(processes.log_path(workdir, proc.name)))
        if check():
            return
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{proc.name} not healthy after {timeout:.0f}s; see {processes.log_path(workdir, proc.name)}")
        time.sleep(0.2)


def wait_healthy_or_restart(workdir: Path, proc: processes.Running, check: Callable[[], bool], timeout: float,
                            known_race: str, said: Callable[[str], None], env: dict[str, str] | None = None,
                            starts: int = 3) -> processes.Running:
    """``wait_healthy``, but a process that dies with ``known_race`` in its log (a startup race
    of the component's own, not of the cluster's) is started again, up to ``starts`` starts in
    all, each said, with ``env`` (its log kept as ``<name>.log.1``); any other death fails at once."""
    for start in range(2, starts + 2):
        try:
            wait_healthy(workdir, proc, check, timeout)
            return proc
        except ClusterError:
            log = processes.log_path(workdir, proc.name)
            if start > starts or processes.is_alive(proc) or known_race not in log.read_text(errors="replace"):
                raise
            said(f"{proc.name} died of its known startup race ({known_race}); starting it again ({start}/{starts})")
            proc = processes.restart(workdir, proc.name, env)
    raise AssertionError("unreachable")


def http_ok(url: str, insecure: bool = False) -> bool:
    return http_text(url, insecure) is not None


def http_text(url: str, insecure: bool = False) -> str | None:
    """The body of a 200 answer, or None."""
    context = None
    if url.startswith("https"):
        context = ssl.create_default_context()
        if insecure:  # kube-scheduler and kube-controller-manager serve a self-signed cert made in memory
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.read().decode("utf-8", "replace") if response.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None
