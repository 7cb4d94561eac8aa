"""The doors to the API server: raw JSON, no client model classes.

- ``Api``: blocking calls over the kubernetes client's connection (lists, watches, events,
  deletes). The kubernetes client supplies configuration, credentials, TLS and connection
  pooling; its generated model classes are skipped, because building them for 100,000 pods
  costs seconds and their validation rejects objects newer than the client.
- ``AsyncApi``: the hot writes (Bindings), as coroutines over one aiohttp connection pool on an
  event loop thread of its own, with the same credentials. A gang's Bindings go out together
  from one thread instead of one thread each; the kubernetes client's request path (parameter
  sanitising, urllib3) cost about 1 ms of CPU per Binding in the benchmarks (issue 13).
  aiohttp's client speaks HTTP/1.1: concurrency is bounded by the pool's keep-alive connections.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any, Coroutine, Iterator, Sequence, TypeVar

import aiohttp
import orjson
import urllib3
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from extender.adapters.k8s.errors import KubernetesError, error_for_status


class Api:
    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (),
                body: Any = None, timeout: float | tuple[float, float] | None = 30,
                content_type: str = "application/json") -> urllib3.BaseHTTPResponse:
        """Send one request; a non-2xx answer raises the matching KubernetesError."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        what = f"{method} {path}"
        try:
            m, url, hdrs, data, post = self.client.param_serialize(
                method=method, resource_path=path, query_params=list(query), header_params=headers,
                body=body, auth_settings=["BearerToken"])
            resp = self.client.call_api(m, url, hdrs, data, post, _request_timeout=timeout).response
        except ApiException as exc:  # the REST layer's own failures (e.g. connection refused)
            raise error_for_status(exc.status or 0, f"{what}: {exc.reason or exc}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise error_for_status(0, f"{what}: {type(exc).__name__}: {exc}") from None
        if not 200 <= resp.status <= 299:
            raw = resp.read()
            resp.release_conn()
            raise error_for_status(resp.status, f"{what}: {resp.status} {_status_message(raw, resp.reason)}")
        return resp

    def json(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        resp = self.request(method, path, **kw)
        try:
            raw = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise error_for_status(0, f"{method} {path}: {type(exc).__name__}: {exc}") from None
        finally:
            resp.release_conn()
        try:
            return orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as exc:
            raise KubernetesError(f"{method} {path}: the API server sent invalid JSON: {exc}") from None


T = TypeVar("T")


class AsyncApi:
    """JSON requests as coroutines on one keep-alive connection pool; ``run`` blocks a caller's
    thread until a coroutine is done. ``close()`` stops the loop."""

    def __init__(self, configuration: Configuration, *, pool: int = 64) -> None:
        self._config = configuration
        self._base = configuration.host.rstrip("/")
        self._ssl: ssl.SSLContext | bool = tls_context(configuration) if self._base.startswith("https:") else False
        self._server_name = getattr(configuration, "tls_server_name", None) or None
        self.loop = asyncio.new_event_loop()
        """The loop the pool lives on: its coroutines run there."""
        self._thread = threading.Thread(target=self.loop.run_forever, name="k8s-writes", daemon=True)
        self._thread.start()
        self._session: aiohttp.ClientSession = self.run(self._open(pool))

    async def _open(self, pool: int) -> aiohttp.ClientSession:
        # trust_env False: no proxy from the environment between railyard and its API server.
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=pool, ssl=self._ssl),
                                     trust_env=False, skip_auto_headers=("User-Agent",))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:  # it would wait for itself forever
            coro.close()
            raise RuntimeError("AsyncApi.run called on its own loop: await the coroutine instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def json(self, method: str, path: str, *, body: Any = None, timeout: float = 30,
                   content_type: str = "application/json") -> dict[str, Any]:
        """One request; a non-2xx answer or no answer raises the matching KubernetesError."""
        headers = {"Accept": "application/json", "User-Agent": "railyard"}
        token = self._config.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = orjson.dumps(body)
        what = f"{method} {path}"
        try:
            async with self._session.request(method, self._base + path, data=data, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=timeout),
                                             server_hostname=self._server_name) as resp:
                raw = await resp.read()
                status, reason = resp.status, resp.reason
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise error_for_status(0, f"{what}: {type(exc).__name__}: {exc}") from None
        if not 200 <= status <= 299:
            raise error_for_status(status, f"{what}: {status} {_status_message(raw, reason)}")
        try:
            return orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as exc:
            raise KubernetesError(f"{what}: the API server sent invalid JSON: {exc}") from None

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.run(self._session.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


def tls_context(cfg: Configuration) -> ssl.SSLContext:
    """The kubernetes client's TLS settings (CA, client certificate, verification) as an SSLContext."""
    cadata = cfg.ca_cert_data
    if isinstance(cadata, bytes):
        cadata = cadata.decode()
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None, cadata=cadata or None)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


def json_lines(resp: urllib3.BaseHTTPResponse, chunk: int = 1 << 16) -> Iterator[dict[str, Any]]:
    """Each newline-delimited JSON document of a streaming (watch) response."""
    rest = b""
    for data in resp.stream(chunk, decode_content=True):
        lines = (rest + data).split(b"\n")
        rest = lines.pop()  # the part after the last newline: an incomplete document or b""
        for line in lines:
            if line.strip():
                yield orjson.loads(line)
    if rest.strip():
        yield orjson.loads(rest)


def _status_message(raw: bytes, reason: str | None) -> str:
    """The API server's Status message, else the HTTP reason."""
    try:
        status = orjson.loads(raw)
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    except orjson.JSONDecodeError:
        pass
    return reason or "no reason given"
