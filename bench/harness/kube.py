"""The harness's client of the local API server: pooled HTTPS with the admin certificate, and
a watch thread that hands every object it sees to ``handle``."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import orjson
import urllib3

from extender.localcluster import pki as pki_mod

#: Concurrent creations: enough to keep the API server busy on 2 cores (as ``cluster up`` does).
CREATE_THREADS = 16


class Kube:
    """Pooled HTTPS to the local API server with the admin client certificate."""

    def __init__(self, api_url: str, pki: pki_mod.Pki) -> None:
        self.url = api_url
        self._kw: dict[str, Any] = dict(cert_reqs="CERT_REQUIRED", ca_certs=str(pki.ca_cert),
                                        cert_file=str(pki.admin_cert), key_file=str(pki.admin_key), retries=False)
        self.pool = urllib3.PoolManager(num_pools=2, maxsize=CREATE_THREADS + 2, block=True,
                                        timeout=urllib3.Timeout(connect=5, read=60), **self._kw)

    def create(self, path: str, obj: dict[str, Any], attempts: int = 5) -> bool:
        """POST; 409 counts as created (a retried create). Retries transient failures."""
        body = orjson.dumps(obj)
        for attempt in range(attempts):
            try:
                r = self.pool.request("POST", self.url + path, body=body,
                                      headers={"Content-Type": "application/json"})
                if r.status in (200, 201, 202, 409):
                    return True
                if r.status < 500 and r.status != 429:
                    print(f"bench: create {path} {obj['metadata']['name']}: HTTP {r.status} "
                          f"{r.data[:300]!r}", file=sys.stderr)
                    return False
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(0.2 * (attempt + 1))
        return False

    def post(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """POST once and return the answer; raises on any status but 200/201."""
        r = self.pool.request("POST", self.url + path, body=orjson.dumps(obj),
                              headers={"Content-Type": "application/json"})
        if r.status not in (200, 201):
            raise RuntimeError(f"POST {path}: HTTP {r.status} {r.data[:300]!r}")
        return orjson.loads(r.data)

    def get(self, path: str) -> dict[str, Any]:
        r = self.pool.request("GET", self.url + path)
        if r.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {r.status}")
        return orjson.loads(r.data)

    def text(self, path: str) -> str:
        """GET a text document (the API server's /metrics), or a comment saying why not."""
        try:
            r = self.pool.request("GET", self.url + path)
        except urllib3.exceptions.HTTPError as exc:
            return f"# GET {path} failed: {exc}\n"
        return r.data.decode() if r.status == 200 else f"# GET {path}: HTTP {r.status}\n"

    def watch_pool(self) -> urllib3.PoolManager:
        return urllib3.PoolManager(num_pools=1, maxsize=1,
                                   timeout=urllib3.Timeout(connect=5, read=None), **self._kw)


class Watch(threading.Thread):
    """Follows one collection (``path``) from now on and calls ``handle`` with each object seen.

    ``lock`` guards what ``handle`` writes; ``error`` keeps the last reason the watch had to
    reconnect."""

    def __init__(self, kube: Kube, path: str, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self._kube, self.path = kube, path
        self._stop = threading.Event()
        self.lock = threading.Lock()
        self.error: str | None = None

    def handle(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        pool = self._kube.watch_pool()
        rv = self._kube.get(self.path + "?limit=1")["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            try:
                resp = pool.request("GET", f"{self._kube.url}{self.path}?watch=1&allowWatchBookmarks=true"
                                    f"&resourceVersion={rv}&timeoutSeconds=600", preload_content=False)
                buf = b""
                for chunk in resp.stream(65536):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if line:
                            rv = self._event(orjson.loads(line)) or rv
                    if self._stop.is_set():
                        break
                resp.release_conn()
            except (urllib3.exceptions.HTTPError, ValueError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.5)

    def _event(self, event: dict[str, Any]) -> str | None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise ValueError(f"watch error: {obj.get('message')}")
        if event.get("type") != "BOOKMARK":
            self.handle(obj)
        return (obj.get("metadata") or {}).get("resourceVersion")
